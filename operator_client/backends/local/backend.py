"""The local backend: runs a rendered PyTorchJob or TrainJob as processes on this machine.

The image is not pulled: each replica runs the trainer container's command from the
installed package, with the container's env and exactly the operator's additions
(local_env.py). A TrainJob's pods come from the Trainer v2 runtime it names: kctl-train's
own ClusterTrainingRuntime, built in as a cluster has it installed, one given with
`--runtime`, or one read from the cluster (kubeflow/workload.py).
A detached supervisor (supervisor.py) owns the processes; this module submits,
inspects, stops and deletes jobs through their directory (jobdir.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...contract import ImageRoot, Progress
from ...errors import BadInput, ClusterError, JobNotFound, LocalJobError
from ...kubeflow import lifecycle as lc
from ...kubeflow import trainjob as tj
from ...kubeflow.kinds import Kind, kind_of
from ...kubeflow.pod_env import PodEnvError
from ...kubeflow.pod_manifests import pod_manifests
from ...kubeflow.pod_objects import Lookup, PodObjects, references, values_of
from ...kubeflow.workload import Workload, WorkloadError, workload_of
from ...runstore import resume_line
from ...runstore.checkpoints import first_complete
from ...runstore.location import home, store_for
from ...storage import StoreError, open_store
from ..base import Backend
from ..types import (
    Event,
    Fault,
    Finding,
    JobChanged,
    JobView,
    LogLine,
    ProgressReport,
    Replica,
    StorageLocation,
    Submitted,
)
from ..views import conditions_of, new_events, pick, replica_count
from . import chaos, file_store, pod_processes
from .admission import admission_findings, level_of
from .jobdir import JobDir, LocalReplica, write_json
from .launch import load_mode, save_mode
from .local_env import replica_command, replica_env
from .logs import LogFollower
from .logs import tail as tail_lines
from .sandbox.relay import loopback_port
from .sandbox.support import AUTO, MODE_ENV, MODES, SANDBOX, choose
from .supervisor import restart_delays

if TYPE_CHECKING:
    from ...spec.model import TrainingJob

# Inside the class, `list` is the Backend method.
JobDirs = list[JobDir]

# Each replica is a torchrun agent and its workers on this one machine.
MAX_REPLICAS = 64
POLL_SECONDS = 0.2


class LocalBackend(Backend):
    """Local jobs under `root` (default $KCTL_TRAIN_HOME or ~/.kctl-train)."""

    name = "local"
    store_reachable = True  # prepare() made sure of it
    local_images = True

    def __init__(
        self,
        root: Path | None = None,
        *,
        pods: str | None = None,
        image: ImageRoot | None = None,
        runtimes: Mapping[str, Mapping[str, Any]] | None = None,
        objects: PodObjects | None = None,
        lookup: Lookup | None = None,
        pod_security: str | None = None,
    ) -> None:
        """`pods`: auto (pod sandboxes where this machine can run them, else processes),
        sandbox or process; default $KCTL_TRAIN_LOCAL_PODS, else auto. `image`: run the
        replicas from an image's root filesystem (sandboxes only). `runtimes`: Trainer v2
        runtimes a TrainJob may name, by name, beside kctl-train's built-in one. `objects`:
        the Secrets and ConfigMaps the pods read (env and volumes). `lookup`: where a
        runtime, Secret or ConfigMap given neither way is read from (a cluster's).
        `pod_security`: the Pod Security level every pod is admitted at, baseline or
        restricted (default $KCTL_TRAIN_POD_SECURITY, else baseline; admission.py)."""
        self.root = root or home()
        self.runtimes = dict(runtimes or {})
        self.objects = objects or PodObjects()
        self.lookup = lookup
        self.pods = pods or os.environ.get(MODE_ENV) or AUTO
        if self.pods not in MODES:
            raise BadInput(f"{MODE_ENV}={self.pods!r}: use one of {', '.join(MODES)}")
        self.image = image
        self.pod_security = level_of(pod_security)

    def use_image(self, root: ImageRoot) -> None:
        """12. The replicas run from `root` (in pod sandboxes, the only way to give each
        the image's files as its root)."""
        self.image = root

    def _requested(self) -> str:
        return SANDBOX if self.image else self.pods

    def job(self, namespace: str, name: str) -> JobDir:
        return JobDir.of(namespace, name, self.root)

    def _existing(self, namespace: str, name: str) -> JobDir:
        job = self.job(namespace, name)
        if not job.exists():
            raise JobNotFound(self.missing(namespace, name))
        return job

    def missing(self, namespace: str, name: str) -> str:
        known = ", ".join(job.path.name for job in self._jobs(namespace)) or "none"
        return f"no local job {namespace}/{name} (local jobs in {namespace}: {known})"

    # 1. prepare

    def prepare(
        self, job: TrainingJob, storage: str | None = None
    ) -> tuple[TrainingJob, str | None]:
        """A local run always has a store: --storage, else the spec's when it answers,
        else the default location (storage.py)."""
        from .storage import store_for_local_run

        try:
            return store_for_local_run(job, storage)
        except ValueError:
            raise BadInput(
                f"--storage: {storage!r} is not a store URI; use s3://bucket/prefix or "
                "file:///absolute/path"
            ) from None

    # 2. check

    def check(
        self, manifest: Mapping[str, Any], env: Mapping[str, str] = os.environ
    ) -> list[Finding]:
        """Everything a start needs, before anything starts: commands found, env resolvable."""
        try:
            borrowed = self._borrow(manifest)
            workload = workload_of(manifest, self.runtimes)
            borrowed += self._borrow_objects(workload)
        except ClusterError as exc:
            return [Finding("error", f"reading from the cluster of --context: {exc}")]
        except (WorkloadError, KeyError) as exc:
            return [Finding("error", f"the local backend cannot run this job: {exc}", True)]
        bindir = Path(sys.executable).parent
        count = workload.count
        if count > MAX_REPLICAS:
            return [
                Finding(
                    "error",
                    f"{count} replicas: the local backend runs every replica on this machine "
                    f"and takes at most {MAX_REPLICAS}; run it on a cluster, or lower spec.nodes",
                    bad_input=True,
                )
            ]
        # Here, not at the top: the pod description reads quantities with the spec's
        # parser (pydantic), which the commands that only look at jobs never load.
        from .sandbox.podspec import DEFAULT_UID, ephemeral_limit

        findings = [Finding("info", f"from the cluster: {what}") for what in borrowed]
        findings += admission_findings(workload, self.pod_security, DEFAULT_UID)
        if workload.trainjob:
            ref = manifest["spec"]["runtimeRef"]["name"]
            given = "given with --runtime" if ref in self.runtimes else "built in"
            given = "from the cluster" if f"{ref} (runtime)" in borrowed else given
            groups = ", ".join(f"{g.type} ({g.count})" for g in workload.groups)
            findings.append(
                Finding("info", f"runtime: {ref} ({given}); replicated Jobs in order: {groups}")
            )
        too_many = _process_problem(workload)
        if too_many:
            findings.append(Finding("error", too_many, bad_input=True))
        try:
            restart_delays(env)
        except ValueError as exc:
            findings.append(Finding("error", str(exc), bad_input=True))
        unfollowed = StorageLocation.problem(manifest)
        if unfollowed:
            findings.append(Finding("error", unfollowed, bad_input=True))
        location = StorageLocation.of(manifest)
        findings += _endpoint_findings(location)
        stores = file_store.roots(location.root) if location else None
        refused = file_store.store_problem(stores[0]) if stores else None
        if refused:
            findings.append(
                Finding(
                    "error",
                    f"storage file://{stores[0] if stores else ''}: a local run cannot use "
                    f"it: {refused} (or give --storage)",
                    bad_input=True,
                )
            )
        sandboxed = True
        try:
            mode = choose(self._requested(), location.endpoint if location else None)
            sandboxed = mode.sandboxed
            findings.append(Finding("info", f"replicas: {mode.describe()}; {mode.detail()}"))
        except OSError as exc:
            findings.append(Finding("error", f"{exc}; run as processes with {MODE_ENV}=process"))
        findings += _volume_findings(workload, self.objects, sandboxed)
        for group in workload.groups:
            try:
                ephemeral_limit(workload, group.type, env)
            except ValueError as exc:
                findings.append(Finding("error", f"{group.type}: {exc}", bad_input=True))
        for replica in lc.replicas_of(workload):
            try:
                replica_command(workload.container(replica.type), bindir)
                replica_env(
                    workload,
                    replica,
                    port=0,
                    base=env,
                    tmpdir=Path("/nonexistent"),
                    objects=self.objects,
                )
            except (PodEnvError, WorkloadError) as exc:
                findings.append(Finding("error", f"{replica.name}: {exc}", bad_input=True))
        return findings

    def _borrow(self, manifest: Mapping[str, Any]) -> list[str]:
        """The TrainJob's runtime from the cluster, where neither given nor built in."""
        if self.lookup is None or manifest.get("kind") != tj.KIND:
            return []
        ref = manifest["spec"].get("runtimeRef") or {}
        name, kind = ref.get("name", ""), ref.get("kind", tj.RUNTIME_KIND)
        if name in self.runtimes or name == tj.RUNTIME_NAME:
            return []
        found = self.lookup(kind, name, manifest["metadata"].get("namespace", "default"))
        if found is None:
            return []
        self.runtimes[name] = dict(found)
        return [f"{name} (runtime)"]

    def _borrow_objects(self, workload: Workload) -> list[str]:
        """The Secrets and ConfigMaps the pods read that were not given, from the cluster."""
        if self.lookup is None:
            return []
        borrowed = []
        secrets = {k: dict(v) for k, v in self.objects.secrets.items()}
        configmaps = {k: dict(v) for k, v in self.objects.configmaps.items()}
        templates = [g.template for g in workload.groups]
        for kind, name in sorted(references(templates)):
            have = secrets if kind == "Secret" else configmaps
            if name in have:
                continue
            found = self.lookup(kind, name, workload.namespace)
            if found is not None:
                have[name] = values_of(found, kind)
                borrowed.append(f"{kind} {name}")
        self.objects = PodObjects(secrets, configmaps)
        return borrowed

    # 3. submit

    def submit(
        self, manifest: Mapping[str, Any], *, dry_run: bool = False, force: bool = False
    ) -> Submitted:
        """Start the job's supervisor (`force` has no meaning here: one manager)."""
        namespace, name = _names(manifest)
        job = self.job(namespace, name)
        # The contract does not assume a check first: a job that cannot start here is
        # refused before anything is written.
        errors = [f for f in self.check(manifest) if f.level == "error"]
        if any(f.bad_input for f in errors):
            raise BadInput("; ".join(f.message for f in errors))
        if errors:
            raise LocalJobError("; ".join(f.message for f in errors))
        finished = job.exists() and not job.supervisor_alive()
        if dry_run:
            note = (
                f"local job {namespace}/{name} has finished: apply replaces it"
                if finished
                else None
            )
            pods = pod_manifests(workload_of(manifest, self.runtimes))
            return Submitted(
                None, "checked", dict(manifest), dry_run=True, how="local", note=note, pods=pods
            )
        if job.exists() and not finished:
            if job.manifest() == manifest:
                return self._submitted(job, "unchanged", None)
            raise LocalJobError(
                f"local job {namespace}/{name} is still running with another spec; wait for "
                f"it, or `kctl-train delete {name} --local` first"
            )
        resumes = _resume_step(manifest)  # before the new run starts to write
        # A supervisor that died (killed, say) may have left its replicas running: they
        # would train and write beside the new run. They end first.
        left = _kill_orphans(job)
        if left:
            raise LocalJobError(
                f"processes {left} of the earlier run of {namespace}/{name} still run and "
                "do not end on SIGKILL; stop them before applying again"
            )
        location = StorageLocation.of(manifest)
        try:
            mode = choose(self._requested(), location.endpoint if location else None)
        except OSError as exc:
            raise LocalJobError(f"{exc}; run as processes with {MODE_ENV}=process") from None
        workload = workload_of(manifest, self.runtimes)
        _claim_store(manifest, workload, mode.sandboxed)
        shutil.rmtree(job.path, ignore_errors=True)
        job.path.mkdir(parents=True)
        write_json(job.manifest_file, manifest)
        if self.objects.secrets or self.objects.configmaps:
            write_json(job.objects_file, self.objects.to_json())
            job.objects_file.chmod(0o600)  # Secrets' values
        if workload.trainjob and manifest["spec"]["runtimeRef"]["name"] in self.runtimes:
            write_json(job.runtime_file, self.runtimes[manifest["spec"]["runtimeRef"]["name"]])
        save_mode(job, mode, self.image)
        with job.supervisor_log.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "operator_client.backends.local.supervisor", str(job.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this command and its terminal's Ctrl-C
            )
        deadline = time.monotonic() + 30
        while not job.status():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = job.supervisor_log.read_text(errors="replace")[-2000:]
                raise LocalJobError(f"the local supervisor did not start:\n{tail}")
            time.sleep(0.05)
        return self._submitted(job, "replaced" if finished else "created", resumes)

    def _submitted(self, job: JobDir, verb: str, resumes: int | None) -> Submitted:
        view = self._view(job)
        how = f"local, {load_mode(job)[0].describe()}"
        return Submitted(
            view, verb, view.raw, how=how, resume_step=resumes, logs_at=str(job.path / "logs")
        )

    # 4, 5. get, list

    def get(self, namespace: str, name: str) -> JobView | None:
        job = self.job(namespace, name)
        return self._view(job) if job.exists() else None

    def list(self, namespace: str | None = None) -> list[JobView]:
        return [self._view(job) for job in self._jobs(namespace)]

    def _jobs(self, namespace: str | None) -> JobDirs:
        base = self.root / "local"
        spaces = [base / namespace] if namespace else sorted(base.glob("*"))
        return [
            JobDir(d) for space in spaces for d in sorted(space.glob("*")) if JobDir(d).exists()
        ]

    def _view(
        self,
        job: JobDir,
        manifest: Mapping[str, Any] | None = None,
        runs_as: str | None = None,
        workload: Workload | None = None,
    ) -> JobView:
        """The job from its files; `manifest`, `runs_as` and `workload` when the caller has
        them (they never change for a job directory: watch and logs read them once)."""
        manifest = manifest or job.manifest()
        workload = workload or job.workload(manifest)
        if runs_as is None:
            runs_as = load_mode(job)[0].describe() if job.pods_file.is_file() else ""
        body = job.status()
        broken: str | None = None
        try:
            local = job.local_status(body)
        except ValueError as exc:
            local, broken = None, f"its status file is not one a supervisor writes ({exc})"
        name, kind = manifest["metadata"]["name"], kind_of(manifest)
        conditions = conditions_of(body)
        # The supervisor's state machine says it for every kind (a TrainJob has no
        # Created or Running condition).
        state = local.state if local else lc.job_state(conditions)
        message = (local.message if local else "") or (
            conditions[-1].message if conditions else "the supervisor is starting"
        )
        alive = job.supervisor_alive()
        if body and state not in lc.ENDED and not alive:
            state, message = lc.UNKNOWN, f"the local supervisor died; see {job.supervisor_log}"
        if broken:
            state, message = lc.UNKNOWN, broken
        replicas = (
            local.replicas
            if local
            else tuple(
                LocalReplica(r.name, r.type, r.index, r.phase) for r in lc.replicas_of(workload)
            )
        )
        return JobView(
            backend=self.name,
            name=name,
            namespace=manifest["metadata"].get("namespace", "default"),
            state=state,
            message=message,
            conditions=conditions,
            replicas=tuple(_replica(kind, name, r) for r in replicas),
            nodes=replica_count(manifest, workload),
            created=_mtime(job.manifest_file),
            started=local.started if local else None,
            completed=local.completed if local else None,
            storage=StorageLocation.of(manifest),
            ended=(state in lc.ENDED or state == lc.UNKNOWN) and not alive,
            runs_as=runs_as,
            raw={**manifest, "status": body.get("status", {}), "local": body.get("local", {})},
            kind=kind.kind,
        )

    # 6. watch

    def watch(
        self, namespace: str, name: str, *, heartbeat: float = 1.0
    ) -> Generator[Event, None, None]:
        job = self._existing(namespace, name)
        manifest = job.manifest()
        workload = job.workload(manifest)
        last = self._view(job, manifest, workload=workload)
        runs_as = last.runs_as
        yield JobChanged(last)
        last_sent = time.monotonic()
        follower = LogFollower({r.name: job.log(r.name) for r in last.replicas})
        seen: set[Any] = set()
        progress: Progress | None = None
        while True:
            if not job.exists():
                raise JobNotFound(f"local job {namespace}/{name} was deleted")
            view = self._view(job, manifest, runs_as, workload)
            found = Progress.newest(text for _, text in follower.poll(final=view.ended))
            if found is not None and found != progress:
                progress = found
                yield ProgressReport(found)
            yield from new_events(view, seen)
            now = time.monotonic()
            if view != last or now - last_sent >= heartbeat or view.ended:
                yield JobChanged(view)
                last, last_sent = view, now
            if view.ended:
                return
            time.sleep(POLL_SECONDS)

    # 7. logs

    def logs(
        self,
        namespace: str,
        name: str,
        *,
        replica: str | None = None,
        follow: bool = False,
        previous: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        """One file per replica holds every run of it (`previous` reads the same file:
        each restart is marked in it by the supervisor)."""
        job = self._existing(namespace, name)
        manifest = job.manifest()
        workload = job.workload(manifest)
        chosen = pick(self._view(job, manifest, workload=workload).replicas, replica)
        if tail is not None:
            for r in chosen:
                yield from (LogLine(r.tag, text) for text in tail_lines(job.log(r.name), tail))
            return
        follower = LogFollower({r.tag: job.log(r.name) for r in chosen})
        while True:
            ended = not follow or self._view(job, manifest, workload=workload).ended
            yield from (LogLine(tag, text) for tag, text in follower.poll(final=ended))
            if ended:
                return
            time.sleep(POLL_SECONDS)

    # 8, 9. delete, stop

    def delete(self, namespace: str, name: str, *, wait: bool = False) -> bool:
        """Stop the job if it runs (always waiting for its processes), then remove its
        record (stored data stays)."""
        job = self.job(namespace, name)
        if not job.exists():
            return False
        timeout = lc.Policy.of(job.workload()).grace_seconds
        if self._signal(job, "deleted (kctl-train delete)") and not self._wait_stopped(
            job, timeout + 10
        ):
            self._signal(job, "deleted (kctl-train delete)", force=True)
            if not self._wait_stopped(job, 10):
                raise LocalJobError(f"the supervisor of {job.path} does not exit; try again")
        if not job.supervisor_alive():
            left = _kill_orphans(job)
            if left:
                raise LocalJobError(f"processes {left} of {job.path} do not end on SIGKILL")
        shutil.rmtree(job.path)
        return True

    def stop(self, namespace: str, name: str, *, force: bool = False) -> bool:
        job = self._existing(namespace, name)
        reason = "killed by a second Ctrl-C" if force else "stopped by Ctrl-C"
        return self._signal(job, reason, force=force)

    # 10. inject

    def inject(self, namespace: str, name: str, fault: Fault) -> str:
        """Through the job's supervisor (chaos.py), which heals a timed fault on time."""
        job = self._existing(namespace, name)
        if not job.supervisor_alive():
            raise LocalJobError(f"local job {namespace}/{name} is not running")
        ok, message = chaos.request(job, fault)
        if not ok:
            raise LocalJobError(f"{fault.action} {fault.pod}: {message}")
        return message

    @staticmethod
    def _signal(job: JobDir, reason: str, *, force: bool = False) -> bool:
        """Ask the supervisor to stop the job (SIGTERM, or SIGINT to kill at once).
        False when no supervisor is running."""
        pid = job.supervisor_pid()
        if pid is None or not job.supervisor_alive():
            return False
        if not job.stop_file.exists():
            job.stop_file.write_text(reason + "\n")
        try:
            os.kill(pid, signal.SIGINT if force else signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    @staticmethod
    def _wait_stopped(job: JobDir, timeout: float) -> bool:
        """Wait for the supervisor to exit; False on timeout."""
        deadline = time.monotonic() + timeout
        while job.supervisor_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


# A torchrun agent or worker with torch imported holds at least this much memory: this
# machine cannot run more processes than its available memory holds of them.
PROCESS_MEMORY_FLOOR = 128 << 20


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _volume_findings(workload: Workload, objects: PodObjects, sandboxed: bool) -> list[Finding]:
    """Volumes a local run cannot mount, or cannot mount this way (processes mount none)."""
    from .sandbox.podspec import mounted_volumes

    findings = []
    for group in workload.groups:
        try:
            given = mounted_volumes(workload, group.type, objects)
        except ValueError as exc:
            findings.append(Finding("error", f"{group.type}: {exc}", bad_input=True))
            continue
        targets = [v.target for v in given]
        if targets and not sandboxed:
            findings.append(
                Finding(
                    "error",
                    f"{group.type}: volumes at {', '.join(targets)} need pod sandboxes (a plain "
                    "process sees this machine's files, not the pod's volumes); run as root "
                    f"without {MODE_ENV}=process",
                    bad_input=True,
                )
            )
    return findings


def _endpoint_findings(location: StorageLocation | None) -> list[Finding]:
    """An S3 endpoint on this machine's loopback is relayed into the pods only when it
    answers as the job's store: the relay never opens a path to any other local port."""
    if location is None or loopback_port(location.endpoint) is None:
        return []
    try:
        open_store(location.root, endpoint=location.endpoint, region=location.region).probe()
    except (StoreError, BadInput) as exc:
        return [
            Finding(
                "error",
                f"storage endpoint {location.endpoint}: it does not answer as the job's store "
                f"({exc}); a local run relays pods only to a store that does",
                bad_input=True,
            )
        ]
    return []


def _process_problem(workload: Workload) -> str | None:
    """Why this machine cannot run the job's processes (None: it can): every replica is
    a torchrun agent and its workers, all on this machine."""
    total = 0
    for group in workload.groups:
        nproc = workload.operator_env(group.type, 0).get("PET_NPROC_PER_NODE", "1")
        total += group.count * (1 + (int(nproc) if nproc.isdigit() else 1))
    capacity = _available_memory() // PROCESS_MEMORY_FLOOR
    if total > capacity:
        return (
            f"{total} processes (every replica's torchrun agent and its workers): this "
            f"machine's available memory holds at most {capacity} of them "
            f"({PROCESS_MEMORY_FLOOR >> 20} MiB each); lower spec.processesPerNode or "
            "spec.nodes, or run it on a cluster"
        )
    return None


def _claim_store(manifest: Mapping[str, Any], workload: Workload, sandboxed: bool) -> None:
    """Make the job's file:// store one of kctl-train's, and in pod sandboxes its run
    directory the pods' own (BadInput saying why not)."""
    location = StorageLocation.of(manifest)
    stores = file_store.roots(location.root) if location else None
    if stores is None:
        return
    store, run = stores
    try:
        file_store.claim(store)
        if sandboxed:
            from .sandbox.podspec import identity
            from .sandbox.userns import host_id

            uid, gid, _ = identity(workload, workload.main.type)
            file_store.run_directory(run, store, host_id(uid), host_id(gid))
    except file_store.StoreRefused as exc:
        raise BadInput(f"storage file://{store}: a local run cannot use it: {exc}") from None


def _names(manifest: Mapping[str, Any]) -> tuple[str, str]:
    meta = manifest["metadata"]
    return meta.get("namespace", "default"), meta["name"]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _replica(kind: Kind, job_name: str, r: LocalReplica) -> Replica:
    problems: tuple[str, ...] = ()
    if r.exit_code not in (None, 0):
        why = f": {r.message}" if r.message else ""
        problems = (f"exited with code {r.exit_code}{why}",)
    return Replica(
        name=r.name,
        tag=kind.tag(job_name, r.name),
        phase=r.phase,
        restarts=r.restarts,
        exit_code=r.exit_code,
        problems=problems,
        node=f"{r.address or 'localhost'} (pid {r.pid})" if r.pid else "-",
        created=r.created,
        scheduled=r.created,  # no scheduler: bound to this machine when made
        started=r.first_started,
    )


def _resume_step(manifest: Mapping[str, Any]) -> int | None:
    """The step of the checkpoint a run of this manifest starts from
    (runstore/resume_line.py), the first whose files are all there (None: a fresh start,
    a checkpoint URI's, or a choice the run will refuse). Nothing is copied to tell: the
    store is the pods', and a checkpoint's size is theirs to declare."""
    from ...spec.document import NotRenderedError, job_of

    try:
        job = job_of(dict(manifest))
    except NotRenderedError:
        return None
    try:
        store = store_for(job)
        found = first_complete(store, resume_line.plan_for(job, store).candidates)
    except (StoreError, resume_line.ResumeChoiceError):
        return None
    return found.step if found else None


def _kill_orphans(job: JobDir) -> list[int]:
    """Every process a dead supervisor left running (it was killed itself): each
    replica's process group and every process carrying the job's marker, wherever it
    re-parented. A group is only signalled while its leader still runs the replica's
    program (PIDs are reused). Returns the PIDs still alive afterwards."""
    try:
        local = job.local_status()
    except ValueError:
        local = None
    for replica in local.replicas if local else ():
        pid = replica.pid
        if not pid:
            continue
        cmdline = Path(f"/proc/{pid}/cmdline")
        try:
            program = cmdline.read_bytes() if cmdline.parent.parent.is_dir() else b"kctl-train"
            if b"kctl-train" not in program and b"operator_client" not in program:
                continue  # the PID was reused by something else
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    left = pod_processes.kill_all(pod_processes.job_prefix(job.path))
    if load_mode(job)[0].sandboxed:
        from .sandbox.pods import release_job

        release_job(job.path, [r.name for r in lc.replicas_of(job.workload())])
    return left
