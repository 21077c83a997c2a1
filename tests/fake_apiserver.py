"""A TEST FIXTURE: a loopback HTTP server speaking the slice of the Kubernetes API that
kctl-train uses, so the real `kubernetes` client can be driven where no API server can run.

Built from the API conventions: resourceVersion on every write, watch streams of
ADDED/MODIFIED/DELETED events (an ERROR 410 Gone for a resourceVersion that is too old,
or a connection dropped on purpose), server-side apply (application/apply-patch+yaml with
fieldManager, managed fields per leaf, 409 conflicts with causes unless force, dryRun=All),
pods with a label selector, pod logs with follow, SelfSubjectAccessReview, namespaces,
Secrets, ServiceAccounts, nodes and the CRDs. Jobs are PyTorchJobs and, where the
TrainJob CRD is installed (`other_crds`), TrainJobs; one name is one job of either kind.
Every request is recorded for assertions. It is not a Kubernetes: no scheduling, no
controllers; tests play the operator (`set_conditions`).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

JOBS = re.compile(
    r"^/apis/(?:kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>pytorchjobs|trainjobs)(?:/(?P<name>[^/]+))?$"
)
KIND_OF = {"pytorchjobs": "PyTorchJob", "trainjobs": "TrainJob"}
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
RESOURCE = {"pytorchjobs": "pytorchjobs.kubeflow.org", "trainjobs": TRAINJOB_CRD}
CORE = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|events|secrets|serviceaccounts)(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass
class State:
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    owners: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
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
    denied: set[tuple[str, str, str]] = field(default_factory=set)  # (verb, resource, sub)
    immutable: str | None = None  # a message: changing an existing job's spec is rejected
    requests: list[Request] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: obj}


class FakeApiServer:
    def __init__(self) -> None:
        self.state = State()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def kubeconfig(self, directory: Path) -> Path:
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


def _bump(state: State, kind: str, obj: dict[str, Any]) -> None:
    state.rv += 1
    obj["metadata"]["resourceVersion"] = str(state.rv)
    state.events.append((state.rv, kind, copy.deepcopy(obj)))
    state.cond.notify_all()


class _Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    # plumbing

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(
        self, code: int, reason: str, message: str, causes: list[Any] | None = None
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
        self._send(code, body)

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
        path = urlparse(self.path).path
        s = self.state
        if m := re.match(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/(.+)$", path):
            crd = m.group(1)
            installed = s.other_crds | ({"pytorchjobs.kubeflow.org"} if s.crd_installed else set())
            if crd in installed:
                body = {"kind": "CustomResourceDefinition", "metadata": {"name": crd}}
                return self._send(200, body)
            return self._status(404, "NotFound", f'customresourcedefinitions "{crd}" not found')
        if m := re.match(
            r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes(?:/(.+))?$", path
        ):
            if "trainjobs.trainer.kubeflow.org" not in s.other_crds:
                return self._status(
                    404, "NotFound", "the server could not find the requested resource"
                )
            items = [
                {"kind": "ClusterTrainingRuntime", "metadata": {"name": n}}
                for n in sorted(s.runtimes)
            ]
            if m.group(1) is None:
                return self._send(200, {"kind": "ClusterTrainingRuntimeList", "items": items})
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

    def _served(self, plural: str) -> bool:
        """Whether the API serves this kind (its CRD is installed); answers 404 if not."""
        s = self.state
        installed = s.crd_installed if plural == "pytorchjobs" else TRAINJOB_CRD in s.other_crds
        if not installed:
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
            for rv, kind, obj in new:
                self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
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
            lines = (
                s.previous_logs if query.get("previous", "").lower() == "true" else s.logs
            ).get(name)
            if lines is None:
                return self._status(
                    400, "BadRequest", f'container "pytorch" in pod "{name}" is waiting to start'
                )
            if "tailLines" in query:
                lines = lines[-int(query["tailLines"]) :]
            self._start_stream("text/plain")
            for line in lines:
                self._chunk(line.encode() + b"\n")
                if query.get("follow", "").lower() == "true":
                    time.sleep(0.01)
            return self._chunk(b"")
        if kind == "pods":
            items = [p for p in s.pods if _selected(p, query.get("labelSelector", ""))]
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
        known = s.secrets if kind == "secrets" else s.service_accounts
        if name in known:
            return self._send(200, {"kind": kind, "metadata": {"name": name, "namespace": ns}})
        self._status(404, "NotFound", f'{kind} "{name}" not found')

    def do_POST(self) -> None:
        _, body = self._read()
        path = urlparse(self.path).path
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            attrs = body["spec"]["resourceAttributes"]
            key = (attrs.get("verb"), attrs.get("resource"), attrs.get("subresource") or "")
            body["status"] = {"allowed": key not in self.state.denied}
            return self._send(201, body)
        self._status(404, "NotFound", f"no route {path}")

    def do_PATCH(self) -> None:
        query, body = self._read()
        m = JOBS.match(urlparse(self.path).path)
        if not m or not m.group("name"):
            return self._status(404, "NotFound", "no route")
        if not self._served(m.group("plural")):
            return None
        if body.get("kind") != KIND_OF[m.group("plural")]:
            return self._status(400, "BadRequest", f"kind {body.get('kind')!r} at {self.path}")
        if self.headers.get("Content-Type") != "application/apply-patch+yaml":
            return self._status(415, "UnsupportedMediaType", "only server-side apply is served")
        manager = query.get("fieldManager")
        if not manager:
            return self._status(400, "BadRequest", "fieldManager is required for apply patch")
        ns, name = m.group("ns"), m.group("name")
        s = self.state
        with s.cond:
            existing = s.jobs.get((ns, name))
            owners = s.owners.setdefault((ns, name), {})
            applied = _leaves({k: v for k, v in body.items() if k != "status"})
            current = _leaves({k: v for k, v in (existing or {}).items() if k != "status"})
            conflicts = [
                {
                    "type": "FieldManagerConflict",
                    "field": "." + path,
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
            merged = copy.deepcopy(body)
            merged["metadata"] = {**(existing or {}).get("metadata", {}), **body["metadata"]}
            merged["metadata"].setdefault("uid", f"uid-{name}")
            merged["metadata"].setdefault("creationTimestamp", "2026-12-02T00:00:00Z")
            if existing is not None and "status" in existing:
                merged["status"] = existing["status"]
            if query.get("dryRun") == "All":
                return self._send(200, merged)
            unchanged = existing is not None and {**existing, "metadata": {}} == {
                **merged,
                "metadata": {},
            }
            if unchanged:
                return self._send(200, existing)
            for path in applied:
                owners[path] = manager
            s.jobs[(ns, name)] = merged
            _bump(s, "MODIFIED" if existing else "ADDED", merged)
            self._send(200 if existing else 201, merged)

    def do_DELETE(self) -> None:
        _, _ = self._read()
        m = JOBS.match(urlparse(self.path).path)
        if not m or not m.group("name"):
            return self._status(404, "NotFound", "no route")
        if not self._served(m.group("plural")):
            return None
        s = self.state
        key = (m.group("ns"), m.group("name"))
        with s.cond:
            job = s.jobs.get(key)
            if job is None or job.get("kind") != KIND_OF[m.group("plural")]:
                return self._status(
                    404, "NotFound", f'{RESOURCE[m.group("plural")]} "{key[1]}" not found'
                )
            del s.jobs[key]
            _bump(s, "DELETED", job)
        self._send(200, {"kind": "Status", "status": "Success"})
