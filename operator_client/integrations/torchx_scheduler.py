"""A TorchX scheduler that submits kctl-train PyTorchJobs: `torchx run -s kctl_train
dist.ddp -j 2x1 --script train.py`. Registered through TorchX's `torchx.schedulers` entry
point (pyproject.toml; `pip install 'kctl-train[torchx]'`). `--dryrun` prints the exact
PyTorchJob; schedule() applies it through the Client (preflight, webhook check,
server-side apply)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import yaml
from torchx.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, Stream
from torchx.specs import AppDef, AppDryRunInfo, AppState, CfgVal, Role, runopts
from torchx.workspace.api import WorkspaceMixin

from ..errors import JobNotFound
from ..render import render, to_yaml
from ..spec import load_job_text
from .torchx_appdef import RoleSpec, app_id, job_document, parse_app_id

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger(__name__)

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


class KctlTrainScheduler(WorkspaceMixin[None], Scheduler[dict[str, CfgVal]]):
    """Schedules through the kctl-train Client: the same preflight, webhook check and
    server-side apply as `kctl-train apply`, on the cluster of `kubeconfig`/`context`.
    A TorchX workspace (`torchx run --workspace DIR`, the current directory by default)
    is built by `kctl-train build` onto the role's image and pushed to `image_repo`; the
    job runs it pinned by digest."""

    def __init__(self, session_name: str, **defaults: Any) -> None:
        super().__init__("kctl_train", session_name)
        self.defaults = {k: defaults.get(k) for k in ("kubeconfig", "context")}

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

    def workspace_opts(self) -> runopts:
        opts = runopts()
        opts.add(
            "image_repo",
            type_=str,
            default=None,
            help="registry repository the workspace image is pushed to (kctl-train build)",
        )
        opts.add("registry_auth", type_=str, default=None, help="registry credentials file")
        return opts

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """TorchX's workspace hook: the same build as `kctl-train build` (content tag,
        nothing rebuilt or pushed when the registry has it), the role pinned to it."""
        repository = cfg.get("image_repo")
        if not repository:
            # TorchX passes the current directory as the workspace by default: without a
            # repository to push to, the role's image runs as it is (as before workspaces).
            log.info(
                "workspace %s not built: set -cfg image_repo=REGISTRY/REPOSITORY to build "
                "it onto %s and run it pinned",
                workspace,
                role.image,
            )
            return
        auth = cfg.get("registry_auth")
        built = self._client(cfg).build(
            workspace.removeprefix("file://"),
            base=role.image,
            repository=str(repository),
            registry_auth=str(auth) if auth else None,
        )
        role.image = built.reference

    def _submit_dryrun(self, app: AppDef, cfg: dict[str, CfgVal]) -> AppDryRunInfo:
        doc = job_document(app.name, [role_spec(r) for r in app.roles], cfg)
        # Through the loader: the same validation and errors as a job.yaml.
        loaded = load_job_text(yaml.safe_dump(doc), f"<torchx app {app.name}>")
        request = {"manifest": render(loaded.job), "job": loaded.job, "cfg": dict(cfg)}
        return AppDryRunInfo(request, _fmt)

    def _client(self, cfg: Mapping[str, Any]) -> Client:
        from ..client import Client

        where = {k: cfg.get(k) or self.defaults.get(k) for k in ("kubeconfig", "context")}
        return Client("kubernetes", kubeconfig=where["kubeconfig"], context=where["context"])

    def schedule(self, dryrun_info: AppDryRunInfo) -> str:
        request = dryrun_info.request
        handle = self._client(request["cfg"]).apply(request["job"])
        return app_id(handle.namespace, handle.name, request["cfg"])

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        namespace, name, where = parse_app_id(app_id)
        try:
            view = self._client(where).get(name, namespace)
        except JobNotFound:
            return None
        return DescribeAppResponse(
            app_id=app_id, state=STATES.get(view.state, AppState.UNKNOWN), msg=view.message
        )

    def list(self) -> list[ListAppResponse]:
        return [
            ListAppResponse(
                app_id=app_id(v.namespace, v.name, self.defaults),
                state=STATES.get(v.state, AppState.UNKNOWN),
            )
            for v in self._client({}).list()
            if v.raw.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/managed-by")
            == "kctl-train"
        ]

    def _cancel_existing(self, app_id: str) -> None:
        namespace, name, where = parse_app_id(app_id)
        self._client(where).delete(name, namespace, missing_ok=True)

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
        namespace, name, where = parse_app_id(app_id)
        try:
            handle = self._client(where).job(name, namespace)
        except JobNotFound:
            return []
        replicas = handle.status().replicas
        if k >= len(replicas):
            return []
        lines = handle.logs(follow=should_tail, replica=replicas[k].tag)
        return (line.text + "\n" for line in lines if regex is None or re.search(regex, line.text))


def _fmt(request: dict[str, Any]) -> str:
    return to_yaml(request["manifest"])


def create_scheduler(session_name: str, **kwargs: Any) -> KctlTrainScheduler:
    """TorchX's scheduler factory (the `torchx.schedulers` entry point); `kubeconfig`
    and `context` among the scheduler parameters are its defaults."""
    return KctlTrainScheduler(session_name, **kwargs)
