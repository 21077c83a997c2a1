"""A directory as an object store: every write is a temp file renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .base import ObjectInfo, ObjectStore, Progress, StoreError
from .keys import contained_path


class FileStore(ObjectStore):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.url = f"file://{self.root.resolve()}/"

    def _path(self, key: str) -> Path:
        return contained_path(self.root, key)

    def _write(self, key: str, fill: object) -> Path:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                if isinstance(fill, bytes):
                    fh.write(fill)
                else:
                    assert isinstance(fill, Path)
                    with fill.open("rb") as src:
                        shutil.copyfileobj(src, fh, 1 << 20)
        except BaseException:
            os.unlink(tmp)
            raise
        return Path(tmp)

    def put_bytes(self, key: str, data: bytes) -> None:
        os.replace(self._write(key, data), self._path(key))

    def put_file(self, key: str, path: Path) -> None:
        os.replace(self._write(key, Path(path)), self._path(key))

    def create_if_absent(self, key: str, data: bytes) -> bool:
        tmp = self._write(key, data)
        try:
            os.link(tmp, self._path(key))  # atomic: fails if the key exists
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
        root = self.root.resolve()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            # Directories are not objects: drop the ones this delete emptied.
            for parent in path.parents:
                if parent == root or not parent.is_relative_to(root):
                    break
                try:
                    parent.rmdir()
                except OSError:
                    break
