"""The user's project directory as an image build takes it: which files go in (its
.dockerignore, else its .gitignore, else a short default list; never secrets), how big
it is, and one hash of exactly those bytes (docs/BUILD.md)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from ..errors import BadInput, BuildError
from ..secret_files import SECRET_NAMES

# Never in an image, whatever an ignore file says: an image is pulled by every node and
# often public inside a company (secret_files.py).
SECRETS = SECRET_NAMES
# Also never: bytecode changes whenever the code runs (it would change the hash) and pip
# compiles the installed code anyway.
BYTECODE = ("__pycache__/", "*.py[cod]")
# Without .dockerignore or .gitignore: what no project means to ship.
DEFAULT_IGNORES = (
    ".venv/",
    "venv/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    "*.egg-info/",
    ".ipynb_checkpoints/",
    "results/",
)
PACKAGE_FILES = ("pyproject.toml", "setup.py")
DEFAULT_MAX_BYTES = 512 * 2**20
CHUNK = 2**20


@dataclass(frozen=True)
class Entry:
    """One file of the workspace: its path (POSIX, relative), size, whether it is
    executable, and the SHA-256 of its bytes (of its target, for a symlink)."""

    path: str
    size: int
    executable: bool
    sha256: str
    link: str | None = None


@dataclass
class Workspace:
    """The files a build ships, and what was left out and why."""

    root: Path
    rules: str  # which ignore file decided: .dockerignore, .gitignore or defaults
    entries: list[Entry]
    secrets: list[str] = field(default_factory=list)  # left out as secrets
    ignored: int = 0  # left out by the ignore rules (files and directories)

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def kind(self) -> str:
        """ "package" (pip installs it) or "modules" (copied onto PYTHONPATH)."""
        names = {e.path for e in self.entries}
        return "package" if any(p in names for p in PACKAGE_FILES) else "modules"

    def digest(self) -> str:
        """SHA-256 over every path, mode and content: equal for equal workspaces."""
        h = hashlib.sha256()
        for e in self.entries:
            h.update(f"{e.path}\0{int(e.executable)}\0{e.link or ''}\0{e.sha256}\n".encode())
        return h.hexdigest()

    def summary(self) -> str:
        left = [f"{len(self.secrets)} secret file(s)"] if self.secrets else []
        if self.ignored:
            left.append(f"{self.ignored} path(s) by {self.rules}")
        out = f", left out {' and '.join(left)}" if left else ""
        return f"{len(self.entries)} files, {human(self.size)} ({self.kind}){out}"


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def dockerignore_patterns(lines: Iterable[str]) -> list[str]:
    """.dockerignore lines as gitignore patterns. Docker anchors every pattern at the
    context root (`foo` is ./foo only) where git matches at any depth, so each is
    anchored with a leading slash; `!` exceptions and `**` mean the same in both."""
    out = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        if pattern in (".", ""):
            continue
        out.append(("!" if negate else "") + "/" + pattern)
    return out


def ignore_rules(root: Path) -> tuple[str, pathspec.GitIgnoreSpec]:
    """The ignore file that decides for `root`, and its patterns."""
    for name, convert in ((".dockerignore", dockerignore_patterns), (".gitignore", list)):
        path = root / name
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            return name, pathspec.GitIgnoreSpec.from_lines(convert(lines))
    return "defaults", pathspec.GitIgnoreSpec.from_lines(DEFAULT_IGNORES)


def scan(root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Workspace:
    """The workspace at `root`, hashed. BadInput when it is not a directory or is over
    `max_bytes` (naming its biggest entries)."""
    if not root.is_dir():
        raise BadInput(f"{root}: not a directory; give the project directory to build")
    rules, ignore = ignore_rules(root)
    never = pathspec.GitIgnoreSpec.from_lines(SECRETS + BYTECODE)
    secrets = pathspec.GitIgnoreSpec.from_lines(SECRETS)
    # An exception pattern can re-include a file below an ignored directory: walk into
    # ignored directories only when there is one.
    prune = not any(p.include is False for p in ignore.patterns)
    workspace = Workspace(root, rules, [])
    files: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        base = stack.pop()
        for name in _names(root / base):
            rel = f"{base}/{name}" if base else name
            st = os.lstat(root / rel)
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                continue  # sockets, fifos, devices: nothing a build can copy
            probe = rel + "/" if is_dir else rel
            if never.match_file(probe):
                if secrets.match_file(probe):
                    workspace.secrets.append(probe)
            elif is_dir and not (prune and ignore.match_file(probe)):
                stack.append(rel)
            elif is_dir or ignore.match_file(rel):
                workspace.ignored += 1
            else:
                files.append((rel, st))
    total = sum(st.st_size for _, st in files)
    if total > max_bytes:
        raise BadInput(_too_big(root, files, total, max_bytes, rules))
    workspace.entries = [_entry(root, rel, st) for rel, st in sorted(files)]
    workspace.secrets.sort()
    return workspace


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except PermissionError as exc:
        raise BadInput(f"{directory}: cannot read it ({exc.strerror})") from None


def _too_big(
    root: Path, files: list[tuple[str, os.stat_result]], total: int, limit: int, rules: str
) -> str:
    by_top: dict[str, int] = {}
    for rel, st in files:
        top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
        by_top[top] = by_top.get(top, 0) + st.st_size
    biggest = sorted(by_top.items(), key=lambda item: (-item[1], item[0]))[:5]
    listed = ", ".join(f"{name} ({human(size)})" for name, size in biggest)
    ignore_file = ".dockerignore" if rules == "defaults" else rules
    return (
        f"{root}: the workspace is {human(total)}, over the {human(limit)} limit of an image "
        f"build; biggest entries: {listed}. Leave data and outputs out in {ignore_file} "
        "(store data in S3 and read it there), or raise the limit (--max-size)"
    )


def _entry(root: Path, rel: str, st: os.stat_result) -> Entry:
    path = root / rel
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        return Entry(rel, 0, False, hashlib.sha256(target.encode()).hexdigest(), target)
    return Entry(rel, st.st_size, bool(st.st_mode & 0o111), _sha256(path))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def stage(workspace: Workspace, into: Path) -> None:
    """Copy the workspace's files into `into`, checking each against its hash: the
    build gets exactly the bytes the tag names. BuildError when a file changed since
    the scan (a save during the build)."""
    for e in workspace.entries:
        target = into / e.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if e.link is not None:
            os.symlink(e.link, target)
            continue
        h = hashlib.sha256()
        with (workspace.root / e.path).open("rb") as src, target.open("wb") as dst:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                dst.write(chunk)
        if h.hexdigest() != e.sha256:
            raise BuildError(f"{workspace.root / e.path} changed during the build; run it again")
        target.chmod(0o755 if e.executable else 0o644)
    for directory in sorted({p for p in into.rglob("*") if p.is_dir()}):
        directory.chmod(0o755)
