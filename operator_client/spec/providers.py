"""What the cloud node-pool presets mean: node labels, spot capacity, and how long a spot
node lives after its provider's notice (sources beside SPOT_NOTICE_SECONDS)."""

from __future__ import annotations

PRESET_LABELS: dict[str, dict[str, str]] = {
    # preset -> {spec field: node label}
    "gke": {
        "accelerator": "cloud.google.com/gke-accelerator",
        "pool": "cloud.google.com/gke-nodepool",
    },
    "eks": {"pool": "eks.amazonaws.com/nodegroup"},
    "aks": {"pool": "kubernetes.azure.com/agentpool"},
    "karpenter": {
        "accelerator": "karpenter.k8s.aws/instance-gpu-name",
        "pool": "karpenter.sh/nodepool",
    },
    "gfd": {"accelerator": "nvidia.com/gpu.product"},
    "none": {},
}

# preset -> (label, value) its spot nodes carry.
SPOT_LABELS: dict[str, tuple[str, str]] = {
    "gke": ("cloud.google.com/gke-spot", "true"),
    "eks": ("eks.amazonaws.com/capacityType", "SPOT"),
    "aks": ("kubernetes.azure.com/scalesetpriority", "spot"),
    "karpenter": ("karpenter.sh/capacity-type", "spot"),
}

# Presets whose spot nodes are tainted with their spot label (NoSchedule): AKS taints every
# spot pool; GKE spot pools often are (the documented way to keep other pods off them).
SPOT_TAINTED = ("gke", "aks")

# Seconds from a spot node's preemption notice to its end, whatever the pods' grace period:
# GKE spot and Azure spot give 30 s (GKE's graceful node shutdown leaves pods about 15 s of
# them), an EC2 spot interruption 2 minutes. Sources:
# https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms,
# https://learn.microsoft.com/azure/virtual-machines/spot-vms,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
SPOT_NOTICE_SECONDS: dict[str, int] = {"gke": 30, "aks": 30, "eks": 120, "karpenter": 120}

# terminationGracePeriod: auto where no provider limit bounds it.
DEFAULT_GRACE_SECONDS = 120


def spot_notice_seconds(preset: str, spot: bool) -> int | None:
    """How long a spot node lives after its provider's notice (None: not spot, or no
    known limit)."""
    return SPOT_NOTICE_SECONDS.get(preset) if spot else None


def grace_seconds(grace: int | None, preset: str, spot: bool, sized: int | None = None) -> int:
    """The pods' terminationGracePeriodSeconds: `grace`, or for auto (None) the spot
    notice where there is one, elsewhere DEFAULT_GRACE_SECONDS or `sized` (what the save
    estimate asks for, save_estimate.py) where that is longer."""
    if grace is not None:
        return grace
    return spot_notice_seconds(preset, spot) or max(DEFAULT_GRACE_SECONDS, sized or 0)


def save_window_seconds(
    grace: int | None, preset: str, spot: bool, sized: int | None = None
) -> int:
    """SIGTERM to SIGKILL as a preempted pod sees it: the grace period, cut to the spot
    notice on spot nodes (the node goes whatever the pod asked for)."""
    seconds = grace_seconds(grace, preset, spot, sized)
    notice = spot_notice_seconds(preset, spot)
    return seconds if notice is None else min(seconds, notice)
