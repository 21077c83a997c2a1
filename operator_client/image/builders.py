"""The image builders kctl-train drives: `docker build` where a Docker engine answers,
else podman, else buildah (daemonless, chroot isolation). Each builds a staged context,
pushes a tag, and opens a built image's root filesystem for local runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import ImageRoot
from ..errors import BadInput, BuildError, NoBuilder
from ..runstore.location import home
from .registry import ImageRef, auth_files

if TYPE_CHECKING:
    from .pipeline import BuiltImage

BUILDER_ENV = "KCTL_TRAIN_BUILDER"
NAMES = ("docker", "podman", "buildah")
OnLine = Callable[[str], None]


class Builder(ABC):
    """One builder's command line."""

    name: str

    def __init__(self, why: str) -> None:
        self.why = why  # why this one was chosen, for the user

    @abstractmethod
    def build_command(self, context: Path, tag: str, volumes: Sequence[str]) -> list[str]:
        """Build `context` (its Dockerfile) as `tag`; `volumes`: host paths to mount
        read-only during RUN steps (pip's configuration), where the builder can."""

    @abstractmethod
    def push_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        """Push the local tag `ref` to its registry."""

    @contextmanager
    def push_env(self, auth_file: Path | None) -> Iterator[dict[str, str]]:
        """Extra environment for the push command (none: the command takes the file)."""
        yield {}

    def pull_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        """Fetch `ref` into this builder's storage (a local run of a build made elsewhere)."""
        return [self.name, "pull", str(ref)]

    def image_id(self, reference: str) -> str | None:
        """The local image's ID, or None when this builder's storage has none."""
        done = subprocess.run(
            [self.name, "image", "inspect", "--format", "{{.Id}}", reference],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() or None if done.returncode == 0 else None

    @abstractmethod
    def root(self, reference: str) -> ImageRoot:
        """The local image's root filesystem on this machine, and its config."""

    def run(self, command: list[str], on_line: OnLine, env: Mapping[str, str] | None = None) -> str:
        """Run a builder command, each output line to `on_line`; its output, or
        BuildError carrying it."""
        lines: list[str] = []
        with subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env={**os.environ, **(env or {})},
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                on_line(lines[-1])
        output = "\n".join(lines)
        if proc.returncode != 0:
            raise BuildError(output or f"{command[0]} exited with {proc.returncode}")
        return output


def _image_root(path: str, config: Mapping[str, object]) -> ImageRoot:
    items = config.get("Env") or []
    assert isinstance(items, list)
    env = dict(str(item).partition("=")[::2] for item in items)
    return ImageRoot(path, env, str(config.get("WorkingDir") or "/"))


class Docker(Builder):
    name = "docker"

    def build_command(self, context: Path, tag: str, volumes: Sequence[str]) -> list[str]:
        # No build-time mounts in `docker build`: pip uses the network (or the base's config).
        return ["docker", "build", "--progress=plain", "-t", tag, str(context)]

    def push_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        return ["docker", "push", str(ref)]

    @contextmanager
    def push_env(self, auth_file: Path | None) -> Iterator[dict[str, str]]:
        # Docker reads credentials from $DOCKER_CONFIG/config.json only: another file is
        # copied into a private directory for the push, and removed after it.
        if auth_file is None or auth_file.name == "config.json":
            yield {"DOCKER_CONFIG": str(auth_file.parent)} if auth_file else {}
            return
        with tempfile.TemporaryDirectory(prefix="kctl-train-docker-") as config:
            shutil.copy(auth_file, Path(config) / "config.json")
            yield {"DOCKER_CONFIG": config}

    def root(self, reference: str) -> ImageRoot:
        """Exported once per image ID under $KCTL_TRAIN_HOME/images/ (Docker keeps its
        layers in the engine, not in a directory we may read)."""
        image_id = self.image_id(reference)
        if image_id is None:
            raise BuildError(f"docker has no image {reference}")
        target = home() / "images" / image_id.replace(":", "-")
        if not target.is_dir():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            container = _out(["docker", "create", reference, "true"])
            try:
                export = subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE)
                subprocess.run(["tar", "-x", "-C", str(partial)], stdin=export.stdout, check=True)
                export.wait()
            finally:
                subprocess.run(["docker", "rm", container], capture_output=True)
            partial.rename(target)
        inspect = json.loads(_out(["docker", "image", "inspect", reference]))[0]
        return _image_root(str(target), inspect.get("Config") or {})


class Podman(Builder):
    name = "podman"

    def build_command(self, context: Path, tag: str, volumes: Sequence[str]) -> list[str]:
        mounts = [f"--volume={v}:{v}:ro" for v in volumes]
        return ["podman", "build", "--layers", *mounts, "-t", tag, str(context)]

    def push_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        return _containers_push("podman", ref, auth_file)

    def pull_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        return _containers_pull("podman", ref, auth_file)

    def root(self, reference: str) -> ImageRoot:
        path = _out(["podman", "image", "mount", reference])
        inspect = json.loads(_out(["podman", "image", "inspect", reference]))[0]
        return _image_root(path, inspect.get("Config") or {})


class Buildah(Builder):
    name = "buildah"

    def build_command(self, context: Path, tag: str, volumes: Sequence[str]) -> list[str]:
        mounts = [f"--volume={v}:{v}:ro" for v in volumes]
        return [
            "buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers",
            "--force-rm",  # a failed step's working container goes too
            *mounts, "-t", tag, str(context),
        ]  # fmt: skip

    def push_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        return _containers_push("buildah", ref, auth_file)

    def pull_command(self, ref: ImageRef, auth_file: Path | None) -> list[str]:
        return _containers_pull("buildah", ref, auth_file)

    def image_id(self, reference: str) -> str | None:
        done = subprocess.run(
            ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() or None if done.returncode == 0 else None

    def root(self, reference: str) -> ImageRoot:
        """A working container per image, named for its ID and kept: a second run of
        the same image mounts it again at no cost."""
        image_id = self.image_id(reference)
        if image_id is None:
            raise BuildError(f"buildah has no image {reference}")
        name = f"kctl-train-root-{image_id[:16]}"
        exists = subprocess.run(["buildah", "inspect", name], capture_output=True).returncode == 0
        if not exists:
            _out(["buildah", "from", "--quiet", "--pull-never", "--name", name, reference])
        path = _out(["buildah", "mount", name])
        inspect = json.loads(_out(["buildah", "inspect", "--type", "image", reference]))
        return _image_root(path, inspect["OCIv1"].get("config") or {})


def _containers_flags(ref: ImageRef, auth_file: Path | None) -> list[str]:
    flags = ["--authfile", str(auth_file)] if auth_file is not None else []
    if ref.loopback:  # Docker's rule: a registry on this machine may be plain HTTP
        flags.append("--tls-verify=false")
    return flags


def _containers_push(tool: str, ref: ImageRef, auth_file: Path | None) -> list[str]:
    return [tool, "push", *_containers_flags(ref, auth_file), str(ref), f"docker://{ref}"]


def _containers_pull(tool: str, ref: ImageRef, auth_file: Path | None) -> list[str]:
    return [tool, "pull", "--quiet", *_containers_flags(ref, auth_file), f"docker://{ref}"]


def _out(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command[:3])}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


BUILDERS: dict[str, type[Builder]] = {"docker": Docker, "podman": Podman, "buildah": Buildah}


def docker_engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def choose(
    wanted: str | None = None,
    env: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    engine: Callable[[], bool] = docker_engine_answers,
) -> Builder:
    """The builder to use: `wanted` (or $KCTL_TRAIN_BUILDER) when given, else the first
    that can build here, with why; NoBuilder naming what each lacks."""
    wanted = wanted or env.get(BUILDER_ENV) or None
    if wanted is not None and wanted not in BUILDERS:
        raise BadInput(f"builder {wanted!r}: use one of {', '.join(NAMES)}")
    missing: list[str] = []
    for name in (wanted,) if wanted else NAMES:
        if which(name) is None:
            missing.append(f"{name} is not installed")
            continue
        if name == "docker" and not engine():
            missing.append("docker is installed but no Docker engine answers (docker info)")
            continue
        why = "asked for" if wanted else _WHY[name]
        return BUILDERS[name](why)
    raise NoBuilder(
        "no image builder here: "
        + "; ".join(missing)
        + ". Install one: Docker (and start its engine), podman or buildah "
        "(apt-get install podman | buildah; dnf install podman | buildah)"
    )


_WHY = {
    "docker": "a Docker engine answers",
    "podman": "no Docker engine; podman is installed",
    "buildah": "no Docker engine or podman; buildah is installed (chroot isolation)",
}


def root_of(image: BuiltImage) -> ImageRoot:
    """The root filesystem of a build, from the builder that made it; pulled first when
    its storage lacks the tag (the registry had it: built elsewhere)."""
    builder = BUILDERS[image.builder](image.builder_why)
    if builder.image_id(image.tag) is None:
        files = auth_files(image.registry_auth)
        pull = builder.pull_command(ImageRef.parse(image.tag), files[0] if files else None)
        builder.run(pull, lambda _: None)
    return builder.root(image.tag)
