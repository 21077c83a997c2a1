"""What one replica's pod sandbox is, computed from its pod in the job's plan
(controlplane/pod_plan.py): a pure function, serialised to JSON for the shim (shim.py)
that builds it.

Kubernetes gives the container: the pod's securityContext (runAsUser, runAsGroup) and the
container's (readOnlyRootFilesystem, capabilities dropped, allowPrivilegeEscalation
false), its volumes (emptyDir as a tmpfs with sizeLimit that lives as long as the pod,
across its container's restarts; hostPath, configMap and secret mounted where the
container says, read-only where it says), the memory and CPU limits, a hostname that is
the pod's name, and an address of its own. The sandbox maps each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ....controlplane.pod_plan import PodPlan
from ....kubeflow.pod_objects import PodObjects
from ....spec.k8s_names import label_problem
from ....spec.quantities import parse_quantity
from .seccomp import RUNTIME_DEFAULT, UNCONFINED

# A pod without runAsUser runs as the image's user; the trainer image's is 10001.
DEFAULT_UID = 10001


@dataclass(frozen=True)
class Bind:
    """A host path shown at the same path inside the sandbox."""

    path: str
    writable: bool = False


@dataclass(frozen=True)
class EmptyDir:
    """An emptyDir mounted in the container: volume `name`, a tmpfs of `size` bytes at
    most (None: the kernel default), shown at `target`."""

    name: str
    target: str
    size: int | None = None
    read_only: bool = False


@dataclass(frozen=True)
class Volume:
    """A volume mount: this machine's `source` shown at `target` in the container."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ObjectVolume:
    """A configMap or secret volume: files to write (path in the volume -> content) with
    their mode, mounted read-only at `target` as the kubelet does."""

    name: str
    target: str
    files: dict[str, str]
    mode: int = 0o644


# The volume kinds a local run mounts (others, a PVC say, are the cluster's).
VOLUME_KINDS = ("emptyDir", "configMap", "secret")


@dataclass(frozen=True)
class PodSandbox:
    pod: str  # the hostname, as the pod's name is on a cluster
    netns: str  # the network namespace to join (a path under /run/netns)
    # An image's root filesystem; None: an empty root holding only `binds` and `links`
    # (this machine's Python standing in for the image, host_view.py).
    rootfs: str | None
    stage: str  # an empty directory where the sandbox's root is assembled
    uid: int
    gid: int
    read_only_root: bool
    # The pod's emptyDirs: tmpfs held on this machine for the pod's life (empty_dirs.py).
    empty_dirs: tuple[Volume, ...]
    binds: tuple[Bind, ...]
    files: dict[str, str]  # path inside -> file shown there (/etc/hosts, /etc/resolv.conf)
    workdir: str
    memory_limit: int | None = None
    cpu_limit: float | None = None  # CPUs (a quota of the cgroup's period)
    cgroup_name: str = ""  # the pod's cgroup under kctl-train/ (memory and CPU limits)
    termination_log: str = ""
    env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    links: dict[str, str] = field(default_factory=dict)  # symlinks made in an empty root
    hidden: tuple[str, ...] = ()  # paths under binds shown empty (secrets by name)
    devices: tuple[str, ...] = ()  # device nodes beyond the basic ones (GPUs)
    seccomp: str = "RuntimeDefault"
    volumes: tuple[Volume, ...] = ()
    ephemeral_limit: int | None = None  # bytes the pod's writable root layer may hold
    exit_record: str = ""  # where the shim records the pod's exit (exit_record.py)
    # A store on this machine's loopback, relayed into the pod by its shim (relay.py), and
    # the file whose presence cuts the pod off it (a partition).
    store_port: int | None = None
    store_cut: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PodSandbox:
        raw = json.loads(text)
        raw["empty_dirs"] = tuple(Volume(**v) for v in raw["empty_dirs"])
        raw["binds"] = tuple(Bind(**b) for b in raw["binds"])
        raw["volumes"] = tuple(Volume(**v) for v in raw.get("volumes", ()))
        for name in ("command", "hidden", "devices"):
            raw[name] = tuple(raw[name])
        return cls(**raw)


def _bytes(quantity: str | None) -> int | None:
    return int(parse_quantity(quantity)) if quantity else None


def emptydirs(pod: PodPlan) -> tuple[EmptyDir, ...]:
    """The container's emptyDir mounts, each volume a tmpfs with its sizeLimit (a
    disk-backed emptyDir has no size of its own: it gets the container's memory limit,
    which a tmpfs counts against anyway). ValueError for a volume name the API server
    would refuse: the name is a directory's on this machine (empty_dirs.py)."""
    template = pod.spec
    container = pod.container
    limit = _bytes(container.get("resources", {}).get("limits", {}).get("memory"))
    volumes = {v["name"]: v for v in template.get("volumes", [])}
    mounts = []
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if "emptyDir" in volume:
            problem = label_problem(mount["name"], "volume name")
            if problem:
                raise ValueError(problem)
            size = _bytes(volume["emptyDir"].get("sizeLimit")) or limit
            read_only = bool(mount.get("readOnly"))
            mounts.append(EmptyDir(mount["name"], mount["mountPath"], size, read_only))
    return tuple(mounts)


def mounted_volumes(pod: PodPlan, objects: PodObjects) -> list[ObjectVolume]:
    """The container's configMap and secret mounts with the files each holds (keys, or
    `items` to paths). ValueError for a volume or key whose name the API server would
    refuse, an item path that leaves its volume, a volume kind a local run does not mount
    (a hostPath never reaches here: Pod Security admission refuses it), or an object not
    given."""
    template = pod.spec
    volumes = {}
    for volume in template.get("volumes") or []:
        problem = label_problem(volume.get("name"), "volume name")
        if problem:
            raise ValueError(problem)
        volumes[volume["name"]] = volume
    given: list[ObjectVolume] = []
    for mount in pod.container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise ValueError(f"volumeMount {mount['name']!r}: the pod has no such volume")
        kind = next((k for k in VOLUME_KINDS if k in volume), None)
        if kind is None:
            other = next((k for k in volume if k != "name"), "?")
            raise ValueError(
                f"volume {mount['name']!r} is a {other}: a local run mounts "
                f"{', '.join(VOLUME_KINDS)} volumes"
            )
        if kind == "emptyDir":
            continue
        source = volume[kind]
        name = source.get("name" if kind == "configMap" else "secretName", "")
        found = objects.of("ConfigMap" if kind == "configMap" else "Secret").get(name)
        if found is None:
            if not source.get("optional"):
                raise ValueError(
                    f"volume {mount['name']!r}: {kind} {name!r} is not here; give it "
                    f"with --{kind.lower()} FILE"
                )
            found = {}
        items = source.get("items")
        files = (
            {i["path"]: found[i["key"]] for i in items if i["key"] in found}
            if items
            else dict(found)
        )
        for path in files:
            parts = Path(path).parts
            if not parts or Path(path).is_absolute() or ".." in parts:
                raise ValueError(f"volume {mount['name']!r}: item path {path!r} leaves it")
        mode = int(source.get("defaultMode", 0o644))
        given.append(ObjectVolume(mount["name"], mount["mountPath"], files, mode))
    return given


def cpu_limit(pod: PodPlan) -> float | None:
    """The container's CPU limit in CPUs (None: none)."""
    limits = pod.container.get("resources", {}).get("limits", {})
    return float(parse_quantity(str(limits["cpu"]))) if limits.get("cpu") else None


def identity(pod: PodPlan) -> tuple[int, int, bool]:
    """uid, gid and whether the root filesystem is read-only, from the security contexts
    (the container's wins over the pod's, as in Kubernetes)."""
    pod_context = pod.spec.get("securityContext", {})
    container = pod.container.get("securityContext", {})
    uid = int(container.get("runAsUser", pod_context.get("runAsUser", DEFAULT_UID)))
    gid = int(container.get("runAsGroup", pod_context.get("runAsGroup", uid)))
    return uid, gid, bool(container.get("readOnlyRootFilesystem", False))


def seccomp_profile(pod: PodPlan) -> str:
    """The container's seccomp profile type (the container's wins over the pod's; none:
    Unconfined, Kubernetes' default). ValueError for a Localhost profile: it names a file on
    the cluster's nodes."""
    pod_context = pod.spec.get("securityContext", {})
    container = pod.container.get("securityContext", {})
    profile = container.get("seccompProfile") or pod_context.get("seccompProfile") or {}
    kind = str(profile.get("type", UNCONFINED))
    if kind not in (RUNTIME_DEFAULT, UNCONFINED):
        raise ValueError(
            f"seccompProfile {kind}: a local run applies RuntimeDefault or Unconfined only "
            "(a Localhost profile is a file on the cluster's nodes)"
        )
    return kind


def gpu_devices(pod: PodPlan, dev: Path = Path("/dev")) -> tuple[str, ...]:
    """The GPU device nodes a container that requests GPUs gets (what the device plugin
    mounts): NVIDIA's and the DRI render nodes of this machine."""
    resources = pod.container.get("resources", {})
    wanted = {**resources.get("requests", {}), **resources.get("limits", {})}
    if not any("gpu" in name.lower() and str(count) not in ("0", "") for name, count in
               wanted.items()):  # fmt: skip
        return ()
    found = [*dev.glob("nvidia*"), *dev.glob("nvidia-caps/*"), *dev.glob("dri/*")]
    return tuple(sorted(str(p) for p in found if p.is_char_device()))


EPHEMERAL_ENV = "KCTL_TRAIN_LOCAL_EPHEMERAL_STORAGE"
# What a local pod may write when its container names no ephemeral-storage limit: room
# for the checkpoints of a model of a few GiB, not the whole disk.
DEFAULT_EPHEMERAL = "20Gi"


def ephemeral_limit(pod: PodPlan, env: Mapping[str, str]) -> int:
    """The container's `resources.limits.ephemeral-storage` in bytes, else the local
    default ($KCTL_TRAIN_LOCAL_EPHEMERAL_STORAGE, else 20Gi). ValueError for a quantity
    that is not one."""
    limits = pod.container.get("resources", {}).get("limits", {})
    given = limits.get("ephemeral-storage")
    text = str(given) if given is not None else env.get(EPHEMERAL_ENV) or DEFAULT_EPHEMERAL
    try:
        return int(parse_quantity(text))
    except ValueError:
        where = "ephemeral-storage" if given is not None else EPHEMERAL_ENV
        raise ValueError(f"{where}={text!r} is not a quantity (e.g. 20Gi)") from None


def memory_limit(pod: PodPlan) -> int | None:
    limits = pod.container.get("resources", {}).get("limits", {})
    return _bytes(limits.get("memory"))


# No cluster DNS here: a lookup of any name not in /etc/hosts (a reverse lookup of a
# peer, say) fails at once at the pod's loopback, as a cluster's DNS answers NXDOMAIN,
# instead of waiting for this machine's resolver, which the pod cannot reach.
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def hosts_file(
    addresses: Mapping[str, str], dns_names: Mapping[str, tuple[str, ...]] | None = None
) -> str:
    """/etc/hosts of every sandbox: each pod's names to its address, as the cluster's DNS
    answers (`dns_names` by pod, else the pod's name: a PyTorchJob's per-replica Services;
    a TrainJob pod's hostname and `<hostname>.<job>` under the JobSet's headless Service)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [
        f"{address}\t{' '.join((dns_names or {}).get(pod, (pod,)))}"
        for pod, address in sorted(addresses.items())
    ]
    return "\n".join(lines) + "\n"
