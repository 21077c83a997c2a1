"""Where pods run: node-pool presets, GPU tolerations and raw scheduling constraints."""

from __future__ import annotations

from typing import Any

from ..spec.model import TrainingJob
from ..spec.providers import PRESET_LABELS, SPOT_LABELS, SPOT_TAINTED


def gpu_toleration_key(gpu_resource: str) -> str:
    """The taint key GPU node pools carry for a GPU resource.

    NVIDIA device plugins (full GPUs and MIG slices alike) taint with nvidia.com/gpu;
    other vendors taint with their resource name (amd.com/gpu).
    """
    return "nvidia.com/gpu" if gpu_resource.startswith("nvidia.com/") else gpu_resource


def node_selector(job: TrainingJob) -> dict[str, str]:
    """The preset's labels for accelerator, pool and spot capacity, then the raw
    nodeSelector."""
    pool = job.spec.node_pool
    labels = PRESET_LABELS[pool.preset]
    selector = {
        label: getattr(pool, field)
        for field, label in labels.items()
        if getattr(pool, field) is not None
    }
    if pool.spot:
        label, value = SPOT_LABELS[pool.preset]
        selector[label] = value
    selector.update(pool.node_selector)
    return dict(sorted(selector.items()))


def tolerations(job: TrainingJob) -> list[dict[str, Any]]:
    """GPU and preset tolerations (GPU pods only), the spot taint where the preset's spot
    nodes carry one, then the raw ones from the spec."""
    spec = job.spec
    out: list[dict[str, Any]] = []
    if spec.resources.gpus > 0:
        out.append(
            {
                "key": gpu_toleration_key(spec.resources.gpu_resource),
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        )
        if spec.node_pool.preset == "aks":
            # AKS GPU pools are created with the sku=gpu:NoSchedule taint.
            out.append({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
    if spec.node_pool.spot and spec.node_pool.preset in SPOT_TAINTED:
        key, value = SPOT_LABELS[spec.node_pool.preset]
        out.append({"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"})
    out.extend(t.model_dump(by_alias=True, exclude_none=True) for t in spec.node_pool.tolerations)
    return out
