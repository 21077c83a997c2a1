"""The pods' network on this machine: a bridge per job, and per replica a network
namespace joined to it by a veth pair, with an address of its own in a /24 made here
(10.213.0.0/16, never routed anywhere). Pods reach each other and nothing else: the
bridge has no address of this machine's (no IPv4, no IPv6 link-local) and the pods have
no route beyond their /24, so no service of this machine is reachable from a pod. The
store is relayed into each pod's own loopback (relay.py).

Fault injection works on the host end of a pod's veth: link down (a partition), netem
(latency, loss).
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
NETNS_DIR = Path("/run/netns")
LOCK = Path("/run/kctl-train-network.lock")


class NetworkError(OSError):
    pass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run iproute2's `ip`; NetworkError with its message when it fails and `check`."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def _used_networks() -> set[ipaddress.IPv4Network]:
    out = ip("-o", "-4", "addr", "show", check=False).stdout
    used = set()
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.add(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    return used


def key_of(job_path: Path) -> str:
    return hashlib.sha256(str(job_path.resolve()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class PodNetwork:
    """One job's network: `key` names its links and namespaces (8 hex digits of the job's
    directory: interface names have at most 15 characters)."""

    key: str
    subnet: ipaddress.IPv4Network
    pods: tuple[str, ...]

    @classmethod
    def make(cls, job_path: Path, pods: Sequence[str]) -> PodNetwork:
        """plan() and create(), one job at a time on this machine: two jobs starting
        together would otherwise both take the /24 that neither has taken yet."""
        NETNS_DIR.parent.mkdir(parents=True, exist_ok=True)
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            network = cls.plan(job_path, pods)
            network.create()
        return network

    @classmethod
    def plan(cls, job_path: Path, pods: Sequence[str]) -> PodNetwork:
        """Choose the job's /24: derived from its directory, the next free one if taken."""
        key = key_of(job_path)
        subnets = list(SUPERNET.subnets(new_prefix=24))
        start = int(key, 16) % len(subnets)
        used = _used_networks()
        for offset in range(len(subnets)):
            subnet = subnets[(start + offset) % len(subnets)]
            if subnet not in used:
                return cls(key, subnet, tuple(pods))
        raise NetworkError(f"no free /24 left in {SUPERNET} for pod networks")

    @classmethod
    def existing(
        cls, job_path: Path, pods: Sequence[str], addresses: Mapping[str, str]
    ) -> PodNetwork:
        """The network a job's pods run on now, from their addresses (each /24's
        .2 onward: address()); ValueError where they are not this job's plan."""
        subnet = ipaddress.IPv4Interface(f"{next(iter(addresses.values()))}/24").network
        network = cls(key_of(job_path), subnet, tuple(pods))
        if network.addresses() != dict(addresses):
            raise ValueError(f"the pods' addresses {dict(addresses)} are not one job's /24")
        return network

    @classmethod
    def of(cls, job_path: Path, pods: Sequence[str]) -> PodNetwork:
        """The job's network by name only (to remove what a killed supervisor left)."""
        return cls(key_of(job_path), SUPERNET, tuple(pods))

    @property
    def bridge(self) -> str:
        return f"ktb{self.key}"

    def address(self, pod: str) -> str:
        return str(self.subnet.network_address + 2 + self.pods.index(pod))

    def addresses(self) -> dict[str, str]:
        return {pod: self.address(pod) for pod in self.pods}

    def netns(self, pod: str) -> str:
        return f"kt{self.key}-{self.pods.index(pod)}"

    def netns_path(self, pod: str) -> Path:
        return NETNS_DIR / self.netns(pod)

    def veth(self, pod: str) -> str:
        """The host end of the pod's veth pair."""
        return f"ktv{self.key}{self.pods.index(pod):03d}"

    def create(self) -> None:
        """The bridge and every pod's namespace, veth and address (anything of an earlier
        run of the job is removed first)."""
        self.destroy()
        prefix = self.subnet.prefixlen
        # `addrgenmode none`: no IPv6 link-local address, through which a pod could reach
        # a service of this machine listening on all addresses.
        ip("link", "add", self.bridge, "type", "bridge")
        ip("link", "set", self.bridge, "addrgenmode", "none")
        ip("link", "set", self.bridge, "up")
        for pod in self.pods:
            ns, veth = self.netns(pod), self.veth(pod)
            ip("netns", "add", ns)
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", veth, "addrgenmode", "none")
            ip("link", "set", veth, "master", self.bridge, "up")
            ip("-n", ns, "link", "set", "eth0", "addrgenmode", "none")
            ip("-n", ns, "addr", "add", f"{self.address(pod)}/{prefix}", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def destroy(self) -> None:
        """Remove what create() made; what is already gone is not an error."""
        for pod in self.pods:
            ip("link", "del", self.veth(pod), check=False)
            ip("netns", "del", self.netns(pod), check=False)
        ip("link", "del", self.bridge, check=False)

    # faults

    def partition(self, pod: str, cut: bool) -> None:
        """Cut the pod off the network (its link down) or join it again."""
        ip("link", "set", self.veth(pod), "down" if cut else "up")

    def slow(self, pod: str, delay_ms: int, loss_percent: float) -> None:
        """Latency and loss on the pod's link, both ways (netem on each end)."""
        netem = ["netem", "delay", f"{delay_ms}ms", "loss", f"{loss_percent}%"]
        try:
            _tc("qdisc", "replace", "dev", self.veth(pod), "root", *netem)
            _tc("qdisc", "replace", "dev", "eth0", "root", *netem, netns=self.netns(pod))
        except NetworkError as exc:
            if "kind is unknown" in str(exc):
                raise NetworkError(
                    "latency and loss need the kernel's netem queueing discipline "
                    "(sch_netem), which this machine's kernel does not have"
                ) from None
            raise

    def heal(self, pod: str) -> None:
        """Undo partition() and slow()."""
        ip("link", "set", self.veth(pod), "up", check=False)
        _tc("qdisc", "del", "dev", self.veth(pod), "root", check=False)
        _tc("qdisc", "del", "dev", "eth0", "root", netns=self.netns(pod), check=False)


def _tc(*args: str, netns: str | None = None, check: bool = True) -> None:
    command = ["tc", *args] if netns is None else ["ip", "netns", "exec", netns, "tc", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
