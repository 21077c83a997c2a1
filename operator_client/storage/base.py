"""The object-store interface shared by the runtime and collect."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import KctlTrainError
from ..untrusted import MAX_DOCUMENT

# Called with the number of bytes just transferred.
Progress = Callable[[int], None]


class StoreError(KctlTrainError):
    """An object-store operation failed; the message names the store and key."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(ABC):
    """Keys are '/'-separated and relative to the store's root (a run root, usually)."""

    url: str

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write an object whole (readers see the old or the new object, never a part)."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Upload a local file as one object."""

    @abstractmethod
    def create_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object only if no object has this key; False when one already did."""

    @abstractmethod
    def get_bytes(self, key: str, limit: int = MAX_DOCUMENT) -> bytes:
        """The content of an object; StoreError if it does not exist or is larger than
        `limit` bytes (whoever wrote the store may have written anything)."""

    @abstractmethod
    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        """Download an object to a local path (written beside it, then renamed);
        `progress` is called with each chunk's byte count."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with prefix, sorted by key."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; keys that do not exist are ignored."""

    def local_path(self, key: str) -> Path | None:
        """Where the object `key` would be on this machine's file system, for a writer
        that can write it there itself (a file:// store); None for a remote store."""
        return None

    def probe(self) -> None:
        """Check the store can be reached now (quickly); StoreError saying why not."""
        self.list("_probe/")

    def exists(self, key: str) -> bool:
        """Whether an object with exactly this key exists."""
        return any(o.key == key for o in self.list(key))


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a local file, read in chunks (hashlib releases the GIL on large chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_matches(path: Path, size: int, sha256: str) -> bool:
    """Whether a downloaded file is exactly what a manifest recorded (size first: cheap)."""
    return path.stat().st_size == size and sha256_file(path) == sha256
