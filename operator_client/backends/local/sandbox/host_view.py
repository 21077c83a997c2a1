"""This machine standing in for the image: what a pod sandbox sees of it, and the
environment a pod starts with (docs/LOCAL_PODS.md, "The boundary").

Without an image, a pod's root is an empty tmpfs holding only what running the trainer
needs, read-only at the same paths as here: the system's programs and libraries (/usr and
its merged-/usr links), a few files of /etc (users, name service, dynamic linker, TLS
certificates, time zone), the Python that runs kctl-train and its environment, the
package, and the working directory (the image's WORKDIR). Nothing else of /root, /home or
$KCTL_TRAIN_HOME is there. In the working directory, files that hold secrets by their name
(secret_files.py) are shown empty, and so is kctl-train's state and the job's store when
they lie inside it (the pod's own run directory is mounted on top of that).

A pod's environment is what its manifest and the kubelet give, plus what the local
backend must add (image_env): never the caller's shell.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ....secret_files import PRIVATE_NAMES, SECRET_NAMES
from .podspec import Bind

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl",
    "ca-certificates", "ca-certificates.conf", "pki", "localtime", "timezone", "host.conf",
    "gai.conf", "protocols", "services", "os-release", "debian_version", "alternatives",
    "mime.types",
    # fontconfig's: without it matplotlib's font scan (torchmetrics imports pyplot in every
    # Lightning process) opens each pod's log with "Fontconfig error".
    "fonts",
)  # fmt: skip
# Not walked for secrets in the working directory: environments and caches, large and
# made by tools (a secret kept in one is not found by name).
NOT_WALKED = frozenset(
    {".venv", "venv", ".tox", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".hypothesis", "site-packages"}
)  # fmt: skip
MAX_WALKED = 50_000

# The image's environment where this machine is the image: the Python's directory first
# on PATH, and what says which devices, locale and libraries this machine's Python uses.
PASSED_THROUGH = (
    "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
)  # fmt: skip
# The pod's service-account identity (IRSA, workload identity) of a job whose S3 store
# names no credentialsSecret: locally, the caller's own AWS identity stands in for it.
AMBIENT_AWS = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
    "AWS_DEFAULT_REGION",
)  # fmt: skip
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class HostView:
    binds: tuple[Bind, ...]
    links: dict[str, str]  # symlinks of the root (merged /usr: /bin -> usr/bin)
    hidden: tuple[str, ...]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def secrets_in(workdir: Path) -> list[str]:
    """Paths below `workdir` that hold secrets by their name (anywhere), and what a tool
    keeps about its user (at the top: a working directory that is a home directory)."""
    secrets = pathspec.GitIgnoreSpec.from_lines(SECRET_NAMES)
    private = pathspec.GitIgnoreSpec.from_lines("/" + name for name in PRIVATE_NAMES)
    found: list[str] = []
    stack, walked = [""], 0
    while stack and walked < MAX_WALKED:
        base = stack.pop()
        try:
            entries = sorted(os.scandir(workdir / base if base else workdir), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            walked += 1
            rel = f"{base}/{entry.name}" if base else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            probe = rel + "/" if is_dir else rel
            if secrets.match_file(probe) or private.match_file(probe):
                found.append(str(workdir / rel))
            elif is_dir and entry.name not in NOT_WALKED:
                stack.append(rel)
    return found


def host_view(workdir: Path, package: Path, private: list[Path]) -> HostView:
    """What a pod sees of this machine. `private`: kctl-train's state and the job's store,
    shown empty where they lie inside something shown."""
    links: dict[str, str] = {}
    binds: list[Bind] = []
    for path in [*SYSTEM, *(f"/etc/{name}" for name in ETC)]:
        if os.path.islink(path):
            links[path] = os.readlink(path)
        elif os.path.exists(path):
            binds.append(Bind(path))
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for path in sorted(python | {str(package), str(workdir)}):
        if path != "/" and not any(_within(Path(path), Path(s)) for s in SYSTEM):
            binds.append(Bind(path))
    hidden = secrets_in(workdir) if str(workdir) != "/" else []
    shown = [Path(b.path) for b in binds]
    hidden += [str(p) for p in private if any(_within(p, s) for s in shown)]
    return HostView(tuple(binds), links, tuple(sorted(set(hidden))))


def image_env(
    caller: Mapping[str, str], image: Mapping[str, str] | None, *, ambient_identity: bool
) -> dict[str, str]:
    """What a pod's environment starts with before its manifest's env: the image's ENV
    (this machine's Python standing in: its PATH, locale, devices and libraries), a HOME
    as container runtimes set one, and with `ambient_identity` the caller's AWS identity."""
    if image is not None:
        env = dict(image)
    else:
        bindir = str(Path(sys.executable).parent)
        env = {"PATH": f"{bindir}:{SYSTEM_PATH}"}
        env |= {k: caller[k] for k in PASSED_THROUGH if k in caller}
    env.setdefault("HOME", "/")
    if ambient_identity:
        env |= {k: caller[k] for k in AMBIENT_AWS if k in caller}
    return env
