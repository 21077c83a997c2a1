"""The local backend: runs a rendered PyTorchJob or TrainJob as processes on this machine.

The image is not pulled: each replica runs the trainer container's command from the
installed package, with the container's env and exactly the operator's additions
(local_env.py). A TrainJob's pods come from the Trainer v2 runtime it names: kctl-train's
own ClusterTrainingRuntime, built in as a cluster has it installed, one given with
`--runtime`, or one read from the cluster; check and submit read one plan of the job's
pods (controlplane/pod_plan.py).
A detached supervisor (supervisor.py) owns the processes; this module submits,
inspects, stops and deletes jobs through their directory (jobdir.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...contract import ImageRoot, Progress
from ...controlplane import lifecycle as lc
from ...controlplane.pod_plan import JobPlan, plan_of
from ...controlplane.workload import Workload, WorkloadError
from ...errors import BadInput, ClusterError, JobNotFound, LocalJobError
from ...kubeflow import trainjob as tj
from ...kubeflow.pod_objects import Lookup, PodObjects, references, values_of
from ...runstore import resume_line
from ...runstore.checkpoints import first_complete
from ...runstore.location import home, store_for
from ...spec.document import NotRenderedError, job_of
from ...storage import StoreError
from ..base import Backend
from ..types import (
    Event,
    Fault,
    Finding,
    JobChanged,
    JobView,
    LogLine,
    ProgressReport,
    StorageLocation,
    Submitted,
)
from ..views import new_events, pick
from . import chaos
from .admission import level_of
from .adoption import running_pods
from .jobdir import JobDir, write_json
from .logs import LogFollower
from .logs import tail as tail_lines
from .orphans import kill_orphans
from .pods.launch import load_mode, save_mode
from .preflight import MAX_REPLICAS, claim_store, preflight
from .sandbox.podspec import DEFAULT_UID
from .sandbox.support import AUTO, MODE_ENV, MODES, SANDBOX, choose
from .supervisor import start_supervisor
from .view import view_of

if TYPE_CHECKING:
    from ...spec.model import TrainingJob

# Inside the class, `list` is the Backend method.
JobDirs = list[JobDir]

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
        # The last check's manifest and environment, plan and findings, for its submit.
        self._last_check: tuple[Any, tuple[JobPlan | None, list[Finding]]] | None = None

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
        self._last_check = None  # a check looks afresh; the submit after it reuses it
        return self._checked(manifest, env)[1]

    def _checked(
        self, manifest: Mapping[str, Any], env: Mapping[str, str]
    ) -> tuple[JobPlan | None, list[Finding]]:
        """The job's pod plan (None: it has none here) and the findings on it; a check
        followed by a submit of the same manifest (Client.apply) builds them once."""
        key = (json.dumps(manifest, sort_keys=True, default=str), sorted(env.items()))
        if self._last_check is not None and self._last_check[0] == key:
            return self._last_check[1]

        try:
            borrowed = self._borrow(manifest)
            plan = plan_of(
                manifest,
                self.runtimes,
                level=self.pod_security,
                default_uid=DEFAULT_UID,
                max_pods=MAX_REPLICAS,
            )
            borrowed += self._borrow_objects(plan)
        except ClusterError as exc:
            return None, [Finding("error", f"reading from the cluster of --context: {exc}")]
        except (WorkloadError, KeyError) as exc:
            return None, [Finding("error", f"the local backend cannot run this job: {exc}", True)]
        checked = (
            plan,
            preflight(
                manifest,
                plan,
                borrowed=borrowed,
                runtimes=self.runtimes,
                objects=self.objects,
                requested=self._requested(),
                env=env,
            ),
        )
        self._last_check = key, checked
        return checked

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

    def _borrow_objects(self, plan: JobPlan) -> list[str]:
        """The Secrets and ConfigMaps the pods read that were not given, from the cluster."""
        if self.lookup is None:
            return []
        borrowed = []
        secrets = {k: dict(v) for k, v in self.objects.secrets.items()}
        configmaps = {k: dict(v) for k, v in self.objects.configmaps.items()}
        templates = [g.template for g in plan.groups]
        for kind, name in sorted(references(templates)):
            have = secrets if kind == "Secret" else configmaps
            if name in have:
                continue
            found = self.lookup(kind, name, plan.namespace)
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
        # refused before anything is written (after Client.apply's check, its result).
        plan, findings = self._checked(manifest, os.environ)
        self._last_check = None
        errors = [f for f in findings if f.level == "error"]
        if any(f.bad_input for f in errors):
            raise BadInput("; ".join(f.message for f in errors))
        if errors:
            raise LocalJobError("; ".join(f.message for f in errors))
        finished = job.exists() and not job.supervisor_alive()
        # Its supervisor died, its pods did not: a new one follows them, as a restarted
        # operator does, and the run goes on where it is (adoption.py).
        running = running_pods(job) if finished and job.manifest() == manifest else []
        if dry_run:
            note = None
            if running:
                note = f"local job {namespace}/{name} lost its supervisor: apply takes over "
                note += ", ".join(running)
            elif finished:
                note = f"local job {namespace}/{name} has finished: apply replaces it"
            pods = list(plan.objects) if plan else []
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
        if running:
            start_supervisor(job)
            note = f"its supervisor had ended; a new one took over {', '.join(running)}"
            return self._submitted(job, "unchanged", None, note)
        resumes = _resume_step(manifest)  # before the new run starts to write
        # A supervisor that died (killed, say) may have left its replicas running: they
        # would train and write beside the new run. They end first.
        left = kill_orphans(job)
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
        assert plan is not None  # no plan is an error finding, refused above
        claim_store(manifest, plan, mode.sandboxed)
        shutil.rmtree(job.path, ignore_errors=True)
        job.path.mkdir(parents=True)
        write_json(job.manifest_file, manifest)
        if self.objects.secrets or self.objects.configmaps:
            write_json(job.objects_file, self.objects.to_json())
            job.objects_file.chmod(0o600)  # Secrets' values
        if plan.trainjob and manifest["spec"]["runtimeRef"]["name"] in self.runtimes:
            write_json(job.runtime_file, self.runtimes[manifest["spec"]["runtimeRef"]["name"]])
        save_mode(job, mode, self.image)
        start_supervisor(job)
        return self._submitted(job, "replaced" if finished else "created", resumes)

    def _submitted(
        self, job: JobDir, verb: str, resumes: int | None, note: str | None = None
    ) -> Submitted:
        view = self._view(job)
        how = f"local, {load_mode(job)[0].describe()}"
        logs = str(job.path / "logs")
        return Submitted(
            view, verb, view.raw, how=how, resume_step=resumes, logs_at=logs, note=note
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
        return view_of(job, self.name, manifest, runs_as, workload)

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
            left = kill_orphans(job)
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


def _names(manifest: Mapping[str, Any]) -> tuple[str, str]:
    meta = manifest["metadata"]
    return meta.get("namespace", "default"), meta["name"]


def _resume_step(manifest: Mapping[str, Any]) -> int | None:
    """The step of the checkpoint a run of this manifest starts from
    (runstore/resume_line.py), the first whose files are all there (None: a fresh start,
    a checkpoint URI's, or a choice the run will refuse). Nothing is copied to tell: the
    store is the pods', and a checkpoint's size is theirs to declare."""
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
