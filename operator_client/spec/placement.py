"""Where and on what a job's pods run: each node's resources, the node pool (cloud
presets, spot capacity, selectors, tolerations), the interconnect and the scheduling."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .fields import DNS_1123_LABEL, RESOURCE_NAME, JsonArgs, SpecModel, Text
from .quantities import INT32_MAX, INT64_MAX
from .units import Quantity


class Resources(SpecModel):
    """Resources of one node (pod)."""

    gpus: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        0, description="GPUs per node, requested as `gpuResource` in limits and requests."
    )
    gpu_resource: Annotated[str, Field(pattern=RESOURCE_NAME)] = Field(
        "nvidia.com/gpu",
        description=(
            "Extended resource name: nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb, ..."
        ),
    )
    cpu: Quantity = Field(
        Quantity.parse("2"),
        description="CPU request per node (no CPU limit is set: limits throttle data loaders).",
    )
    memory: Quantity = Field(
        Quantity.parse("8Gi"),
        description="Memory request and limit per node (includes /dev/shm usage).",
    )
    shared_memory: Quantity = Field(
        Quantity.parse("1Gi"),
        description="Size limit of the memory-backed /dev/shm (DataLoader workers use it).",
    )


class NodePool(SpecModel):
    """Where the pods run: a cloud preset plus raw scheduling constraints."""

    preset: Literal["none", "gke", "eks", "aks", "karpenter", "gfd"] = Field(
        "none", description="Maps `accelerator` and `pool` to the provider's node labels."
    )
    accelerator: str | None = Field(
        None,
        description="GPU model label value (gke, karpenter, gfd presets), e.g. nvidia-h100-80gb.",
    )
    pool: str | None = Field(
        None, description="Node pool / node group name (gke, eks, aks, karpenter presets)."
    )
    node_selector: dict[str, Text] = Field(
        {}, description="Extra nodeSelector entries (merged after the preset's)."
    )
    tolerations: list[Toleration] = Field(
        [], description="Extra tolerations (added after the GPU and preset tolerations)."
    )
    affinity: JsonArgs = Field({}, description="Raw Kubernetes affinity, passed through unchanged.")
    spot: bool | None = Field(
        None,
        description=(
            "true: run on the preset's spot (preemptible) capacity: its spot node label is "
            "selected (and its spot taint tolerated on GKE and AKS), and the provider's notice "
            "bounds the time to save on preemption: 30s on GKE and AKS, 120s on EKS and "
            "Karpenter (fault.terminationGracePeriod: auto takes it). Needs a cloud preset. "
            "None or false: whatever capacity the pool has."
        ),
    )


class Toleration(SpecModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: Text | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None


class Network(SpecModel):
    """High-speed interconnect. Only these profiles add Linux capabilities (IPC_LOCK)."""

    profile: Literal["none", "efa", "infiniband"] = Field(
        "none",
        description=(
            "none: pod network only; efa: AWS Elastic Fabric Adapter; infiniband: RDMA devices."
        ),
    )
    devices: Annotated[int, Field(ge=1, le=INT32_MAX)] = Field(
        1, description="Interconnect devices per node (efa: e.g. 4 on p4d, 32 on p5)."
    )
    resource: Annotated[str, Field(pattern=RESOURCE_NAME)] | None = Field(
        None,
        description=(
            "Device resource name; default vpc.amazonaws.com/efa or rdma/rdma_shared_device_a."
        ),
    )


class Scheduling(SpecModel):
    queue: Annotated[str, Field(pattern=DNS_1123_LABEL)] | None = Field(
        None, description="Kueue LocalQueue name (label kueue.x-k8s.io/queue-name)."
    )
    priority_class_name: str | None = Field(
        None, description="PriorityClass of the pods (and of the gang, when gang scheduling is on)."
    )
    gang: Literal["none", "volcano", "scheduler-plugins"] = Field(
        "none",
        description=(
            "Gang scheduling through runPolicy.schedulingPolicy; the operator must run with --gang-"
            "scheduler-name set to the same scheduler."
        ),
    )
