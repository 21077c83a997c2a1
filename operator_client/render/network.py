"""Network profiles: the devices, NCCL environment and capabilities each one needs.

These are the only place where a rendered pod gains a Linux capability (IPC_LOCK, for
pinning RDMA memory); the default profile `none` keeps Pod Security "restricted".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.placement import Network


@dataclass(frozen=True)
class NetworkAdditions:
    resources: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()


DEFAULT_RESOURCE = {"efa": "vpc.amazonaws.com/efa", "infiniband": "rdma/rdma_shared_device_a"}

_ENV = {
    # aws-ofi-nccl over libfabric's EFA provider with GPUDirect RDMA.
    "efa": {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "NCCL_IB_DISABLE": "1",
    },
    "infiniband": {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB"},
}


def network_additions(network: Network) -> NetworkAdditions:
    """What the profile adds to the trainer container."""
    if network.profile == "none":
        return NetworkAdditions()
    resource = network.resource or DEFAULT_RESOURCE[network.profile]
    return NetworkAdditions(
        resources={resource: str(network.devices)},
        env=dict(_ENV[network.profile]),
        capabilities=("IPC_LOCK",),
    )
