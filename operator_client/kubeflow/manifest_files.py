"""Kubernetes manifests given as files (`--runtime`, `--secret`, `--configmap`): the YAML
documents of a regular file, each of a kind the caller expects. Read bounded, and never
from a FIFO or a device (which would block or never end)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_FILE = 4 << 20  # far above any runtime, Secret or ConfigMap file


class ManifestFileError(ValueError):
    """A manifest file that cannot be used; the message names the file and what is wrong."""


def documents(path: Path, kinds: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """Each document of the file with where it is ("FILE: document N"); ManifestFileError
    for a file that is missing or not regular, too large, not YAML, or holding a document
    of another kind or without a name."""
    if not path.is_file():  # missing, a directory, a FIFO, a device
        raise ManifestFileError(
            f"{path}: {'not a regular file' if path.exists() else 'no such file'}"
        )
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE + 1)
    except OSError as exc:
        raise ManifestFileError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise ManifestFileError(f"{path}: larger than {MAX_FILE >> 20} MiB")
    try:
        docs = [d for d in yaml.safe_load_all(data.decode("utf-8")) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ManifestFileError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    found = []
    for i, doc in enumerate(docs, 1):
        at = f"{path}: document {i}"
        if not isinstance(doc, dict) or doc.get("kind") not in kinds:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise ManifestFileError(f"{at}: kind {kind!r} is not a {' or '.join(kinds)}")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ManifestFileError(f"{at}: metadata is not a mapping")
        if not isinstance(metadata.get("name"), str):
            raise ManifestFileError(f"{at}: metadata.name is missing")
        found.append((at, doc))
    return found
