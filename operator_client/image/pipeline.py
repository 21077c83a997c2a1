"""`kctl-train build`: the user's workspace as a layer on a trainer image, tagged by the
hash of everything that goes in, pushed once, and pinned by the digest the registry
reports (docs/BUILD.md).

1. scan the workspace (ignore rules, secrets left out, size limit) and hash it;
2. choose a builder and identify the base image (its ID or digest is part of the hash);
3. ask the registry (or, without one, the builder's storage) for the tag: there already,
   nothing is built or pushed;
4. stage exactly the hashed bytes with the generated Dockerfile and build;
5. push, then read back the digest the registry now has for the tag.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadBaseImage, BuildError, RegistryError
from . import secrets
from . import workspace as ws
from .builders import Builder, choose
from .pip_config import pip_paths
from .recipe import CONTEXT_DIR, MISSING_RUNTIME, RECIPE_VERSION, dockerfile
from .registry import ImageRef, Registry, auth_files, credentials, refusal

# Without a registry (a local run only): localhost/kctl-train/<directory name>:<hash>.
LOCAL_PREFIX = "localhost/kctl-train"
TAG_LENGTH = 20
Say = Callable[[str], None]


@dataclass(frozen=True)
class BuildRequest:
    """What to build: `directory` on `base`, for `repository` (None: this machine only,
    nothing pushed). `builder`: docker, podman or buildah (None: the first that can)."""

    directory: Path
    base: str
    repository: str | None = None
    builder: str | None = None
    registry_auth: str | None = None
    max_bytes: int = ws.DEFAULT_MAX_BYTES
    allow_secrets: tuple[str, ...] = ()  # files shipped although their content looks secret


@dataclass
class BuiltImage:
    """A build's result. `reference` is what a job runs: `repo@sha256:…` once pushed,
    else the local content-addressed tag."""

    reference: str
    tag: str
    digest: str | None
    built: bool
    pushed: bool
    builder: str
    builder_why: str
    workspace: ws.Workspace
    seconds: dict[str, float] = field(default_factory=dict)
    registry_auth: str | None = None  # the credentials file it was pushed with

    def to_json(self) -> dict[str, object]:
        """The build as JSON (`kctl-train build -o json`): what runs, what happened, and
        what went in."""
        w = self.workspace
        return {
            "image": self.reference,
            "tag": self.tag,
            "digest": self.digest,
            "built": self.built,
            "pushed": self.pushed,
            "builder": {"name": self.builder, "why": self.builder_why},
            "workspace": {
                "root": str(w.root),
                "kind": w.kind,
                "files": len(w.entries),
                "bytes": w.size,
                "rules": w.rules,
                "ignored": w.ignored,
                "secretsLeftOut": w.secrets,
            },
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def build_image(
    request: BuildRequest, say: Say = lambda _: None, line: Say = lambda _: None
) -> BuiltImage:
    """Build (when needed) and push (when a repository is given); `say` gets each step
    in a sentence, `line` every line the builder prints."""
    times: dict[str, float] = {}
    start = time.monotonic()
    workspace = ws.scan(request.directory.resolve(), max_bytes=request.max_bytes)
    say(f"workspace {workspace.root}: {workspace.summary()}")
    if workspace.secrets:
        more = " …" if len(workspace.secrets) > 10 else ""
        say("left out as secrets: " + ", ".join(workspace.secrets[:10]) + more)
    found = secrets.scan(workspace)
    secrets.refuse(found, request.allow_secrets)
    if found:
        say("shipped although they look like secrets (--allow-secret): "
            + ", ".join(sorted({f.path for f in found})))  # fmt: skip
    times["scan"] = time.monotonic() - start
    builder = choose(request.builder)
    say(f"builder: {builder.name} ({builder.why})")
    files = auth_files(request.registry_auth)
    digest = workspace.digest()
    recipe = dockerfile(request.base, workspace.kind, digest)
    tag = content_tag(recipe, _base_identity(builder, request.base, files), digest)
    target = ImageRef.parse(request.repository or local_repository(workspace.root)).with_tag(tag)

    def result(digest: str | None, built: bool, pushed: bool) -> BuiltImage:
        reference = target.pinned(digest) if digest else str(target)
        return BuiltImage(
            reference, str(target), digest, built, pushed, builder.name, builder.why,
            workspace, times, request.registry_auth,
        )  # fmt: skip

    auth_file = files[0] if files else None
    registry = None
    if request.repository:
        registry = Registry(target, credentials(target.registry, files))
        pushed = registry.digest(tag)
        if pushed is not None:
            say(f"{target} is in the registry already: nothing to build or push")
            return result(pushed, False, False)
    elif builder.image_id(str(target)) is not None:
        say(f"{target} is built already: nothing to build")
        return result(None, False, False)

    start = time.monotonic()
    _build(builder, workspace, recipe, request.base, str(target), say, line)
    times["build"] = time.monotonic() - start
    if registry is None:
        return result(None, True, False)
    start = time.monotonic()
    say(f"pushing {target}")
    try:
        with builder.push_env(auth_file) as env:
            builder.run(builder.push_command(target, auth_file), line, env)
    except BuildError as exc:
        raise push_error(target, str(exc)) from None
    pushed = registry.digest(tag)
    if pushed is None:
        raise RegistryError(f"pushed {target}, but the registry does not list the tag")
    times["push"] = time.monotonic() - start
    say(f"pushed {target} ({pushed})")
    return result(pushed, True, True)


def local_repository(directory: Path) -> str:
    """The repository of a build kept on this machine, named for its directory."""
    name = re.sub(r"[^a-z0-9]+", "-", directory.name.lower()).strip("-") or "workspace"
    return f"{LOCAL_PREFIX}/{name}"


def content_tag(recipe: str, base: str, workspace_digest: str) -> str:
    """The tag of a build: the hash of the recipe, the base image's identity and the
    workspace's bytes, so equal inputs give the same tag and any change a new one."""
    h = hashlib.sha256(f"{RECIPE_VERSION}\0{recipe}\0{base}\0{workspace_digest}".encode())
    return h.hexdigest()[:TAG_LENGTH]


def _base_identity(builder: Builder, base: str, files: list[Path]) -> str:
    """What the base image is, for the hash: its local image ID, else the digest its
    registry reports for it, else (unreachable) its reference."""
    local = builder.image_id(base)
    if local:
        return local
    ref = ImageRef.parse(base)
    if ref.digest:
        return ref.digest
    try:
        digest = Registry(ref, credentials(ref.registry, files)).digest(ref.tag or "latest")
    except RegistryError:
        digest = None
    return digest or base


def _build(
    builder: Builder,
    workspace: ws.Workspace,
    recipe: str,
    base: str,
    tag: str,
    say: Say,
    line: Say,
) -> None:
    context = Path(tempfile.mkdtemp(prefix="kctl-train-build-", dir=_scratch()))
    try:
        ws.stage(workspace, context / CONTEXT_DIR)
        (context / "Dockerfile").write_text(recipe)
        say(f"building {tag}")
        volumes = pip_paths() if builder.name != "docker" else []
        try:
            builder.run(builder.build_command(context, tag, volumes), line)
        except BuildError as exc:
            if MISSING_RUNTIME in str(exc):
                raise BadBaseImage(
                    f"{base} has no kctl-train-runtime on its PATH: build on the trainer image "
                    "(`make image`, images/README.md) or on an image with `pip install "
                    "'kctl-train[runtime]'` in it"
                ) from None
            raise BuildError(f"the build of {tag} failed:\n{_tail(str(exc))}") from None
    finally:
        shutil.rmtree(context, ignore_errors=True)


def _scratch() -> str:
    """Where contexts are staged: /var/tmp (on disk; /tmp may be a small tmpfs)."""
    return "/var/tmp" if Path("/var/tmp").is_dir() else tempfile.gettempdir()


def _tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.splitlines()[-lines:])


_STATUS_WORDS = (
    (401, re.compile(r"\b401\b|unauthori[sz]ed|authentication required", re.I)),
    (403, re.compile(r"\b403\b|denied|forbidden", re.I)),
    (404, re.compile(r"\b404\b|name unknown|repository does not exist|not found", re.I)),
)


def push_error(target: ImageRef, output: str) -> RegistryError:
    """A failed push as one line: the registry's refusal when the output shows one."""
    for status, pattern in _STATUS_WORDS:
        if pattern.search(output):
            return RegistryError(refusal(target.name, target.registry, status), status)
    last = output.strip().splitlines()[-1] if output.strip() else "no output"
    return RegistryError(f"push of {target} failed: {last}")
