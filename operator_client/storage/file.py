"""A directory as an object store: every write is a temp file renamed into place.

Durable like S3's PUT: the data is fsynced before the rename and the directory after
it, so a power cut never leaves a committed name (a MANIFEST, LATEST) on unwritten data.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .base import ObjectInfo, ObjectStore, Progress, StoreError
from .keys import contained_path, remove_empty_parents


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
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
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

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise StoreError(f"{self.url}{key}: no such object") from None

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        source = self._path(key)
        if not source.is_file():
            raise StoreError(f"{self.url}{key}: no such object")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with source.open("rb") as src, os.fdopen(fd, "wb") as dst:
                while block := src.read(1 << 20):
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
        found = []
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                if name.startswith("."):
                    continue  # in-flight temp files are not objects
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    found.append(ObjectInfo(key, full.stat().st_size))
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
