"""A TEST FIXTURE: a loopback HTTP server speaking the slice of the Kubernetes API that
kctl-train uses, so the real `kubernetes` client can be driven where no API server can run.
docs/KUBERNETES_FIXTURE.md says which API server behaviour each part follows, and where
in the API server's source that behaviour lives.

Built from the API conventions: resourceVersion on every write, watch streams of
ADDED/MODIFIED/DELETED events kept open across changes (an ERROR 410 Gone for a
resourceVersion that is too old, or a connection dropped on purpose), server-side apply
(application/apply-patch+yaml with fieldManager, managed fields per leaf, other managers'
fields kept, 409 conflicts with causes unless force, dryRun=All, 422 without a
fieldManager, the 500 of a field the served CRD does not declare), foreground deletion
(deletionTimestamp and the foregroundDeletion finalizer until the job's pods are gone),
pods with a label selector per namespace, pod logs with follow and the kubelet's refusals,
SelfSubjectAccessReview and the same authorization on every request (allow-all, or a
Role and ClusterRole such as manifests/rbac's), namespaces, Secrets, ServiceAccounts,
nodes, the CRDs, discovery and OpenAPI v3. Failures are injected on request: refused
connections for a while, or a queue of error answers (429 with Retry-After, 5xx).
Jobs are PyTorchJobs and, where the TrainJob CRD is installed (`other_crds`), TrainJobs;
one name is one job of either kind. Every request is recorded for assertions. It is not a
Kubernetes: no scheduling, no controllers; tests play the operator (`set_conditions`).
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

GROUP_VERSION = {
    "pytorchjobs": ("kubeflow.org", "v1"),
    "trainjobs": ("trainer.kubeflow.org", "v1alpha1"),
}
JOBS = re.compile(
    r"^/apis/(?:kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>pytorchjobs|trainjobs)(?:/(?P<name>[^/]+))?$"
)
KIND_OF = {"pytorchjobs": "PyTorchJob", "trainjobs": "TrainJob"}
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
RESOURCE = {"pytorchjobs": "pytorchjobs.kubeflow.org", "trainjobs": TRAINJOB_CRD}
CORE = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|events|secrets|configmaps|serviceaccounts)"
    r"(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
)
# The labels that tie a pod to its job (the training-operator's, JobSet's).
JOB_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name")
FOREGROUND = "foregroundDeletion"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass
class Failure:
    """An error answer for the next `times` requests whose path matches `path` (and
    whose method is `method`, when given)."""

    code: int
    times: int = 1
    retry_after: int | None = None
    path: str = ""  # a regular expression; "" matches every request
    method: str = ""


@dataclass
class Rule:
    """One rule of an RBAC Role or ClusterRole."""

    groups: set[str]
    resources: set[str]  # "pods", "pods/log", "*"
    verbs: set[str]
    names: set[str] = field(default_factory=set)

    def allows(self, verb: str, group: str, resource: str, name: str) -> bool:
        return (
            (verb in self.verbs or "*" in self.verbs)
            and (group in self.groups or "*" in self.groups)
            and (resource in self.resources or "*" in self.resources)
            and (not self.names or name in self.names)
        )


@dataclass
class State:
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    owners: dict[tuple[str, str], dict[tuple[str, ...], str]] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    rv: int = 100
    oldest_rv: int = 0  # watches from before this get 410 Gone
    drop_watch_after: int | None = None  # close a watch after this many events (once)
    pods: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, list[str]] = field(default_factory=dict)
    pod_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    previous_logs: dict[str, list[str]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=lambda: {"default"})
    secrets: set[str] = field(default_factory=set)
    service_accounts: set[str] = field(default_factory=lambda: {"default"})
    nodes: list[dict[str, Any]] = field(default_factory=list)
    crd_installed: bool = True  # the PyTorchJob CRD
    other_crds: set[str] = field(default_factory=set)  # e.g. trainjobs.trainer.kubeflow.org
    runtimes: set[str] = field(default_factory=set)  # ClusterTrainingRuntime names
    # Whole objects served by name: (plural, name) -> the object (a runtime's spec, a
    # Secret's data); the sets above answer with metadata only.
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # Authorization: None allows everything but `denied` (verb, resource, subresource);
    # a dict (namespace or "" for cluster-wide -> rules) allows only what its rules grant.
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    rbac: dict[str, list[Rule]] | None = None
    immutable: str | None = None  # a message: changing an existing job's spec is rejected
    # (name, message): a validating webhook (the operator's) denies every write of a job
    webhook_denial: tuple[str, str] | None = None
    # The top-level spec fields each plural's served CRD declares (None: any).
    declared: dict[str, set[str]] = field(default_factory=dict)
    pod_linger: float = 0.3  # seconds a deleted job's pods take to go (their grace period)
    failures: list[Failure] = field(default_factory=list)
    down_until: float = 0.0  # connections are refused (and open ones dropped) until then
    requests: list[Request] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)


Path = tuple[str, ...]


def _leaves(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Every leaf of a nested dict by its path (an empty dict, a list: a leaf), as
    managedFields track them."""
    if not prefix and obj == {}:
        return {}
    if isinstance(obj, dict) and obj:
        out: dict[Path, Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, (*prefix, k)))
        return out
    return {prefix: obj}


def _nest(leaves: dict[Path, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (*parents, last), value in leaves.items():
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def role_rules(path: pathlib.Path, namespace: str = "default") -> dict[str, list[Rule]]:
    """A Role (bound in `namespace`) and ClusterRole's rules from an RBAC manifest."""
    granted: dict[str, list[Rule]] = {namespace: [], "": []}
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        scope = namespace if doc["kind"] == "Role" else ""
        for rule in doc.get("rules", []):
            granted[scope].append(
                Rule(
                    set(rule.get("apiGroups", [])),
                    set(rule.get("resources", [])),
                    set(rule.get("verbs", [])),
                    set(rule.get("resourceNames", [])),
                )
            )
    return granted


class FakeApiServer:
    def __init__(self) -> None:
        self.state = State()
        self.handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = self._serve(0)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> ThreadingHTTPServer:
        httpd = ThreadingHTTPServer(("127.0.0.1", port), self.handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd

    def kubeconfig(self, directory: pathlib.Path) -> pathlib.Path:
        path = directory / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "me", "user": {"token": "t0ken"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    # failures on request

    def refuse_for(self, seconds: float) -> None:
        """Refuse connections for `seconds` (the listening socket is closed, open
        connections are dropped), as a control plane being restarted does."""
        self.state.down_until = time.monotonic() + seconds
        self.httpd.shutdown()
        self.httpd.server_close()

        def back() -> None:
            time.sleep(seconds)
            self.httpd = self._serve(self.port)

        threading.Thread(target=back, daemon=True).start()

    def fail(
        self,
        code: int,
        times: int = 1,
        retry_after: int | None = None,
        path: str = "",
        method: str = "",
    ) -> None:
        """Answer the next `times` requests (matching `path`, a regex, and `method`) with
        `code`."""
        with self.state.cond:
            self.state.failures.append(Failure(code, times, retry_after, path, method))

    def bind_role(self, rbac: pathlib.Path, namespace: str = "default") -> None:
        """From now on, allow only what the Role and ClusterRole of `rbac` grant."""
        self.state.rbac = role_rules(rbac, namespace)

    # playing the operator

    def set_conditions(self, namespace: str, name: str, *types: str) -> None:
        """Give the job these conditions (the last one current), as the training-operator
        would; a TrainJob gets what Trainer writes for them instead (trainjob_status)."""
        with self.state.cond:
            job = self.state.jobs[(namespace, name)]
            if job.get("kind") == "TrainJob":
                job["status"] = trainjob_status(types[-1])
                _bump(self.state, "MODIFIED", job)
                return
            job["status"] = {
                "conditions": [
                    {
                        "type": t,
                        "status": "True" if i == len(types) - 1 or t == "Created" else "False",
                        "reason": f"PyTorchJob{t}",
                        "message": f"PyTorchJob {name} is {t.lower()}.",
                        "lastTransitionTime": "2026-12-02T00:00:00Z",
                    }
                    for i, t in enumerate(types)
                ]
            }
            _bump(self.state, "MODIFIED", job)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def trainjob_status(state: str) -> dict[str, Any]:
    """A TrainJob's status in one of the states a PyTorchJob's conditions name: no
    condition while it is Created or Running (only jobsStatus moves), Complete for
    Succeeded, Failed copied from the JobSet's."""
    final = {
        "Succeeded": ("Complete", "AllJobsCompleted", "jobset completed successfully"),
        "Failed": ("Failed", "FailedJobs", "jobset failed due to one or more job failures"),
    }.get(state)
    conditions = (
        [
            {
                "type": final[0],
                "status": "True",
                "reason": final[1],
                "message": final[2],
                "lastTransitionTime": "2026-12-02T00:00:00Z",
            }
        ]
        if final
        else []
    )
    counts = {"Running": (1, 0, 0), "Succeeded": (0, 1, 0), "Failed": (0, 0, 1)}
    active, succeeded, failed = counts.get(state, (0, 0, 0))
    jobs = {"name": "node", "ready": active, "active": active, "succeeded": succeeded}
    return {"conditions": conditions, "jobsStatus": [{**jobs, "failed": failed, "suspended": 0}]}


def _selected(pod: dict[str, Any], selector: str) -> bool:
    """A label selector of `key=value` and `key` (exists) terms, comma-separated."""
    labels = pod["metadata"].get("labels", {})
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


def _namespace(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("namespace", "default"))


def _pods_of(state: State, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in state.pods
        if _namespace(p) == namespace
        and any(p["metadata"].get("labels", {}).get(label) == name for label in JOB_LABELS)
    ]


def _bump(state: State, kind: str, obj: dict[str, Any]) -> None:
    state.rv += 1
    obj["metadata"]["resourceVersion"] = str(state.rv)
    state.events.append((state.rv, kind, copy.deepcopy(obj)))
    state.cond.notify_all()


def _collect_garbage(state: State, key: tuple[str, str], after: float) -> None:
    """The garbage collector of a foreground deletion: the job's pods go (after their
    grace period), then the finalizer, then the job itself (MODIFIED, then DELETED)."""
    time.sleep(after)
    with state.cond:
        job = state.jobs.get(key)
        if job is None:
            return
        state.pods = [p for p in state.pods if p not in _pods_of(state, *key)]
        job["metadata"]["finalizers"] = [
            f for f in job["metadata"].get("finalizers", []) if f != FOREGROUND
        ]
        _bump(state, "MODIFIED", job)
        del state.jobs[key]
        state.owners.pop(key, None)
        _bump(state, "DELETED", job)


# What an authorizer sees of a request: the API server's RequestInfo (verb from the
# method, resource and subresource from the path).
def request_attributes(method: str, path: str, query: dict[str, str]) -> tuple[str, ...] | None:
    """(verb, group, resource, subresource, namespace, name) of a resource request; None
    for what every authenticated user may do (discovery, OpenAPI, access reviews)."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] == "openapi" or path.endswith("selfsubjectaccessreviews"):
        return None
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if rest[0] == "namespaces":  # the namespace object itself
        resource, name, namespace = "namespaces", rest[1] if len(rest) > 1 else "", ""
    watching = query.get("watch", "").lower() in ("true", "1")
    verb = {
        "GET": "watch" if watching else ("get" if name else "list"),
        "PATCH": "patch",
        "DELETE": "delete",
        "POST": "create",
        "PUT": "update",
    }[method]
    return verb, group, resource, subresource, namespace, name


def allowed(
    state: State, verb: str, group: str, resource: str, sub: str, ns: str, name: str
) -> bool:
    if state.rbac is None:
        return (verb, resource, sub) not in state.denied
    full = f"{resource}/{sub}" if sub else resource
    scopes = ([ns] if ns else []) + [""]
    return any(r.allows(verb, group, full, name) for s in scopes for r in state.rbac.get(s, []))


class _Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net/http (the API server) sets it: otherwise a body written
    # after its headers waits for the client's delayed ACK (~40 ms per response).
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def handle_one_request(self) -> None:
        if time.monotonic() < self.state.down_until:
            self.close_connection = True  # a control plane going away drops its connections
            return
        super().handle_one_request()

    # plumbing

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _status(
        self,
        code: int,
        reason: str,
        message: str,
        causes: list[Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if causes:
            body["details"] = {"causes": causes}
        self._send(code, body, headers)

    def _read(self) -> tuple[dict[str, str], Any]:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = yaml.safe_load(raw) if raw else None
        self.state.requests.append(
            Request(self.command, url.path, query, self.headers.get("Content-Type", ""), body)
        )
        return query, body

    def _refused(self, query: dict[str, str]) -> bool:
        """An injected failure, or what the authorizer refuses: answered here (True)."""
        path = urlparse(self.path).path
        with self.state.cond:
            failure = next(
                (
                    f
                    for f in self.state.failures
                    if re.search(f.path, path) and f.method in ("", self.command) and f.times > 0
                ),
                None,
            )
            if failure is not None:
                failure.times -= 1
                if failure.times == 0:
                    self.state.failures.remove(failure)
        if failure is not None:
            reason = {
                429: "TooManyRequests",
                500: "InternalError",
                503: "ServiceUnavailable",
                504: "Timeout",
            }.get(failure.code, "InternalError")
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else None
            self._status(failure.code, reason, f"injected {failure.code}", headers=headers)
            return True
        attributes = request_attributes(self.command, path, query)
        if attributes is not None and not allowed(self.state, *attributes):
            verb, group, resource, sub, ns, name = attributes
            full = f"{resource}/{sub}" if sub else resource
            where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
            self._status(
                403,
                "Forbidden",
                f'{full}{"." + group if group else ""} "{name}" is forbidden: User "me" '
                f'cannot {verb} resource "{full}" in API group "{group}"{where}',
            )
            return True
        return False

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    # verbs

    def do_GET(self) -> None:
        query, _ = self._read()
        if self._refused(query):
            return None
        path = urlparse(self.path).path
        s = self.state
        if m := re.match(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/(.+)$", path):
            crd = m.group(1)
            installed = s.other_crds | ({"pytorchjobs.kubeflow.org"} if s.crd_installed else set())
            if crd in installed:
                plural = crd.split(".", 1)[0]
                return self._send(200, _crd(crd, s.declared.get(plural)))
            return self._status(404, "NotFound", f'customresourcedefinitions "{crd}" not found')
        if m := re.match(r"^/apis/(kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1)$", path):
            return self._discovery(m.group(1))
        if m := re.match(
            r"^/openapi/v3/apis/(kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1)$", path
        ):
            return self._openapi(m.group(1))
        if m := re.match(
            r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes(?:/(.+))?$", path
        ):
            if TRAINJOB_CRD not in s.other_crds:
                return self._status(
                    404, "NotFound", "the server could not find the requested resource"
                )
            items = [
                {"kind": "ClusterTrainingRuntime", "metadata": {"name": n}}
                for n in sorted(s.runtimes)
            ]
            if m.group(1) is None:
                return self._send(200, {"kind": "ClusterTrainingRuntimeList", "items": items})
            if ("clustertrainingruntimes", m.group(1)) in s.objects:
                return self._send(200, s.objects[("clustertrainingruntimes", m.group(1))])
            if m.group(1) in s.runtimes:
                return self._send(200, items[sorted(s.runtimes).index(m.group(1))])
            return self._status(
                404, "NotFound", f'clustertrainingruntimes "{m.group(1)}" not found'
            )
        if m := re.match(r"^/api/v1/namespaces/([^/]+)$", path):
            if m.group(1) in s.namespaces:
                return self._send(200, {"kind": "Namespace", "metadata": {"name": m.group(1)}})
            return self._status(404, "NotFound", f'namespaces "{m.group(1)}" not found')
        if path == "/api/v1/pods":
            items = [p for p in s.pods if _selected(p, query.get("labelSelector", ""))]
            return self._send(200, {"kind": "PodList", "items": items, "metadata": {}})
        if path == "/api/v1/nodes":
            return self._send(200, {"kind": "NodeList", "items": s.nodes, "metadata": {}})
        if m := JOBS.match(path):
            if not self._served(m.group("plural")):
                return None
            return self._get_jobs(m.group("plural"), m.group("ns"), m.group("name"), query)
        if m := CORE.match(path):
            return self._get_core(
                m.group("ns"), m.group("kind"), m.group("name"), bool(m.group("log")), query
            )
        self._status(404, "NotFound", f"no route {path}")

    def _discovery(self, group_version: str) -> None:
        """The APIResourceList of a group version: what it serves (readable by anyone)."""
        plural = "pytorchjobs" if group_version.startswith("kubeflow") else "trainjobs"
        if not self._installed(plural):
            return self._status(404, "NotFound", "the server could not find the requested resource")
        resource = {
            "name": plural,
            "namespaced": True,
            "kind": KIND_OF[plural],
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }
        self._send(
            200, {"kind": "APIResourceList", "groupVersion": group_version, "resources": [resource]}
        )

    def _openapi(self, group_version: str) -> None:
        """The OpenAPI v3 document of a group version (readable by anyone): the job kind's
        schema, with the spec fields the served CRD declares."""
        plural = "pytorchjobs" if group_version.startswith("kubeflow") else "trainjobs"
        if not self._installed(plural):
            return self._status(404, "NotFound", "the server could not find the requested resource")
        group, version = GROUP_VERSION[plural]
        schema = _crd(RESOURCE[plural], self.state.declared.get(plural))["spec"]["versions"][0]
        reverse = ".".join(reversed(group.split(".")))
        body = {
            "openapi": "3.0.0",
            "components": {
                "schemas": {
                    f"{reverse}.{version}.{KIND_OF[plural]}": {
                        **schema["schema"]["openAPIV3Schema"],
                        "x-kubernetes-group-version-kind": [
                            {"group": group, "version": version, "kind": KIND_OF[plural]}
                        ],
                    }
                }
            },
        }
        self._send(200, body)

    def _installed(self, plural: str) -> bool:
        s = self.state
        return s.crd_installed if plural == "pytorchjobs" else TRAINJOB_CRD in s.other_crds

    def _served(self, plural: str) -> bool:
        """Whether the API serves this kind (its CRD is installed); answers 404 if not."""
        if not self._installed(plural):
            self._status(404, "NotFound", "the server could not find the requested resource")
            return False
        return True

    def _get_jobs(
        self, plural: str, ns: str | None, name: str | None, query: dict[str, str]
    ) -> None:
        s = self.state
        kind = KIND_OF[plural]
        if name:
            with s.cond:
                job = s.jobs.get((ns or "", name))
            if job is None or job.get("kind") != kind:
                return self._status(404, "NotFound", f'{RESOURCE[plural]} "{name}" not found')
            return self._send(200, job)
        selected = query.get("fieldSelector", "").removeprefix("metadata.name=")
        if query.get("watch", "").lower() in ("true", "1"):
            return self._watch(kind, ns, selected, query)
        with s.cond:
            items = [
                j
                for (n, _), j in sorted(s.jobs.items())
                if ns in (None, n) and j.get("kind") == kind
            ]
            rv = str(s.rv)
        self._send(
            200, {"kind": f"{kind}List", "items": items, "metadata": {"resourceVersion": rv}}
        )

    def _watch(self, kind: str, ns: str | None, name: str, query: dict[str, str]) -> None:
        """Events of one kind after `resourceVersion`, as they happen, on one stream until
        timeoutSeconds (the watch cache's semantics: 410 for a version it no longer has)."""
        s = self.state
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 30)
        self._start_stream("application/json")
        if since and since < s.oldest_rv:
            self._chunk(
                json.dumps(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "code": 410,
                            "reason": "Expired",
                            "message": "too old resource version",
                        },
                    }
                ).encode()
                + b"\n"
            )
            self._chunk(b"")
            return
        deadline = time.monotonic() + timeout
        sent = 0
        while time.monotonic() < deadline:
            if time.monotonic() < s.down_until:
                self.close_connection = True
                return  # the control plane went away: the stream breaks off
            with s.cond:
                new = [
                    e
                    for e in s.events
                    if e[0] > since
                    and e[2].get("kind") == kind
                    and (not name or e[2]["metadata"]["name"] == name)
                    and ns in (None, e[2]["metadata"]["namespace"])
                ]
                if not new:
                    s.cond.wait(0.2)
                    continue
            for rv, event_type, obj in new:
                self._chunk(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")
                since = rv
                sent += 1
                if s.drop_watch_after is not None and sent >= s.drop_watch_after:
                    s.drop_watch_after = None
                    self.close_connection = True
                    return  # no terminating chunk: the connection just drops
        self._chunk(b"")

    def _get_core(
        self, ns: str, kind: str, name: str | None, log: bool, query: dict[str, str]
    ) -> None:
        s = self.state
        if kind == "pods" and log and name:
            return self._log(ns, name, query)
        if kind == "pods":
            items = [
                p
                for p in s.pods
                if _namespace(p) == ns and _selected(p, query.get("labelSelector", ""))
            ]
            return self._send(200, {"kind": "PodList", "items": items, "metadata": {}})
        if kind == "events":
            wanted = dict(
                term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if term
            )
            items = [
                e
                for e in s.pod_events.get(wanted.get("involvedObject.name", ""), [])
                if "type" not in wanted or e.get("type") == wanted["type"]
            ]
            return self._send(200, {"kind": "EventList", "items": items, "metadata": {}})
        if name is not None and (kind, name) in s.objects:
            return self._send(200, s.objects[(kind, name)])
        known = s.secrets if kind == "secrets" else s.service_accounts
        if name in known:
            return self._send(200, {"kind": kind, "metadata": {"name": name, "namespace": ns}})
        self._status(404, "NotFound", f'{kind} "{name}" not found')

    def _log(self, ns: str, name: str, query: dict[str, str]) -> None:
        """A container's log, or the kubelet's refusal in its own words: no previous
        container to show, or a container that has not started."""
        s = self.state
        container = query.get("container", "pytorch")
        if not any(p["metadata"]["name"] == name and _namespace(p) == ns for p in s.pods) and (
            name not in s.logs and name not in s.previous_logs
        ):
            return self._status(404, "NotFound", f'pods "{name}" not found')
        previous = query.get("previous", "").lower() == "true"
        lines = (s.previous_logs if previous else s.logs).get(name)
        if lines is None:
            message = (
                f'previous terminated container "{container}" in pod "{name}" not found'
                if previous
                else f'container "{container}" in pod "{name}" is waiting to start: '
                "ContainerCreating"
            )
            return self._status(400, "BadRequest", message)
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]) :]
        self._start_stream("text/plain")
        for line in lines:
            self._chunk(line.encode() + b"\n")
            if query.get("follow", "").lower() == "true":
                time.sleep(0.01)
        return self._chunk(b"")

    def do_POST(self) -> None:
        query, body = self._read()
        if self._refused(query):
            return None
        path = urlparse(self.path).path
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            a = body["spec"]["resourceAttributes"]
            verdict = allowed(
                self.state,
                a.get("verb", ""),
                a.get("group") or "",
                a.get("resource", ""),
                a.get("subresource") or "",
                a.get("namespace") or "",
                a.get("name") or "",
            )
            body["status"] = {"allowed": verdict}
            return self._send(201, body)
        self._status(404, "NotFound", f"no route {path}")

    def do_PATCH(self) -> None:
        query, body = self._read()
        if self._refused(query):
            return None
        m = JOBS.match(urlparse(self.path).path)
        if not m or not m.group("name"):
            return self._status(404, "NotFound", "no route")
        plural = m.group("plural")
        if not self._served(plural):
            return None
        if body.get("kind") != KIND_OF[plural]:
            return self._status(400, "BadRequest", f"kind {body.get('kind')!r} at {self.path}")
        if self.headers.get("Content-Type") != "application/apply-patch+yaml":
            return self._status(415, "UnsupportedMediaType", "only server-side apply is served")
        manager = query.get("fieldManager")
        if not manager:
            return self._status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
            )
        declared = self.state.declared.get(plural)
        extra = sorted(set(body.get("spec", {})) - declared) if declared is not None else []
        if extra:
            group, version = GROUP_VERSION[plural]
            return self._status(
                500,
                "InternalError",
                f"failed to create typed patch object ({group}/{version}, Kind="
                f"{KIND_OF[plural]}): .spec.{extra[0]}: field not declared in schema",
            )
        ns, name = m.group("ns"), m.group("name")
        s = self.state
        group = GROUP_VERSION[plural][0]
        if (ns, name) not in s.jobs and not allowed(s, "create", group, plural, "", ns, name):
            # An apply that creates the object needs create as well as patch.
            return self._status(
                403,
                "Forbidden",
                f'{plural}.{group} "{name}" is forbidden: User "me" cannot create resource '
                f'"{plural}" in API group "{group}" in the namespace "{ns}"',
            )
        with s.cond:
            existing = s.jobs.get((ns, name))
            owners = s.owners.setdefault((ns, name), {})
            applied = _leaves({k: v for k, v in body.items() if k != "status"})
            current = _leaves({k: v for k, v in (existing or {}).items() if k != "status"})
            conflicts = [
                {
                    "type": "FieldManagerConflict",
                    "field": "." + ".".join(path),
                    "message": f'conflict with "{owners[path]}"',
                }
                for path, value in applied.items()
                if path in owners and owners[path] != manager and current.get(path) != value
            ]
            if conflicts and query.get("force", "").lower() != "true":
                return self._status(
                    409, "Conflict", f"Apply failed with {len(conflicts)} conflicts", conflicts
                )
            if existing is not None and s.immutable and existing.get("spec") != body.get("spec"):
                return self._status(422, "Invalid", s.immutable)
            if s.webhook_denial is not None:
                # controller-runtime's Denied is a 403; the API server prefixes the name.
                webhook, why = s.webhook_denial
                return self._status(
                    403, "Forbidden", f'admission webhook "{webhook}" denied the request: {why}'
                )
            # Fields this manager owned and no longer applies go; other managers' stay.
            kept = {
                path: value
                for path, value in current.items()
                if not (owners.get(path) == manager and path not in applied)
            }
            merged = _nest({**kept, **applied})
            system = ("uid", "creationTimestamp", "resourceVersion", "deletionTimestamp",
                      "finalizers", "generation")  # fmt: skip
            old_meta = (existing or {}).get("metadata", {})
            merged["metadata"].update({k: old_meta[k] for k in system if k in old_meta})
            merged["metadata"].setdefault("uid", f"uid-{name}")
            merged["metadata"].setdefault("creationTimestamp", "2026-12-02T00:00:00Z")
            if existing is not None and "status" in existing:
                merged["status"] = existing["status"]
            if query.get("dryRun") == "All":
                return self._send(200, merged)
            if existing == merged:  # a no-op apply: no new resourceVersion, no event
                return self._send(200, existing)
            for path in [p for p, o in owners.items() if o == manager and p not in applied]:
                del owners[path]
            for path in applied:
                owners[path] = manager
            s.jobs[(ns, name)] = merged
            _bump(s, "MODIFIED" if existing else "ADDED", merged)
            self._send(200 if existing else 201, merged)

    def do_DELETE(self) -> None:
        query, body = self._read()
        if self._refused(query):
            return None
        m = JOBS.match(urlparse(self.path).path)
        if not m or not m.group("name"):
            return self._status(404, "NotFound", "no route")
        if not self._served(m.group("plural")):
            return None
        s = self.state
        key = (m.group("ns"), m.group("name"))
        policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy")
        with s.cond:
            job = s.jobs.get(key)
            if job is None or job.get("kind") != KIND_OF[m.group("plural")]:
                return self._status(
                    404, "NotFound", f'{RESOURCE[m.group("plural")]} "{key[1]}" not found'
                )
            if policy != "Foreground":
                del s.jobs[key]
                s.owners.pop(key, None)
                s.pods = [p for p in s.pods if p not in _pods_of(s, *key)]
                _bump(s, "DELETED", job)
                return self._send(200, {"kind": "Status", "status": "Success"})
            if not job["metadata"].get("deletionTimestamp"):
                job["metadata"]["deletionTimestamp"] = time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
                )
                job["metadata"]["finalizers"] = [*job["metadata"].get("finalizers", []), FOREGROUND]
                _bump(s, "MODIFIED", job)
                threading.Thread(
                    target=_collect_garbage, args=(s, key, s.pod_linger), daemon=True
                ).start()
            answer = copy.deepcopy(job)
        self._send(200, answer)


def _crd(name: str, spec_fields: set[str] | None) -> dict[str, Any]:
    """The CRD as served: its one version's schema, with the spec fields it declares."""
    plural, group = name.split(".", 1)
    version = GROUP_VERSION.get(plural, (group, "v1"))[1]
    spec: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if spec_fields is not None:
        spec = {
            "type": "object",
            "properties": {f: {"type": "object"} for f in sorted(spec_fields)},
        }
    schema = {"type": "object", "properties": {"spec": spec, "status": {"type": "object"}}}
    return {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
