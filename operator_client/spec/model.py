"""The typed TrainingJob model: the single source of truth for job.yaml.

Field names are camelCase in YAML (Kubernetes style) and snake_case in Python. Every
default lives here, so `kctl-train render` shows it; unknown fields are errors.
Checks that span several fields live in `checks.py`, so that each error can point at
the field the user has to change.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
)

from ..contract import DEFAULT_BACKOFF_LIMIT
from . import providers
from .fields import (
    DNS_1035,
    DNS_1123_LABEL,
    ENV_NAME,
    IMPORT_PATH,
    JsonArgs,
    ProcessesPerNode,
    SpecModel,
    Text,
    no_control,
)
from .placement import Network, NodePool, Resources, Scheduling
from .quantities import INT32_MAX, INT64_MAX
from .save_estimate import SaveEstimate, estimate
from .units import ByteSize, Duration, Every
from .urls import check_endpoint, check_store_url

API_VERSION = "kctl-train/v1alpha1"
KIND = "TrainingJob"


class Metadata(SpecModel):
    name: Annotated[str, Field(pattern=DNS_1035, max_length=63)] = Field(
        description="Job name (DNS-1035). `<name>-worker-<max index>` must fit in 63 characters."
    )
    namespace: Annotated[str, Field(pattern=DNS_1123_LABEL, max_length=63)] = Field(
        "default", description="Kubernetes namespace of the PyTorchJob."
    )
    labels: dict[str, Text] = Field({}, description="Labels added to the PyTorchJob and its pods.")
    annotations: dict[str, Text] = Field({}, description="Annotations added to the PyTorchJob.")


class LightningPlugin(SpecModel):
    """A Lightning logger or callback the runtime builds on every rank, beside its own."""

    class_: Annotated[str, Field(pattern=IMPORT_PATH)] = Field(
        alias="class",
        description=(
            "The class as `package.module:Class`, e.g. "
            "`lightning.pytorch.loggers:TensorBoardLogger`."
        ),
    )
    args: JsonArgs = Field({}, description="Keyword arguments for the class.")


class TrainSpec(SpecModel):
    """What the runtime fits: Lightning import paths (like LightningCLI) and their args."""

    model: Annotated[str, Field(pattern=IMPORT_PATH)] = Field(
        description="LightningModule class as `package.module:Class`."
    )
    model_args: JsonArgs = Field({}, description="Keyword arguments for the LightningModule.")
    data: Annotated[str, Field(pattern=IMPORT_PATH)] | None = Field(
        None, description="LightningDataModule class as `package.module:Class` (optional)."
    )
    data_args: JsonArgs = Field({}, description="Keyword arguments for the LightningDataModule.")
    trainer: JsonArgs = Field(
        {},
        description=(
            "Keyword arguments for `lightning.Trainer` (not those the runtime sets: "
            "devices, num_nodes, strategy, accelerator, plugins, logger, callbacks, "
            "enable_checkpointing, default_root_dir, profiler, enable_progress_bar, "
            "enable_model_summary)."
        ),
    )
    loggers: list[LightningPlugin] | None = Field(
        None,
        description=(
            "Lightning loggers beside the runtime's CSV log (which the report reads): "
            "TensorBoardLogger (its event files go to the run store's `tensorboard/` unless "
            "`args.save_dir` says where), MLFlowLogger, WandbLogger, CSVLogger, any Logger. "
            "Logged to from rank 0, as Lightning does; the goodput account is logged to them "
            "at the end. None: the CSV log alone."
        ),
    )
    callbacks: list[LightningPlugin] | None = Field(
        None,
        description=(
            "Lightning callbacks beside the runtime's (checkpoints, outputs, progress): "
            "EarlyStopping (a run it stops ends finished, with a final checkpoint), "
            "LearningRateMonitor, your own. Not ModelCheckpoint: checkpoints are "
            "spec.checkpoint. None: the runtime's alone."
        ),
    )
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(
        0, description="Seed for `lightning.seed_everything` on every rank."
    )


class NodeRange(SpecModel):
    """An elastic node count: the job runs with any count from min to max."""

    min: Annotated[int, Field(ge=1, le=INT32_MAX)]
    max: Annotated[int, Field(ge=1, le=INT32_MAX)]


def _nodes_tag(value: Any) -> str:
    # Called with YAML data when validating and with the model when serializing.
    return "range" if isinstance(value, (dict, NodeRange)) else "count"


Nodes = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=INT32_MAX)], Tag("count")]
    | Annotated[NodeRange, Tag("range")],
    Discriminator(_nodes_tag),
]


class FaultPolicy(SpecModel):
    max_restarts: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        3, description="In-place restarts of the workers by the elastic agent on each node."
    )
    backoff_limit: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        DEFAULT_BACKOFF_LIMIT, description="Pod restarts before the job is marked Failed."
    )
    restart_policy: Literal["OnFailure", "ExitCode", "Never"] = Field(
        "OnFailure", description="Pod restart policy of every replica."
    )
    active_deadline: Duration | None = Field(
        None, description="Wall-time limit of the whole job, e.g. 72h."
    )
    termination_grace_period: Literal["auto"] | Duration = Field(
        Duration.parse("120s"),
        description=(
            "Time between SIGTERM and SIGKILL: the emergency checkpoint must fit in it. auto: "
            "the spot notice of the node pool (nodePool.spot: 30s on GKE and AKS, 120s on EKS "
            "and Karpenter); elsewhere 120s, or longer when checkpoint.stateSize says an "
            "emergency save needs more (1.5 times the estimate)."
        ),
    )


class CheckpointPolicy(SpecModel):
    every: Every = Field(
        Every.parse("30m"),
        description="Checkpoint interval: wall time ('30m') or steps ('500 steps').",
    )
    keep: Annotated[int, Field(ge=1, le=INT32_MAX)] = Field(
        3,
        description=(
            "Committed checkpoints to keep; older ones are deleted after a newer one commits."
        ),
    )
    resume: Annotated[int, Field(ge=0, le=INT64_MAX)] | Annotated[str, Field(min_length=1)] = Field(
        "auto",
        description=(
            "Where the run starts: auto: the newest committed checkpoint; never: fresh; "
            "best: the best by monitor; a step number: that committed checkpoint; or a "
            "checkpoint URI. A choice other than auto is taken once per spec: every later "
            "attempt (a restart, a preemption, the same file applied again) continues from "
            "the newest checkpoint since."
        ),
    )
    when_busy: Literal["wait", "skip"] = Field(
        "wait",
        description=(
            "A save that comes while the previous one is still being written in the "
            "background: wait for it (training stalls until it is committed), or skip this "
            "save (counted in metrics/checkpoints.csv). The final and the SIGTERM save wait."
        ),
    )
    monitor: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None,
        description=(
            "A metric the LightningModule logs (val_loss): each checkpoint records its value "
            "when saved; retention keeps the best keepBest by it beside the newest keep, and "
            "`collect --checkpoint best` takes the best. None: the newest only."
        ),
    )
    mode: Literal["min", "max"] | None = Field(
        None, description="Whether smaller (min, the default) or larger monitor values are better."
    )
    keep_best: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = Field(
        None,
        description=(
            "Checkpoints kept for their monitor value besides the newest keep (default 1 "
            "with a monitor)."
        ),
    )
    state_size: ByteSize | None = Field(
        None,
        description=(
            "The checkpoint's size, every rank's share together (model, optimizer and "
            "loop state: about 16 bytes per parameter with Adam in fp32), e.g. 14Gi. "
            "Before any save is measured it sizes the emergency save: "
            "fault.terminationGracePeriod: auto grows to hold it, and validate warns when "
            "a spot notice cannot. None: no estimate."
        ),
    )

    @property
    def best(self) -> tuple[str, str, int] | None:
        """(monitor, mode, how many best to keep) with the defaults, None without a monitor."""
        if self.monitor is None:
            return None
        return self.monitor, self.mode or "min", 1 if self.keep_best is None else self.keep_best


class Storage(SpecModel):
    """Object store for checkpoints and outputs. Credentials never appear inline."""

    uri: Annotated[
        str,
        Field(pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|file:///.*)$"),
        AfterValidator(check_store_url),
    ] = Field(
        description=(
            "Run roots go under `<uri>/<namespace>/<name>/`: s3://bucket/prefix or file:///path."
        ),
    )
    endpoint: (
        Annotated[str, Field(pattern=r"^https?://[^\s/]+(/.*)?$"), AfterValidator(check_endpoint)]
        | None
    ) = Field(None, description="S3 API endpoint for MinIO and other S3-compatible stores.")
    region: str | None = Field(None, description="Bucket region (AWS_REGION).")
    credentials_secret: Annotated[str, Field(pattern=DNS_1123_LABEL)] | None = Field(
        None,
        description=(
            "Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; omit to use the service "
            "account (IRSA, workload identity)."
        ),
    )


class Monitoring(SpecModel):
    gpu_interval_seconds: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        10, description="Seconds between GPU samples on each node; 0 turns the monitor off."
    )


class Cleanup(SpecModel):
    pods: Literal["Running", "All", "None"] = Field(
        "Running",
        description=(
            "Pods deleted when the job finishes (cleanPodPolicy). "
            "Running frees GPUs held by workers "
            "still running after the Master succeeded."
        ),
    )
    ttl_after_finished: Duration = Field(
        Duration.parse("24h"), description="The finished PyTorchJob is deleted after this long."
    )


class JobSpec(SpecModel):
    operator: Literal["pytorchjob", "trainjob"] = Field(
        "pytorchjob",
        description=(
            "What the job renders to: a Kubeflow PyTorchJob (training-operator v1.9) or a "
            "TrainJob (Kubeflow Trainer v2.3, through the kctl-train ClusterTrainingRuntime)."
        ),
        # The kind of object, not part of what runs: kept out of the spec the pods get.
        exclude=True,
    )
    image: Annotated[str, Field(min_length=1, pattern=r"^\S+$")] = Field(
        description="Trainer image (built from images/), optionally pinned with @sha256:..."
    )
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    image_pull_secrets: list[Annotated[str, Field(pattern=DNS_1123_LABEL)]] = Field([])
    service_account_name: str | None = Field(
        None,
        description="ServiceAccount of the pods (IRSA / workload identity for the object store).",
    )
    mount_service_account_token: bool = Field(
        False,
        description=(
            "Mount the Kubernetes API token into the pods "
            "(only if the training code calls the API)."
        ),
    )
    train: TrainSpec | None = Field(
        None, description="Lightning import paths to fit; give either this or `command`."
    )
    command: (
        Annotated[list[Annotated[str, AfterValidator(no_control)]], Field(min_length=1)] | None
    ) = Field(
        None, description="A user command, still launched through the runtime's torchrun agent."
    )
    nodes: Nodes = Field(
        1, description="Fixed node count (Master + Workers), or {min, max} for an elastic job."
    )
    processes_per_node: ProcessesPerNode = Field(
        "auto",
        description=(
            "auto: GPUs per node (1 on CPU nodes) written into the manifest; "
            "detect: torchrun counts "
            "the visible GPUs at start (GPU nodes only); or an explicit count."
        ),
    )
    resources: Resources = Field(default_factory=Resources)
    node_pool: NodePool = Field(default_factory=NodePool)
    network: Network = Field(default_factory=Network)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    fault: FaultPolicy = Field(default_factory=FaultPolicy)
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    storage: Storage | None = Field(
        None, description="Where checkpoints and outputs go; without it they are lost with the pod."
    )
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], Text] = Field(
        {}, description="Extra environment of the trainer container."
    )
    monitoring: Monitoring = Field(default_factory=Monitoring)
    cleanup: Cleanup = Field(default_factory=Cleanup)

    @property
    def spot_notice_seconds(self) -> int | None:
        """How long a spot node lives after its provider's notice (None: not spot, or no
        known limit)."""
        return providers.spot_notice_seconds(self.node_pool.preset, self.node_pool.spot is True)

    @property
    def save_estimate(self) -> SaveEstimate | None:
        """What an emergency save needs by estimate (checkpoint.stateSize over the fewest
        nodes); None without a stateSize."""
        size = self.checkpoint.state_size
        if size is None:
            return None
        nodes = self.nodes.min if isinstance(self.nodes, NodeRange) else self.nodes
        return estimate(int(size.value), nodes)

    @property
    def grace_seconds(self) -> int:
        """The pods' terminationGracePeriodSeconds, `auto` resolved."""
        pool = self.node_pool
        return providers.grace_seconds(self._grace, pool.preset, pool.spot is True, self._sized)

    @property
    def save_window_seconds(self) -> int:
        """SIGTERM to SIGKILL as a preempted pod will see it (providers.save_window_seconds)."""
        pool = self.node_pool
        return providers.save_window_seconds(
            self._grace, pool.preset, pool.spot is True, self._sized
        )

    def short_window(self, wanted: int) -> tuple[str, str]:
        """For a warning that an emergency save does not fit: what bounds a preempted
        pod's time (the spot notice or the grace period), and what to do, `wanted` being
        the grace period that would hold the save."""
        window = self.save_window_seconds
        if self.spot_notice_seconds == window:
            what = f"the {self.node_pool.preset} spot notice, {window}s"
            longer = f"a pool without spot (nodePool.spot: false) and a grace of {wanted}s"
        else:
            what, longer = f"the {window}s grace period", f"a grace of at least {wanted}s"
        return what, (
            f"take {longer}, save less per pod (more nodes), take checkpoint.whenBusy: skip "
            "(no save in flight to wait for), or save more often (less to lose)"
        )

    @property
    def _sized(self) -> int | None:
        found = self.save_estimate
        return None if found is None else found.auto_grace_seconds

    @property
    def _grace(self) -> int | None:
        grace = self.fault.termination_grace_period
        return None if grace == "auto" else grace.seconds


class TrainingJob(SpecModel):
    """A distributed training job: one file, rendered to one Kubeflow PyTorchJob."""

    model_config = ConfigDict(title="TrainingJob", defer_build=False)

    api_version: Literal["kctl-train/v1alpha1"]
    kind: Literal["TrainingJob"]
    metadata: Metadata
    spec: JobSpec

    @property
    def elastic(self) -> bool:
        return isinstance(self.spec.nodes, NodeRange)

    @property
    def max_nodes(self) -> int:
        nodes = self.spec.nodes
        return nodes.max if isinstance(nodes, NodeRange) else nodes

    @property
    def min_nodes(self) -> int:
        nodes = self.spec.nodes
        return nodes.min if isinstance(nodes, NodeRange) else nodes


NodePool.model_rebuild()
