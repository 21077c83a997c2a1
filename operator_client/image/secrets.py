"""Secrets found by content in what a build ships: a maintained scanner (Yelp's
detect-secrets) over every text file of the workspace below a size, before anything is
built. Names alone (secret_files.py) miss a key pasted into `config.py` or a file called
`service.json`; an image is pulled by every node and often readable company-wide.

Only the scanner's high-confidence detectors run (cloud and service keys and tokens,
private keys, credentials in URLs): its keyword and entropy detectors flag every hash and
every `secret:` field of a manifest, which would teach users to allow everything. Each
file's answer is cached by its SHA-256, so an unchanged workspace is not scanned again.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..runstore.location import home
from .workspace import Workspace

# Larger files are data, not configuration (and scanning them would take long).
MAX_SCANNED = 1 << 20
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


def scan(workspace: Workspace) -> list[Found]:
    """Secrets in the text files the workspace ships, by content."""
    from detect_secrets.__version__ import VERSION
    from detect_secrets.core.secrets_collection import SecretsCollection
    from detect_secrets.settings import transient_settings

    plugins = _plugins()
    version = f"{VERSION}:{','.join(p['name'] for p in plugins)}"
    cache = _load_cache(version)
    found: list[Found] = []
    todo = []
    for entry in workspace.entries:
        if entry.link is not None or entry.size > MAX_SCANNED:
            continue
        if entry.sha256 in cache:
            found += [Found(entry.path, int(line), str(kind)) for line, kind in cache[entry.sha256]]
        elif _is_text(workspace.root / entry.path):
            todo.append(entry)
    if todo:
        with transient_settings({"plugins_used": plugins, "filters_used": []}):
            for entry in todo:
                collection = SecretsCollection(root=str(workspace.root))
                collection.scan_file(entry.path)
                hits = sorted({(s.line_number, s.type) for _, s in collection})
                cache[entry.sha256] = [list(hit) for hit in hits]
                found += [Found(entry.path, line, kind) for line, kind in hits]
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
