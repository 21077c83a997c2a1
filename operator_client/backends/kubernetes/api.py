"""The Kubernetes API calls of the backend, through the official `kubernetes` client.

Imported only when a cluster is used (the client costs ~0.5 s and 65 MB): this package
is the only one that imports `kubernetes`.
Server-side apply with field manager `kctl-train`; watches with resourceVersion that re-list
on 410 Gone and carry a client-side request timeout, so a network partition cannot hang.

Every call retries what a control plane answers while it restarts or sheds load: refused
or reset connections, timeouts, 429 (after its Retry-After), 500, 502, 503 and 504, with a
backoff doubling to 8 s, for PATIENCE seconds (a watch keeps following through WAIT_PATIENCE
of such trouble). The official client retries only GET and DELETE, only on 429 and 503,
and never PATCH; a server-side apply is idempotent, so it is retried too. 401, 403, 404,
409 and 422 are answers, not trouble: they are final.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from ...errors import ClusterError
from ...kubeflow.kinds import KINDS, Kind, kind_of

FIELD_MANAGER = "kctl-train"
WATCH_SECONDS = 60  # the server closes each watch after this; we then watch again
REQUEST_TIMEOUT = (10, WATCH_SECONDS + 30)  # (connect, read): a partition never hangs us
PATIENCE = 60.0  # how long one call retries a control plane in trouble
WAIT_PATIENCE = 300.0  # how long following a job rides out such trouble
MAX_BACKOFF = 8.0
TRANSIENT = {429, 500, 502, 503, 504}
# A server-side apply naming a field the served CRD does not declare (kubernetes issues
# 122480, 139253): a 500, not a 422.
UNDECLARED = re.compile(r"(\.[\w.\[\]=-]+): field not declared in schema")

T = TypeVar("T")


def retry_after(exc: BaseException) -> float | None:
    """Whether trying the same request later may succeed, and after how long at least
    (None: it would not)."""
    if isinstance(exc, ApiException):
        if exc.status not in TRANSIENT or UNDECLARED.search(str(exc.body or "")):
            return None
        header = (exc.headers or {}).get("Retry-After", "") if exc.headers else ""
        try:
            return max(0.0, float(header))
        except ValueError:
            return 0.0
    transient = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)
    return 0.0 if isinstance(exc, transient) else None


def retrying(
    what: str,
    call: Callable[[], T],
    patience: float = PATIENCE,
    say: Callable[[str], None] | None = None,
) -> T:
    """`call()`, again after transient failures (retry_after) with backoff, for at most
    `patience` seconds; the last failure is raised. `say` hears each retry."""
    deadline = time.monotonic() + patience
    delay = 0.5
    while True:
        try:
            return call()
        except Exception as exc:
            after = retry_after(exc)
            if after is None:
                raise
            wait = max(after, delay)
            if time.monotonic() + wait > deadline:
                raise
            if say is not None:
                say(f"{what}: {_brief(exc)}; trying again in {wait:.1f}s")
            time.sleep(wait)
            delay = min(delay * 2, MAX_BACKOFF)


def _brief(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return type(exc).__name__


@dataclass(frozen=True)
class Conflict:
    field: str
    message: str


class ApplyConflict(ClusterError):
    """Server-side apply found fields owned by another manager."""

    def __init__(self, name: str, conflicts: list[Conflict]) -> None:
        lines = "\n  ".join(f"{c.field}: {c.message}" for c in conflicts)
        super().__init__(
            f"{name}: fields managed by someone else would change:\n  {lines}\n"
            "re-run with --force-conflicts to take them over",
            409,
        )
        self.conflicts = conflicts


def _status_message(exc: ApiException) -> tuple[str, dict[str, Any]]:
    try:
        body: dict[str, Any] = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    return str(body.get("message") or exc.reason or exc.status), body


def connect(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client configured the kubectl way: --kubeconfig, else $KUBECONFIG or
    ~/.kube/config, with --context; in a pod without a kubeconfig, the in-cluster config."""
    try:
        in_pod = "KUBERNETES_SERVICE_HOST" in os.environ
        # Read $KUBECONFIG now: the client's own default was fixed when it was imported.
        # Several files separated by ':' are merged, as kubectl does.
        files = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        present = any(os.path.exists(os.path.expanduser(f)) for f in files.split(os.pathsep))
        if kubeconfig or context or not in_pod or present:
            return config.new_client_from_config(config_file=files, context=context)
        config.load_incluster_config()
        return client.ApiClient()
    except (ConfigException, FileNotFoundError) as exc:
        raise ClusterError(
            f"no usable Kubernetes configuration ({exc}); set KUBECONFIG or pass "
            "--kubeconfig/--context, or run with --local"
        ) from None


class Api:
    """The calls kctl-train makes, each with a timeout and errors as ClusterError.
    `say` hears what a call rides out (a retry, a watch started again)."""

    def __init__(self, api: client.ApiClient, say: Callable[[str], None] | None = None) -> None:
        self.api = api
        self.say = say
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def _call(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        patience: float = PATIENCE,
        **kwargs: Any,
    ) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            return retrying(what, lambda: fn(*args, **kwargs), patience, self.say)
        except ApiException as exc:
            message, _ = _status_message(exc)
            raise ClusterError(f"{what}: {message}", int(exc.status or 0)) from None
        except Exception as exc:  # urllib3 connection errors, timeouts
            raise ClusterError(f"{what}: cannot reach the API server ({exc})") from None

    def raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A call's JSON body as a dict: no model objects (faster, and tolerant of fields
        the client's models do not know)."""
        response = self._call(what, fn, *args, _preload_content=False, **kwargs)
        try:
            body: dict[str, Any] = json.loads(response.data or b"{}")
            return body
        finally:
            response.release_conn()

    def read_path(self, what: str, path: str) -> dict[str, Any]:
        """GET a path of the API as JSON (discovery, OpenAPI): what no typed call covers."""
        return self.raw(
            what,
            self.api.call_api,
            path,
            "GET",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )

    # the job

    def apply(
        self, manifest: Mapping[str, Any], *, dry_run: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """Server-side apply; returns the object as the server has it (or would have it)."""
        meta = manifest["metadata"]
        kind = kind_of(manifest)
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER}
        if force:
            kwargs["force"] = True
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            # Raw: the client's response map has no entry for 201 Created and would
            # return None for a new job.
            response = retrying(
                f"apply {kind.short}/{meta['name']}",
                lambda: self.custom.patch_namespaced_custom_object(
                    kind.group,
                    kind.version,
                    meta["namespace"],
                    kind.plural,
                    meta["name"],
                    dict(manifest),  # sent as JSON, which is YAML: the apply-patch body
                    _content_type="application/apply-patch+yaml",
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                    **kwargs,
                ),
                say=self.say,
            )
            try:
                result: dict[str, Any] = json.loads(response.data)
            finally:
                response.release_conn()
            return result
        except ApiException as exc:
            message, body = _status_message(exc)
            if exc.status == 409:
                causes = body.get("details", {}).get("causes", [])
                raise ApplyConflict(
                    f"{kind.short}/{meta['name']}",
                    [Conflict(c.get("field", "?"), c.get("message", "")) for c in causes]
                    or [Conflict("?", message)],
                ) from None
            undeclared = UNDECLARED.search(message)
            if exc.status == 500 and undeclared and kind.kind == "TrainJob":
                raise ClusterError(
                    f"apply {kind.short}/{meta['name']}: this cluster's TrainJob CRD is older "
                    f"than Trainer v2.3 (it does not declare {undeclared.group(1)}): upgrade "
                    "Kubeflow Trainer to v2.3, or use --operator pytorchjob",
                    500,
                ) from None
            if exc.status == 422 and "immutable" in message.lower():
                raise ClusterError(
                    f"{kind.short}/{meta['name']}: {message}\nthis field cannot change on an "
                    f"existing job: `kctl-train delete {meta['name']}` first, or use a new name",
                    422,
                ) from None
            raise ClusterError(
                f"apply {kind.short}/{meta['name']}: {message}", exc.status
            ) from None
        except Exception as exc:
            raise ClusterError(f"apply: cannot reach the API server ({exc})") from None

    def get(
        self, kind: Kind, namespace: str, name: str, patience: float = PATIENCE
    ) -> dict[str, Any]:
        obj: dict[str, Any] = self._call(
            f"{kind.short}/{name}",
            self.custom.get_namespaced_custom_object,
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            patience=patience,
        )
        return obj

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        """Every PyTorchJob and TrainJob of a namespace (or all). A kind whose CRD the
        cluster lacks has none; ClusterError when it has neither."""
        found: list[dict[str, Any]] = []
        missing: list[ClusterError] = []
        for kind in KINDS:
            what = f"list {kind.plural}"
            try:
                if namespace:
                    body = self._call(
                        what,
                        self.custom.list_namespaced_custom_object,
                        kind.group,
                        kind.version,
                        namespace,
                        kind.plural,
                    )
                else:
                    body = self._call(
                        what,
                        self.custom.list_cluster_custom_object,
                        kind.group,
                        kind.version,
                        kind.plural,
                    )
            except ClusterError as exc:
                if exc.code == 403 and not namespace:  # a Role grants one namespace
                    raise ClusterError(
                        f"{exc}; list one namespace with -n NAMESPACE", 403
                    ) from None
                if exc.code != 404:
                    raise
                missing.append(exc)
                continue
            found += [{"kind": kind.kind, **item} for item in body.get("items", [])]
        if len(missing) == len(KINDS):
            raise ClusterError(
                "; ".join(str(e) for e in missing)
                + " (neither the PyTorchJob nor the TrainJob CRD is installed: kctl-train "
                "doctor says more)",
                404,
            )
        return found

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        """Delete with foreground propagation: the job goes once its pods are gone (a
        TrainJob takes its JobSet with it: deleting only the JobSet would rerun it)."""
        self._call(
            f"delete {kind.short}/{name}",
            self.custom.delete_namespaced_custom_object,
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            propagation_policy="Foreground",
        )

    def find(
        self, namespace: str, name: str, kinds: Sequence[Kind] = KINDS
    ) -> dict[str, Any] | None:
        """The job of that name among `kinds` (a PyTorchJob or a TrainJob), or None when
        there is none (other errors raise; a cluster without a kind's CRD has none)."""
        for kind in kinds:
            try:
                return self.get(kind, namespace, name)
            except ClusterError as exc:
                if exc.code != 404:
                    raise
        return None

    def watch_job(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        stop: Callable[[dict[str, Any]], bool],
        watch_seconds: int = WATCH_SECONDS,
    ) -> Iterator[dict[str, Any]]:
        """The job's object each time it changes, until stop(object) is true. Starts from
        a GET; a watch expiring (410 Gone), dropping or answering with trouble (a refused
        connection, 429, 5xx) re-reads and watches again, riding out WAIT_PATIENCE seconds
        of a control plane away."""
        obj = self.get(kind, namespace, name, patience=WAIT_PATIENCE)
        yield obj
        delay = 0.5
        while not stop(obj):
            rv = obj.get("metadata", {}).get("resourceVersion")
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object,
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                field_selector=f"metadata.name={name}",
                resource_version=rv,
                timeout_seconds=watch_seconds,
                _request_timeout=(REQUEST_TIMEOUT[0], watch_seconds + 30),
            )
            try:
                for event in stream:
                    if event["type"] == "DELETED":
                        raise ClusterError(f"{kind.short}/{name} was deleted", 404)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        obj = event["object"]
                        delay = 0.5
                        yield obj
                        if stop(obj):
                            return
            except ApiException as exc:
                if exc.status != 410 and retry_after(exc) is None:
                    raise ClusterError(
                        f"watch {kind.short}/{name}: {exc.reason}", exc.status
                    ) from None
                if exc.status != 410:
                    if self.say is not None:
                        self.say(f"watch {kind.short}/{name}: {_brief(exc)}; watching again")
                    time.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF)
            except ClusterError:
                raise
            except Exception:  # a dropped connection: read the object again, then watch
                time.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)
            obj = self.get(kind, namespace, name, patience=WAIT_PATIENCE)
            yield obj

    # pods

    def pods(self, kind: Kind, namespace: str, name: str) -> list[dict[str, Any]]:
        """The job's trainer pods, as dicts, in rank order (Master first)."""
        body = self.raw(
            f"pods of {name}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=kind.pod_selector(name),
        )
        pods = list(body.get("items", []))
        return sorted(pods, key=lambda p: kind.order(name, p["metadata"]["name"]))

    def pods_by_job(
        self, kind: Kind, namespace: str | None
    ) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Every pod of one kind's jobs in a namespace (or all), in one call, by
        (namespace, job)."""
        label = kind.job_label
        if namespace:
            body = self.raw("pods", self.core.list_namespaced_pod, namespace, label_selector=label)
        else:
            body = self.raw("pods", self.core.list_pod_for_all_namespaces, label_selector=label)
        grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in body.get("items", []):
            meta = pod["metadata"]
            key = (meta.get("namespace", ""), meta["labels"][label])
            grouped.setdefault(key, []).append(pod)
        return grouped

    def warnings(
        self, namespace: str, name: str, kind: str = "Pod", uid: str | None = None
    ) -> list[str]:
        """An object's Warning events as `Reason: message` lines, oldest first; with `uid`,
        only this object's (an earlier pod or job of the same name keeps its events for an
        hour)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name},type=Warning"
        if uid:
            selector += f",involvedObject.uid={uid}"
        body = self.raw(
            f"events of {name}", self.core.list_namespaced_event, namespace, field_selector=selector
        )
        return [f"{e.get('reason', '?')}: {e.get('message', '')}" for e in body.get("items", [])]

    def pulled(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's `Pulled` events (the kubelet's, one per image a pod's container
        got: pulled, or already present), as the API server still keeps them (an hour)."""
        body = self.raw(
            "image pull events",
            self.core.list_namespaced_event,
            namespace,
            field_selector="reason=Pulled",
        )
        return [e for e in body.get("items", []) if isinstance(e, dict)]

    def log_lines(
        self,
        namespace: str,
        pod: str,
        *,
        container: str,
        follow: bool,
        previous: bool = False,
        tail: int | None = None,
    ) -> Iterator[str]:
        """A pod's log line by line, streamed (never the whole log in memory)."""
        kwargs: dict[str, Any] = {
            "container": container,
            "follow": follow,
            "previous": previous,
            "_preload_content": False,
            "_request_timeout": (10, None) if follow else REQUEST_TIMEOUT,
        }
        if tail is not None:
            kwargs["tail_lines"] = tail
        try:
            response = retrying(
                f"logs of {pod}",
                lambda: self.core.read_namespaced_pod_log(pod, namespace, **kwargs),
                say=self.say,
            )
        except ApiException as exc:
            message, _ = _status_message(exc)
            raise ClusterError(f"logs of {pod}: {message}", exc.status) from None
        pending = b""
        try:
            for chunk in response.stream(1 << 16):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            response.release_conn()
