"""Secrets found by content in what a build ships: a maintained scanner (Yelp's
detect-secrets) over every text file of the workspace below a size, before anything is
built. Names alone (secret_files.py) miss a key pasted into `config.py` or a file called
`service.json`; an image is pulled by every node and often readable company-wide.

Files over MAX_SCANNED, and the members of gzip, zip and tar archives, are read as a
stream of lines (each at most MAX_LINE characters) through the same detectors; an archive
that cannot be opened is named, not shipped unseen. Beside the scanner, credentials it has
no detector for are found by their structure (CREDENTIAL_SHAPES): a kubeconfig's client
key and token, a registry's auth, whatever a file is called.

Only the scanner's high-confidence detectors run (cloud and service keys and tokens,
private keys, credentials in URLs): its keyword and entropy detectors flag every hash and
every `secret:` field of a manifest, which would teach users to allow everything. Each
file's answer is cached by its SHA-256, so an unchanged workspace is not scanned again.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..runstore.location import home
from .workspace import Workspace

# Larger files, and archives, are scanned as a stream of lines rather than whole.
MAX_SCANNED = 1 << 20
MAX_LINE = 1 << 16
# Credentials by their structure, which the scanner has no detector for.
CREDENTIAL_SHAPES = (
    (re.compile(r"^\s*client-key-data:\s*\S{16,}"), "Kubernetes client key (kubeconfig)"),
    (
        re.compile(r"^\s*(?:-\s+)?token:\s*[\"']?(?![$<{])[A-Za-z0-9._~+/=-]{20,}"),
        "Kubernetes token (kubeconfig)",
    ),
    (
        re.compile(r"\"(?:auth|identitytoken)\"\s*:\s*\"[A-Za-z0-9+/=._-]{8,}\""),
        "registry credentials (Docker config)",
    ),
    (
        re.compile(r"^\s*(?:password|passwd)\s*[=:]\s*[\"']?(?![$<{])[^\s\"']{6,}", re.IGNORECASE),
        "password in a configuration file",
    ),
)
# Detectors of the scanner left out: they match shapes (entropy, `password =`), not secrets.
NOISY = frozenset(
    {"KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
)


@dataclass(frozen=True)
class Found:
    path: str  # relative to the workspace
    line: int
    kind: str  # the scanner's name for it ("AWS Access Key")

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}"


def _plugins() -> list[dict[str, str]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    names = {plugin.__name__ for plugin in classes}
    return [{"name": name} for name in sorted(names - NOISY)]


def _is_text(path: Path) -> bool:
    with path.open("rb") as fh:
        return b"\0" not in fh.read(8192)


def _cache_file() -> Path:
    return home() / "build" / "secret-scan.json"


def _load_cache(version: str) -> dict[str, list[list[Any]]]:
    try:
        raw = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("version") != version:
        return {}
    files = raw.get("files")
    return files if isinstance(files, dict) else {}


def _save_cache(version: str, files: dict[str, list[list[Any]]]) -> None:
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret-scan.")
        with os.fdopen(fd, "w") as fh:
            json.dump({"version": version, "files": files}, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache only: the next build scans again


def _text_lines(stream: Any) -> Iterator[str]:
    """The lines of a byte stream, each cut at MAX_LINE characters; nothing for binary
    data (a NUL in its first 8 KiB)."""
    buffered = io.BufferedReader(stream) if not hasattr(stream, "peek") else stream
    if b"\0" in buffered.peek(8192)[:8192]:
        return
    text = io.TextIOWrapper(buffered, encoding="utf-8", errors="replace")
    while line := text.readline(MAX_LINE):
        yield line


def _streams(path: Path) -> Iterator[tuple[str, Iterator[str]]]:
    """(member name, its lines) of a file: an archive's members (gzip, zip, tar, and tar
    compressed) or the file itself. OSError or ValueError for an archive that is corrupt."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    with archive.open(info) as member:
                        yield f"!{info.filename}", _text_lines(member)
        return
    if tarfile.is_tarfile(path):
        with tarfile.open(path) as archive:
            for entry in archive:
                handle = archive.extractfile(entry) if entry.isfile() else None
                if handle is not None:
                    with handle:
                        yield f"!{entry.name}", _text_lines(handle)
        return
    with path.open("rb") as raw:
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            with gzip.open(raw) as inner:
                yield "!", _text_lines(inner)
            return
        raw.seek(0)
        yield "", _text_lines(raw)


def _shapes(line: str) -> list[str]:
    return [kind for pattern, kind in CREDENTIAL_SHAPES if pattern.search(line)]


def _stream_scan(path: Path, shown: str, whole: bool) -> set[tuple[str, int, str]]:
    """(path shown, line, kind) of every hit in `path` read as streams; `whole`: the
    scanner already read the file itself, so only its structure is looked at here."""
    from detect_secrets.settings import get_plugins

    plugins = [] if whole else get_plugins()
    hits: set[tuple[str, int, str]] = set()
    try:
        for member, lines in _streams(path):
            name = shown + member
            for number, line in enumerate(lines, 1):
                hits |= {(name, number, kind) for kind in _shapes(line)}
                for plugin in plugins:
                    found = plugin.analyze_line(filename=name, line=line, line_number=number)
                    hits |= {(name, number, str(s.type)) for s in found}
    except (OSError, ValueError, EOFError, tarfile.TarError, zipfile.BadZipFile) as exc:
        hits.add((shown, 0, f"an archive the scanner cannot open ({exc})"))
    return hits


def scan(workspace: Workspace) -> list[Found]:
    """Secrets in every file the workspace ships, by content (archives' members too)."""
    from detect_secrets.__version__ import VERSION
    from detect_secrets.core.secrets_collection import SecretsCollection
    from detect_secrets.settings import transient_settings

    plugins = _plugins()
    # The cache's shape and what it found changes with the shapes and the stream scan.
    version = f"{VERSION}:2:{','.join(p['name'] for p in plugins)}"
    cache = _load_cache(version)
    found: list[Found] = []
    todo = []
    for entry in workspace.entries:
        if entry.link is not None:
            continue
        if entry.sha256 in cache:
            found += [Found(str(p), int(line), str(kind)) for p, line, kind in cache[entry.sha256]]
        else:
            todo.append(entry)
    if todo:
        with transient_settings({"plugins_used": plugins, "filters_used": []}):
            for entry in todo:
                path = workspace.root / entry.path
                hits: set[tuple[str, int, str]] = set()
                whole = entry.size <= MAX_SCANNED and _is_text(path)
                if whole:
                    collection = SecretsCollection(root=str(workspace.root))
                    collection.scan_file(entry.path)
                    hits = {(entry.path, s.line_number, s.type) for _, s in collection}
                hits |= _stream_scan(path, entry.path, whole)
                cache[entry.sha256] = [list(hit) for hit in sorted(hits)]
                found += [Found(p, line, kind) for p, line, kind in sorted(hits)]
        _save_cache(version, cache)
    return sorted(found, key=lambda f: (f.path, f.line))


def refuse(found: list[Found], allowed: tuple[str, ...]) -> None:
    """BadInput listing every secret outside the files `allowed` (--allow-secret)."""
    allow = {Path(p).as_posix().strip("/") for p in allowed}
    left = [f for f in found if f.path not in allow]
    if not left:
        return
    shown = "\n  ".join(str(f) for f in left[:20])
    more = f"\n  … and {len(left) - 20} more" if len(left) > 20 else ""
    raise BadInput(
        f"refusing to build: the workspace holds what looks like secrets (found by content):"
        f"\n  {shown}{more}\nremove them (read credentials from a Secret at run time), leave "
        "the file out in .dockerignore, or pass --allow-secret PATH for a file that must ship"
    )
