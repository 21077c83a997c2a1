"""A directory as an object store: every write is a temp file renamed into place.

Durable like S3's PUT: the data is fsynced before the rename and the directory after
it, so a power cut never leaves a committed name (a MANIFEST, LATEST) on unwritten data.

Whoever else can write the directory (a pod, its run directory) may have left links,
FIFOs or devices in it: objects are regular files only, read without following a link
anywhere below the root (untrusted.py).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..untrusted import MAX_DOCUMENT, UntrustedFileError, open_regular, read_bytes, regular_files
from .base import ObjectInfo, ObjectStore, Progress, StoreError
from .keys import contained_path, remove_empty_parents, safe_relative_path

# In-flight writes: ours, and the `.<name>.<8 random>` names of earlier versions.
TEMP_PREFIX = ".kctl-tmp-"
_TEMP = re.compile(r"^(\.kctl-tmp-.*|\..+\.[a-z0-9_]{8})$")


class FileStore(ObjectStore):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.url = f"file://{self.root.resolve()}/"

    def _path(self, key: str) -> Path:
        return contained_path(self.root, key)

    def _write(self, key: str, fill: object) -> Path:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f"{TEMP_PREFIX}{target.name}.")
        except OSError as exc:
            raise StoreError(f"{self.url}{key}: {exc.strerror or exc}") from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                if isinstance(fill, bytes):
                    fh.write(fill)
                else:
                    assert isinstance(fill, Path)
                    with fill.open("rb") as src:
                        shutil.copyfileobj(src, fh, 1 << 20)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException as exc:
            os.unlink(tmp)
            if isinstance(exc, OSError):  # a full disk, say: name what was being written
                raise StoreError(f"{self.url}{key}: {exc.strerror or exc}") from exc
            raise
        return Path(tmp)

    def _commit(self, tmp: Path, key: str) -> None:
        target = self._path(key)
        os.replace(tmp, target)
        _sync_dir(target.parent)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._commit(self._write(key, data), key)

    def put_file(self, key: str, path: Path) -> None:
        self._commit(self._write(key, Path(path)), key)

    def create_if_absent(self, key: str, data: bytes) -> bool:
        tmp = self._write(key, data)
        try:
            os.link(tmp, self._path(key))  # atomic: fails if the key exists
            _sync_dir(tmp.parent)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def local_path(self, key: str) -> Path | None:
        return self._path(key)

    def _source(self, key: str) -> Path:
        """Where an object is, without resolving anything (reads open it link-free)."""
        try:
            return self.root / safe_relative_path(key)
        except ValueError as exc:
            raise StoreError(f"{self.url}{key}: {exc}") from None

    def _refused(self, key: str, exc: OSError) -> StoreError:
        if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
            return StoreError(f"{self.url}{key}: no such object")
        reason = str(exc) if isinstance(exc, UntrustedFileError) else exc.strerror or str(exc)
        return StoreError(f"{self.url}{key}: {reason}")

    def get_bytes(self, key: str, limit: int = MAX_DOCUMENT) -> bytes:
        try:
            return read_bytes(self._source(key), limit, root=self.root)
        except OSError as exc:
            raise self._refused(key, exc) from None

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        try:
            src_fd = open_regular(self._source(key), root=self.root)
        except OSError as exc:
            raise self._refused(key, exc) from None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(src_fd, "rb") as src, os.fdopen(fd, "wb") as dst:
                # What the file held when opened: a writer still appending cannot keep
                # this going (the size is checked against the manifest afterwards).
                remaining = os.fstat(src.fileno()).st_size
                while remaining > 0 and (block := src.read(min(1 << 20, remaining))):
                    remaining -= len(block)
                    dst.write(block)
                    if progress is not None:
                        progress(len(block))
        except BaseException:
            os.unlink(tmp)
            raise
        os.replace(tmp, path)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        if not self.root.is_dir():
            return []
        found = [
            ObjectInfo(key, size)
            for key, size in regular_files(self.root)
            if key.startswith(prefix) and not _TEMP.match(key.rsplit("/", 1)[-1])
        ]
        return sorted(found, key=lambda o: o.key)

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            remove_empty_parents(path, self.root)


def _sync_dir(path: Path) -> None:
    """Make a rename in `path` durable (POSIX: fsync the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
