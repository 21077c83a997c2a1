"""Rules that span several fields of a TrainingJob, each reported at the field to change.

`problems` returns errors (the job cannot be rendered as written); `warnings` returns
things that render fine but that a user should know about before paying for GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic.alias_generators import to_camel

from . import k8s_names
from .model import NodeRange, TrainingJob
from .providers import PRESET_LABELS, SPOT_LABELS
from .save_estimate import STATE_SIZE_FIELD
from .urls import CHECKPOINT_URI_SCHEMES, credentials_problem, path_problem

Loc = tuple[str | int, ...]

# Set by the training-operator, torchrun or the kctl-train runtime; a user value would
# be overwritten or would break rank discovery.
RESERVED_ENV = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "GROUP_RANK",
        "LOCAL_WORLD_SIZE",
        "PYTHONUNBUFFERED",
    }
)
# The whole job travels to the pods as JSON in KCTL_TRAIN_SPEC; Linux refuses to exec with
# one environment string over MAX_ARG_STRLEN (32 pages, 128 KiB). Room left for the rest.
SPEC_ENV_MAX = 120 * 1024
RESERVED_ENV_PREFIXES = ("PET_", "TORCHELASTIC_", "KCTL_TRAIN_")
SECRET_ENV = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
# lightning.Trainer arguments the runtime sets itself (runtime/worker.py build_trainer):
# given again in train.trainer, every rank would fail (multiple values for one keyword),
# or the runtime's checkpoints, report and goodput would silently go. Each with where the
# job says it instead.
_WORLD = (
    "is set by the runtime from the job's world size and hardware; remove it (use "
    "spec.nodes, spec.processesPerNode and spec.resources instead)"
)
RUNTIME_TRAINER_ARGS = {
    "devices": _WORLD,
    "num_nodes": _WORLD,
    "strategy": _WORLD,
    "accelerator": _WORLD,
    "plugins": _WORLD,
    "logger": (
        "is the runtime's CSV log, which the report and collect read; list yours in "
        "spec.train.loggers instead"
    ),
    "callbacks": (
        "are the runtime's (checkpoints, outputs, progress); list yours in "
        "spec.train.callbacks instead"
    ),
    "enable_checkpointing": "is off: checkpoints are spec.checkpoint; remove it",
    "default_root_dir": "is the runtime's scratch directory; remove it",
    "profiler": "is the runtime's goodput profiler (report's goodput account); remove it",
    "enable_progress_bar": "is the runtime's: progress lines in the logs; remove it",
    "enable_model_summary": "is off in the runtime; remove it",
}

# Lightning's checkpointing callbacks, by class name: the runtime saves its own checkpoints
# (enable_checkpointing is off, and Lightning refuses one of these with it off).
CHECKPOINT_CALLBACKS = frozenset({"ModelCheckpoint", "Checkpoint"})


@dataclass(frozen=True)
class FieldProblem:
    """One problem or warning, at a field path inside the document."""

    loc: Loc
    message: str


# JobSet names a TrainJob's pods `<name>-node-0-<index>-<5 random characters>`.
TRAINJOB_POD_SUFFIX = "-xxxxx"


def longest_pod_name(job: TrainingJob) -> str:
    """The longest pod/Service name the operator creates for this job."""
    name = job.metadata.name
    if job.spec.operator == "trainjob":
        return f"{name}-node-0-{job.max_nodes - 1}{TRAINJOB_POD_SUFFIX}"
    if job.elastic:
        return f"{name}-worker-{job.max_nodes - 1}"
    if job.max_nodes > 1:
        return f"{name}-worker-{job.max_nodes - 2}"
    return f"{name}-master-0"


def _name_length(job: TrainingJob) -> Iterator[FieldProblem]:
    pod_name = longest_pod_name(job)
    if len(pod_name) > 63:
        yield FieldProblem(
            ("metadata", "name"),
            f"too long: the operator names a pod and Service {pod_name!r} "
            f"({len(pod_name)} characters, at most 63); shorten the name by "
            f"{len(pod_name) - 63} characters",
        )


def _operator_limits(job: TrainingJob) -> Iterator[FieldProblem]:
    if job.spec.operator == "trainjob":
        yield from _trainjob_problems(job)


def _size(job: TrainingJob) -> Iterator[FieldProblem]:
    size = len(job.model_dump_json(by_alias=True, exclude_none=True).encode())
    if size > SPEC_ENV_MAX:
        yield FieldProblem(
            ("spec",),
            f"the job is {size} bytes as JSON; it travels to every pod in one environment "
            f"variable, which Linux limits to 128 KiB (at most {SPEC_ENV_MAX} bytes here): "
            "move large arguments into files in the image or the store",
        )


def _what_to_run(job: TrainingJob) -> Iterator[FieldProblem]:
    spec = job.spec
    if spec.train is None and spec.command is None:
        yield FieldProblem(
            ("spec",), "say what to run: give spec.train (Lightning import paths) or spec.command"
        )
    if spec.train is not None and spec.command is not None:
        yield FieldProblem(("spec", "command"), "give either spec.train or spec.command, not both")
    if spec.train is not None:
        for key in sorted(RUNTIME_TRAINER_ARGS.keys() & spec.train.trainer.keys()):
            yield FieldProblem(
                ("spec", "train", "trainer", key), f"{key} {RUNTIME_TRAINER_ARGS[key]}"
            )
        for i, callback in enumerate(spec.train.callbacks or ()):
            if callback.class_.rpartition(":")[2] in CHECKPOINT_CALLBACKS:
                yield FieldProblem(
                    ("spec", "train", "callbacks", i, "class"),
                    f"{callback.class_} would save Lightning's own checkpoints, which the "
                    "runtime turns off: its checkpoints are spec.checkpoint (every, keep); "
                    "remove this callback",
                )


def _node_range(job: TrainingJob) -> Iterator[FieldProblem]:
    nodes = job.spec.nodes
    if isinstance(nodes, NodeRange) and nodes.min > nodes.max:
        yield FieldProblem(
            ("spec", "nodes", "min"), f"min ({nodes.min}) is larger than max ({nodes.max})"
        )


def _processes(job: TrainingJob) -> Iterator[FieldProblem]:
    gpus = job.spec.resources.gpus
    nproc = job.spec.processes_per_node
    if nproc == "detect" and gpus == 0:
        yield FieldProblem(
            ("spec", "processesPerNode"),
            "'detect' needs GPU nodes (on CPU torchrun would start one process "
            "per core); use 'auto' or a number",
        )
    if isinstance(nproc, int) and gpus and nproc > gpus:
        yield FieldProblem(
            ("spec", "processesPerNode"),
            f"{nproc} processes on {gpus} GPUs per node: each process needs its "
            "own GPU; use at most resources.gpus or 'auto'",
        )


def _resources(job: TrainingJob) -> Iterator[FieldProblem]:
    resources = job.spec.resources
    for field, quantity in (("cpu", resources.cpu), ("memory", resources.memory)):
        if quantity.value <= 0:
            yield FieldProblem(
                ("spec", "resources", field), f"must be more than 0, got {quantity.text!r}"
            )
    if resources.shared_memory.value > resources.memory.value:
        yield FieldProblem(
            ("spec", "resources", "sharedMemory"),
            f"{resources.shared_memory.text} of /dev/shm is more than the node's "
            f"memory {resources.memory.text}; /dev/shm counts against the memory "
            "limit",
        )


def _node_pool(job: TrainingJob) -> Iterator[FieldProblem]:
    pool = job.spec.node_pool
    labels = PRESET_LABELS[pool.preset]
    for field in ("accelerator", "pool"):
        if getattr(pool, field) is not None and field not in labels:
            usable = [p for p, lab in PRESET_LABELS.items() if field in lab]
            yield FieldProblem(
                ("spec", "nodePool", field),
                f"the {pool.preset!r} preset has no {field} label; presets with "
                f"one: {', '.join(usable)} (or use nodePool.nodeSelector)",
            )
    if pool.spot and pool.preset not in SPOT_LABELS:
        yield FieldProblem(
            ("spec", "nodePool", "spot"),
            f"the {pool.preset!r} preset knows no spot nodes; presets that do: "
            f"{', '.join(SPOT_LABELS)} (or select spot nodes with nodePool.nodeSelector, "
            "and give fault.terminationGracePeriod as your provider's notice)",
        )
    for i, tol in enumerate(pool.tolerations):
        if tol.operator == "Exists" and tol.value is not None:
            yield FieldProblem(
                ("spec", "nodePool", "tolerations", i, "value"),
                "a toleration with operator Exists takes no value",
            )
        if tol.key is None and tol.operator == "Equal":
            yield FieldProblem(
                ("spec", "nodePool", "tolerations", i, "operator"),
                "a toleration without key must use operator Exists",
            )


def _env(job: TrainingJob) -> Iterator[FieldProblem]:
    for name in job.spec.env:
        if name in SECRET_ENV:
            yield FieldProblem(
                ("spec", "env", name),
                "never put credentials in the job file: name a Secret in "
                "spec.storage.credentialsSecret, or use a service account",
            )
        elif name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
            yield FieldProblem(
                ("spec", "env", name),
                "set by the training-operator, torchrun or the kctl-train runtime; remove it",
            )


def _storage(job: TrainingJob) -> Iterator[FieldProblem]:
    storage = job.spec.storage
    if storage is not None and storage.uri.startswith("file://"):
        for field in ("endpoint", "region", "credentials_secret"):
            if getattr(storage, field) is not None:
                yield FieldProblem(
                    ("spec", "storage", to_camel(field)),
                    "only s3:// stores take this; remove it or use an s3:// uri",
                )


def _resume(job: TrainingJob) -> Iterator[FieldProblem]:
    policy = job.spec.checkpoint
    resume, loc = policy.resume, ("spec", "checkpoint", "resume")
    if isinstance(resume, int) or resume in ("auto", "never"):
        return
    if resume == "best":
        if policy.monitor is None:
            yield FieldProblem(
                loc,
                "best needs spec.checkpoint.monitor (the metric that ranks checkpoints, "
                "val_loss say): add it, or give auto or a step",
            )
    elif not resume.startswith(CHECKPOINT_URI_SCHEMES):
        yield FieldProblem(
            loc,
            f"{resume!r}: use auto, never, best, a step number, or the s3:// or file:/// URI "
            "of a committed checkpoint",
        )
    elif problem := credentials_problem(resume) or path_problem(urlsplit(resume).path):
        yield FieldProblem(loc, problem)


def _best(job: TrainingJob) -> Iterator[FieldProblem]:
    policy = job.spec.checkpoint
    if policy.monitor is None:
        for field, value in (("mode", policy.mode), ("keepBest", policy.keep_best)):
            if value is not None:
                yield FieldProblem(
                    ("spec", "checkpoint", field),
                    f"has no effect without spec.checkpoint.monitor (the metric to rank "
                    f"checkpoints by, val_loss say): add it, or remove {field}",
                )


def _grace_period(job: TrainingJob) -> Iterator[FieldProblem]:
    if job.spec.grace_seconds == 0:
        yield FieldProblem(
            ("spec", "fault", "terminationGracePeriod"),
            "0s leaves no time for the emergency checkpoint on preemption",
        )


# Kubernetes refuses an Indexed Job with more completions (batch/v1 validation).
MAX_INDEXED_COMPLETIONS = 100_000


def _trainjob_problems(job: TrainingJob) -> Iterator[FieldProblem]:
    """What a TrainJob (Kubeflow Trainer v2.3) cannot express: its pods come from a
    cluster-wide runtime, and a TrainJob patches only part of them (docs/TRAINJOB.md)."""
    spec = job.spec
    instead = "or use operator: pytorchjob"
    if job.elastic:
        yield FieldProblem(
            ("spec", "nodes"),
            "a TrainJob runs a fixed number of nodes (Kubeflow Trainer v2 has no elastic "
            f"range): give nodes: N, {instead}",
        )
    elif isinstance(spec.nodes, int) and spec.nodes > MAX_INDEXED_COMPLETIONS:
        yield FieldProblem(
            ("spec", "nodes"),
            f"a TrainJob's nodes are one Indexed Job, which Kubernetes limits to "
            f"{MAX_INDEXED_COMPLETIONS} pods; give at most {MAX_INDEXED_COMPLETIONS}, {instead}",
        )
    # The kctl-train runtime has the spec's defaults for the first five; for cleanup and
    # the PriorityClass it has nothing a TrainJob could change.
    runtime_owned = (
        (("fault",), spec.fault, "restart_policy", True, "the pods' restart policy"),
        (("fault",), spec.fault, "backoff_limit", True, "the Job's backoffLimit"),
        (
            ("cleanup",),
            spec.cleanup,
            "pods",
            False,
            "which pods are deleted at the end (cleanPodPolicy)",
        ),
        (
            ("cleanup",),
            spec.cleanup,
            "ttl_after_finished",
            False,
            "deleting the finished job (TTL)",
        ),
        (("scheduling",), spec.scheduling, "priority_class_name", False, "the pods' PriorityClass"),
        ((), spec, "image_pull_policy", True, "the image pull policy"),
        ((), spec, "mount_service_account_token", True, "mounting the API token"),
    )
    for section, model, field, runtime_has_default, what in runtime_owned:
        allowed = type(model).model_fields[field].default if runtime_has_default else None
        if field in model.model_fields_set and getattr(model, field) != allowed:
            yield FieldProblem(
                ("spec", *section, to_camel(field)),
                f"a TrainJob cannot set {what}: it belongs to the TrainingRuntime its pods "
                "come from (the kctl-train ClusterTrainingRuntime in manifests/trainer-v2/ "
                f"has {_shown(allowed)}); remove it, set it in a TrainingRuntime of your own, "
                f"{instead}",
            )
    if spec.processes_per_node == "detect" and "gpu" not in spec.resources.gpu_resource:
        yield FieldProblem(
            ("spec", "processesPerNode"),
            "'detect' on a TrainJob leaves the count to Trainer v2, which passes `auto` only "
            f"for a resource named like '*gpu*' ({spec.resources.gpu_resource} is not) and "
            "otherwise starts one process per requested CPU: give a number",
        )
    if spec.scheduling.gang != "none":
        yield FieldProblem(
            ("spec", "scheduling", "gang"),
            "a TrainJob's gang scheduling is its runtime's podGroupPolicy (coscheduling or "
            "volcano), not a job field: use a TrainingRuntime with podGroupPolicy, "
            f"{instead}",
        )


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _label_problems(job: TrainingJob) -> Iterator[FieldProblem]:
    """Label and annotation keys and values the API server would refuse."""
    for loc, labels in (
        (("metadata", "labels"), job.metadata.labels),
        (("spec", "nodePool", "nodeSelector"), job.spec.node_pool.node_selector),
    ):
        for key, value in labels.items():
            problem = k8s_names.qualified_name_problem(key) or k8s_names.label_value_problem(value)
            if problem:
                yield FieldProblem((*loc, key), problem)
    annotations = job.metadata.annotations
    for key in annotations:
        if problem := k8s_names.qualified_name_problem(key):
            yield FieldProblem(("metadata", "annotations", key), problem)
    size = k8s_names.annotations_size(annotations)
    # The renderer adds its own (the spec hash, storage location): leave them room.
    if size > k8s_names.ANNOTATIONS_MAX - 4096:
        yield FieldProblem(
            ("metadata", "annotations"),
            f"{size} bytes of annotations; Kubernetes allows {k8s_names.ANNOTATIONS_MAX} in "
            "all, and kctl-train needs 4096 of them: put large data in the store",
        )


def warnings(job: TrainingJob) -> list[FieldProblem]:
    """Things that render but that a user should hear about."""
    spec = job.spec
    found = []
    if spec.storage is None:
        found.append(
            FieldProblem(
                ("spec", "storage"),
                "no storage: checkpoints and outputs stay in the pods and are lost when they go",
            )
        )
    if spec.scheduling.gang != "none":
        found.append(
            FieldProblem(
                ("spec", "scheduling", "gang"),
                f"gang scheduling takes effect only when the training-operator "
                f"runs with --gang-scheduler-name={spec.scheduling.gang}",
            )
        )
    if spec.network.profile != "none" and spec.resources.gpus == 0:
        found.append(
            FieldProblem(
                ("spec", "network", "profile"),
                f"the {spec.network.profile} profile on CPU-only nodes: NCCL "
                "is not used without GPUs",
            )
        )
    found.extend(_estimate_too_long(job))
    notice = spec.spot_notice_seconds
    if notice is not None and spec.grace_seconds > notice:
        found.append(
            FieldProblem(
                ("spec", "fault", "terminationGracePeriod"),
                f"{spec.grace_seconds}s, but a {spec.node_pool.preset} spot node is gone "
                f"{notice}s after its notice whatever the pods ask for: the emergency save "
                f"gets {notice}s; write auto to say so",
            )
        )
    return found


def _estimate_too_long(job: TrainingJob) -> Iterator[FieldProblem]:
    """Before any save is measured: the estimate from checkpoint.stateSize against what a
    preempted pod gets (apply replaces it with the measured budget once there is one)."""
    spec = job.spec
    estimate, window = spec.save_estimate, spec.save_window_seconds
    if estimate is None or estimate.emergency_save_s <= window:
        return
    what, advice = spec.short_window(estimate.auto_grace_seconds)
    yield FieldProblem(
        STATE_SIZE_FIELD,
        f"{estimate.words()}: more than {what}, so a preempted pod would not save and the "
        f"work since the last checkpoint would be lost; {advice}",
    )


# The cross-field rules, each a named function, in the order their fields appear.
RULES: tuple[Callable[[TrainingJob], Iterator[FieldProblem]], ...] = (
    _name_length,
    _label_problems,
    _operator_limits,
    _size,
    _what_to_run,
    _node_range,
    _processes,
    _resources,
    _node_pool,
    _env,
    _storage,
    _resume,
    _best,
    _grace_period,
)


def problems(job: TrainingJob) -> list[FieldProblem]:
    """Every cross-field error of the job, in document order."""
    return [found for rule in RULES for found in rule(job)]
