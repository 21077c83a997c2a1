"""The public Python API: render, validate and run jobs on any backend.

from operator_client import Client

client = Client(backend="local")
job = client.apply("examples/quickstart.yaml")
print(job.wait().state)
job.collect(to="results/quickstart")
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import BadInput, JobNotFound, PreflightFailed
from ..kubeflow.webhook import admission_errors
from .grace import ESTIMATE_PATH, grace_warning, measured_budget
from .jobs import load, object_in_namespace, trainjob_manifest, with_namespace
from .validation import Validation

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..backends.types import BackendInfo, Finding, JobView
    from ..collect.results import Collected
    from ..image import BuiltImage
    from ..kubeflow.pod_objects import PodObjects
    from ..spec import SpecIssue
    from .handle import JobHandle
    from .jobs import JobInput


class Client:
    """Jobs on one backend: "kubernetes" (the cluster of a kubeconfig and context) or
    "local" (processes on this machine, state under $KCTL_TRAIN_HOME), or a Backend.
    `namespace` is the default for calls that take one ("default" when unset).
    `progress` gets a line whenever a call waits on something (a job still terminating
    before an apply, a delete waiting for pods). `runtimes`: files or directories of
    Trainer v2 runtimes a TrainJob may name on the local backend (Kubeflow's own too);
    `secrets`, `configmaps`: files of the Secrets and ConfigMaps its pods read there;
    `pod_security`: the Pod Security level its pods are admitted at there (baseline,
    the default, or restricted)."""

    def __init__(
        self,
        backend: str | Backend = "kubernetes",
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        home: str | Path | None = None,
        progress: Callable[[str], None] | None = None,
        runtimes: Sequence[str | Path] = (),
        secrets: Sequence[str | Path] = (),
        configmaps: Sequence[str | Path] = (),
        pod_security: str | None = None,
    ) -> None:
        self.namespace = namespace
        self._progress = progress

        # Made on first use: render, validate and schema need no backend (nor its imports),
        # and a cluster's kubeconfig (or the files of --runtime and --secret) is not read.
        def make() -> Backend:
            if not isinstance(backend, str):
                return backend
            from ..backends import backend_for

            return backend_for(
                backend,
                kubeconfig=kubeconfig,
                context=context,
                home=Path(home) if home is not None else None,
                runtimes=_runtimes(runtimes),
                objects=_objects(secrets, configmaps),
                pod_security=pod_security,
            )

        self._make = make

    @cached_property
    def _backend(self) -> Backend:
        """The backend of this client, made on first use."""
        backend = self._make()
        backend.listen(self._progress)
        return backend

    @property
    def info(self) -> BackendInfo:
        """The backend this client runs jobs on: its name and what it can do."""
        return self._backend.info()

    def _handle(self, name: str, namespace: str | None, **given: Any) -> JobHandle:
        """A handle on job `name` of this backend (`given`: what the handle knows already)."""
        from .handle import JobHandle

        return JobHandle(self._backend, name, self._namespace(namespace), **given)

    def _namespace(self, namespace: str | None) -> str:
        """The namespace a call means: its own, else the client's, else "default"."""
        return namespace or self.namespace or "default"

    def validate(self, job: JobInput, *, operator: str | None = None) -> list[SpecIssue]:
        """The job's warnings; SpecError (its `issues`) when it is not valid (for
        `operator`, when given, instead of its spec.operator)."""
        return load(job, operator=operator).warnings

    def render(self, job: JobInput, *, operator: str | None = None) -> dict[str, Any]:
        """The job's manifest (pure: same job, same manifest): a PyTorchJob, or a TrainJob
        for operator (or spec.operator) "trainjob". RenderBug where the operator would
        refuse it."""
        from ..render import render_admitted

        loaded = load(job, operator=operator)
        return render_admitted(loaded.job, loaded.source)

    def validate_files(
        self, files: Sequence[str], *, stdin: TextIO | None = None, operator: str | None = None
    ) -> Validation:
        """Every job file ('-': `stdin`) validated at once: the jobs that loaded, and the
        errors of those that did not (two files defining one job among them)."""
        from ..spec.loader import load_files

        return Validation(*load_files(list(files), stdin or sys.stdin, operator))

    def render_files(
        self,
        files: Sequence[str],
        *,
        stdin: TextIO | None = None,
        operator: str | None = None,
        pods: bool = False,
    ) -> tuple[list[dict[str, Any]], list[SpecIssue]]:
        """The manifests of every job file and their warnings; SpecError with every
        file's problems at once (its warnings first, each issue with its severity).
        `pods`: each PyTorchJob is followed by its replicas' pod
        templates as standalone Pods (for scanners that do not look inside it)."""
        from ..render import render_admitted
        from ..spec import SpecError

        found = self.validate_files(files, stdin=stdin, operator=operator)
        warnings = found.warnings
        if found.errors:
            raise SpecError([*warnings, *found.errors])
        manifests = [render_admitted(j.job, j.source) for j in found.jobs]
        if pods:
            from ..render.pods import replica_pods

            if any(m["kind"] != "PyTorchJob" for m in manifests):
                raise BadInput(
                    "--pods: a TrainJob's pods come from its runtime and patches; scan "
                    "manifests/trainer-v2/cluster-training-runtime.yaml and the TrainJob "
                    "instead"
                )
            manifests = [doc for m in manifests for doc in (m, *replica_pods(m))]
        return manifests, warnings

    def schema(self, *, helm: bool = False) -> dict[str, Any]:
        """The JSON schema of a job file, or with `helm` of the Helm chart's values."""
        if helm:
            from ..render.helm import values_schema

            return values_schema()
        from ..spec.schema import job_schema

        return job_schema()

    def apply(
        self,
        job: JobInput,
        *,
        namespace: str | None = None,
        force_namespace: bool = False,
        storage: str | None = None,
        dry_run: str | None = None,
        force_conflicts: bool = False,
        image: BuiltImage | None = None,
        operator: str | None = None,
    ) -> JobHandle:
        """Render the job, check it can run, and submit it; a handle on it.

        `namespace` replaces the job's (a namespace its file names only with
        `force_namespace`); `storage` the store (local backend). `dry_run`: "client"
        renders only (the handle has the manifest), "server" also checks and validates
        with the backend, starting nothing. `image`: a build of the job's code (build());
        the job runs it, pinned (a local backend runs its root filesystem). `operator`
        replaces spec.operator (pytorchjob or trainjob). A TrainJob object (written by
        hand or by the Kubeflow SDK, as a file, text or dict) is applied as it is.
        PreflightFailed when checks find errors."""
        from ..render import render_admitted

        trainjob = trainjob_manifest(job)
        if trainjob is not None:
            return self._apply_object(
                trainjob, namespace or self.namespace, dry_run, force_conflicts
            )
        loaded = load(job, operator=operator)
        spec = with_namespace(loaded, namespace or self.namespace, force_namespace)
        if image is not None:
            spec = spec.model_copy(
                update={"spec": spec.spec.model_copy(update={"image": image.reference})}
            )
            if self._backend.local_images and dry_run != "client":
                from ..image.builders import root_of

                self._backend.use_image(root_of(image))
        prepared, note = self._backend.prepare(spec, storage)
        warnings = loaded.warnings
        if prepared.spec.storage != spec.spec.storage:  # the backend chose the store
            warnings = [w for w in warnings if w.path != "spec.storage"]
        if dry_run != "client" and (measured := measured_budget(prepared)) is not None:
            # A measured save replaces validate's estimate from stateSize.
            warnings = [w for w in warnings if w.path != ESTIMATE_PATH]
            if grace := grace_warning(prepared, measured, loaded.source):
                warnings = [*warnings, grace]
        manifest = render_admitted(prepared, loaded.source)
        handle = self._handle(
            prepared.metadata.name,
            prepared.metadata.namespace,
            manifest=manifest,
            warnings=warnings,
            note=note,
        )
        return self._submit(handle, manifest, dry_run, force_conflicts)

    def _apply_object(
        self,
        manifest: dict[str, Any],
        namespace: str | None,
        dry_run: str | None,
        force_conflicts: bool,
    ) -> JobHandle:
        """A Kubeflow object as given: the admission rules, then as a rendered one."""
        object_in_namespace(manifest, namespace)
        meta = manifest["metadata"]
        problems = admission_errors(manifest)
        if problems:
            raise BadInput(
                f"the cluster would refuse this {manifest['kind']}: {'; '.join(problems)}"
            )
        handle = self._handle(meta["name"], meta.get("namespace", "default"), manifest=manifest)
        return self._submit(handle, manifest, dry_run, force_conflicts)

    def _submit(
        self, handle: JobHandle, manifest: dict[str, Any], dry_run: str | None, force: bool
    ) -> JobHandle:
        if dry_run == "client":
            return handle
        findings = self._backend.check(manifest)
        if any(f.level == "error" for f in findings):
            raise PreflightFailed(handle.name, findings)
        handle.findings = findings
        handle.submitted = self._backend.submit(manifest, dry_run=dry_run == "server", force=force)
        return handle

    def build(
        self,
        directory: str | Path = ".",
        *,
        job: JobInput | None = None,
        base: str | None = None,
        repository: str | None = None,
        builder: str | None = None,
        registry_auth: str | None = None,
        max_bytes: int | None = None,
        allow_secrets: tuple[str, ...] = (),
        say: Callable[[str], None] | None = None,
        line: Callable[[str], None] | None = None,
    ) -> BuiltImage:
        """Build `directory` (the user's code) onto `base`, else the job's spec.image, as
        `repository:<content hash>`; push it when `repository` is given. Nothing is built
        or pushed when that tag exists already. Pass the result to apply(image=...).
        A file whose content looks like a secret is refused unless `allow_secrets` names
        it. `say` gets each step, `line` each line the builder prints (docs/BUILD.md)."""
        from ..image import BuildRequest, build_image
        from ..image.workspace import DEFAULT_MAX_BYTES

        if base is None:
            if job is None:
                raise BadInput(
                    "say which image to build on: --base IMAGE, or a job file (-f; its spec.image)"
                )
            base = load(job).job.spec.image
        request = BuildRequest(
            Path(directory),
            base,
            repository,
            builder,
            registry_auth,
            max_bytes or DEFAULT_MAX_BYTES,
            allow_secrets,
        )
        quiet: Callable[[str], None] = lambda _: None  # noqa: E731
        return build_image(request, say or quiet, line or quiet)

    def preflight(
        self,
        job: JobInput,
        *,
        namespace: str | None = None,
        force_namespace: bool = False,
        operator: str | None = None,
    ) -> list[Finding]:
        """What would stop or stall the job on this backend, errors first (`doctor`); on a
        cluster, also which operators it runs against the one the job renders for. A
        TrainJob object is checked as it is (locally: the runtime it runs against)."""
        from ..backends.types import Finding
        from ..render import render

        trainjob = trainjob_manifest(job)
        if trainjob is not None:
            object_in_namespace(trainjob, namespace or self.namespace)
            refused = [Finding("error", p, True) for p in admission_errors(trainjob)]
            return refused or self._backend.check(trainjob)
        loaded = load(job, operator=operator)
        spec = with_namespace(loaded, namespace or self.namespace, force_namespace)
        return self._backend.check(render(self._backend.prepare(spec)[0]))

    def job(self, name: str, namespace: str | None = None) -> JobHandle:
        """A handle on an existing job (JobNotFound when there is none); `.found` is
        the view read to find it."""
        handle = self._handle(name, namespace)
        handle.found = handle.status()
        return handle

    def get(self, name: str, namespace: str | None = None) -> JobView:
        """The job's view now (JobNotFound when there is none)."""
        return self._handle(name, namespace).status()

    def delete(
        self,
        name: str,
        namespace: str | None = None,
        *,
        wait: bool = False,
        missing_ok: bool = False,
    ) -> bool:
        """Stop the job and remove its record (stored objects stay). False when there was
        none and `missing_ok`; JobNotFound otherwise."""
        ns = self._namespace(namespace)
        deleted = self._backend.delete(ns, name, wait=wait)
        if not deleted and not missing_ok:
            raise JobNotFound(self._backend.missing(ns, name))
        return deleted

    def identity(self, job: JobInput) -> tuple[str, str]:
        """(namespace, name) of the job a file, text or dict describes: a TrainJob object's
        metadata, or a job file's (validated); the client's namespace where it names
        none (`kubectl delete -f FILE` finds its objects so)."""
        trainjob = trainjob_manifest(job)
        if trainjob is not None:
            meta = trainjob["metadata"]
            name, namespace = meta.get("name"), meta.get("namespace")
            if not isinstance(name, str) or not name:
                raise BadInput("the TrainJob has no metadata.name")
        else:
            found = load(job).job.metadata
            name, namespace = found.name, found.namespace
        given = namespace if isinstance(namespace, str) and namespace else None
        return self._namespace(self.namespace or given), name

    def list(self, namespace: str | None = None) -> list[JobView]:
        """Every job of a namespace (None: the client's, else all)."""
        return self._backend.list(namespace or self.namespace)

    def collect(
        self, name: str, namespace: str | None = None, *, source: str | None = None, **options: Any
    ) -> Collected:
        """A run's results, verified, into `to` (default results/<name>/): through its
        job record, or with `source` straight from that storage URI (no record needed).
        `options` as JobHandle.collect's."""
        if source is not None:
            return self.collect_from(source, name, namespace=namespace, **options)
        return self.job(name, namespace).collect(**options)

    def report(self, target: str | Path) -> tuple[str, Path]:
        """Rebuild the report of a collected run (a directory, or the NAME of one under
        results/): its text, and the curves' PNG written beside it."""
        from ..collect.report import write
        from ..collect.results import results_dir

        directory = Path(target)
        if not directory.is_dir():
            directory = results_dir(str(target))
        _, png, txt = write(directory)
        return txt.read_text(), png

    def collect_from(
        self,
        uri: str,
        name: str,
        *,
        namespace: str | None = None,
        to: str | Path | None = None,
        endpoint: str | None = None,
        all_checkpoints: bool = False,
        checkpoint: str = "last",
        consolidate: bool = False,
        concurrency: int = 16,
        progress: Any = None,
    ) -> Collected:
        """Collect a run straight from its storage URI (no job record needed);
        `checkpoint` as JobHandle.collect's."""
        from ..collect.results import collect_run, results_dir
        from ..runstore.location import run_root
        from ..storage import open_store
        from .collecting import consolidate_with_torch

        ns = self._namespace(namespace)
        store = open_store(run_root(uri, ns, name), endpoint=endpoint, concurrency=concurrency)
        job: Mapping[str, Any] = {"name": name, "namespace": ns}
        return collect_run(
            store,
            Path(to) if to is not None else results_dir(name),
            job,
            all_checkpoints=all_checkpoints,
            checkpoint=checkpoint,
            consolidate=consolidate_with_torch if consolidate else None,
            concurrency=concurrency,
            progress=progress,
        )


def _runtimes(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]] | None:
    """The runtimes in `paths` by name (None for none); BadInput naming the file."""
    if not paths:
        return None
    from ..kubeflow.manifest_files import ManifestFileError
    from ..kubeflow.runtime_files import load_runtimes

    try:
        return load_runtimes(paths)
    except ManifestFileError as exc:
        raise BadInput(f"--runtime {exc}") from None


def _objects(secrets: Sequence[str | Path], configmaps: Sequence[str | Path]) -> PodObjects | None:
    """The Secrets and ConfigMaps in the files (None for none); BadInput naming the file."""
    if not secrets and not configmaps:
        return None
    from ..kubeflow.manifest_files import ManifestFileError
    from ..kubeflow.pod_objects import load_objects

    try:
        return load_objects(secrets, configmaps)
    except ManifestFileError as exc:
        raise BadInput(f"--secret/--configmap {exc}") from None
