"""A TorchX scheduler that submits kctl-train PyTorchJobs: `torchx run -s kctl_train
dist.ddp -j 2x1 --script train.py`. Registered through TorchX's `torchx.schedulers` entry
point (pyproject.toml; `pip install 'kctl-train[torchx]'`). `--dryrun` prints the exact
PyTorchJob; schedule() applies it with the Kubernetes backend (server-side apply)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, Stream
from torchx.specs import AppDef, AppDryRunInfo, AppState, CfgVal, runopts

from ..render import render, to_yaml
from ..spec import load_job_text
from .torchx_appdef import RoleSpec, job_document

STATES = {
    "Created": AppState.SUBMITTED,
    "Running": AppState.RUNNING,
    "Restarting": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Suspended": AppState.PENDING,
}


def role_spec(role: Any) -> RoleSpec:
    """A TorchX Role as the pure mapping takes it."""
    resource = role.resource
    return RoleSpec(
        name=role.name,
        image=role.image,
        entrypoint=role.entrypoint,
        args=list(role.args),
        num_replicas=role.num_replicas,
        min_replicas=role.min_replicas,
        env=dict(role.env),
        cpu=resource.cpu,
        gpu=resource.gpu,
        mem_mb=resource.memMB,
        max_retries=role.max_retries,
        mounts=list(role.mounts),
    )


class KctlTrainScheduler(Scheduler[dict[str, CfgVal]]):
    def __init__(self, session_name: str) -> None:
        super().__init__("kctl_train", session_name)

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add("namespace", type_=str, default="default", help="Kubernetes namespace")
        opts.add("storage", type_=str, default=None, help="s3://bucket/prefix for checkpoints")
        opts.add("storage_endpoint", type_=str, default=None, help="S3 endpoint (MinIO, ...)")
        opts.add("credentials_secret", type_=str, default=None, help="Secret with AWS_* keys")
        opts.add("queue", type_=str, default=None, help="Kueue LocalQueue")
        opts.add("context", type_=str, default=None, help="kubeconfig context")
        opts.add("kubeconfig", type_=str, default=None, help="kubeconfig file")
        return opts

    def _submit_dryrun(self, app: AppDef, cfg: dict[str, CfgVal]) -> AppDryRunInfo:
        import yaml

        doc = job_document(app.name, [role_spec(r) for r in app.roles], cfg)
        # Through the loader: the same validation and errors as a job.yaml.
        loaded = load_job_text(yaml.safe_dump(doc), f"<torchx app {app.name}>")
        return AppDryRunInfo({"manifest": render(loaded.job), "cfg": dict(cfg)}, _fmt)

    def schedule(self, dryrun_info: AppDryRunInfo) -> str:
        request = dryrun_info.request
        manifest = request["manifest"]
        self._backend(request["cfg"]).apply(manifest)
        return f"{manifest['metadata']['namespace']}:{manifest['metadata']['name']}"

    def _backend(self, cfg: dict[str, Any]) -> Any:
        from ..cluster.kubernetes_backend import KubernetesBackend, connect

        return KubernetesBackend(connect(cfg.get("kubeconfig"), cfg.get("context")))

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        from ..cli.cluster_commands import state
        from ..cluster.errors import ClusterError

        namespace, _, name = app_id.partition(":")
        try:
            obj = self._backend({}).get(namespace, name)
        except ClusterError as exc:
            if exc.code == 404:
                return None
            raise
        conditions = obj.get("status", {}).get("conditions") or [{}]
        return DescribeAppResponse(
            app_id=app_id,
            state=STATES.get(state(obj), AppState.UNKNOWN),
            msg=conditions[-1].get("message", ""),
        )

    def list(self) -> list[ListAppResponse]:
        from ..cli.cluster_commands import state

        jobs = self._backend({}).list_jobs(None)
        return [
            ListAppResponse(
                app_id=f"{j['metadata']['namespace']}:{j['metadata']['name']}",
                state=STATES.get(state(j), AppState.UNKNOWN),
            )
            for j in jobs
            if j["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "kctl-train"
        ]

    def _cancel_existing(self, app_id: str) -> None:
        namespace, _, name = app_id.partition(":")
        self._backend({}).delete(namespace, name)

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: Any = None,
        until: Any = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        import re

        namespace, _, name = app_id.partition(":")
        backend = self._backend({})
        pods = [p["metadata"]["name"] for p in backend.pods(namespace, name)]
        if k >= len(pods):
            return []
        lines = backend.log_lines(namespace, pods[k], follow=should_tail)
        return (line + "\n" for line in lines if regex is None or re.search(regex, line))


def _fmt(request: dict[str, Any]) -> str:
    return to_yaml(request["manifest"])


def create_scheduler(session_name: str, **kwargs: Any) -> KctlTrainScheduler:
    """TorchX's scheduler factory (the `torchx.schedulers` entry point)."""
    return KctlTrainScheduler(session_name)
