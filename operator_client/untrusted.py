"""Reading files that someone else may have written: a pod's store, its termination log,
its output. Whoever wrote them could have put a symlink, a FIFO or a device where a file
was expected, or a file far larger than any real one. So the host opens regular files
only, never through a link (each directory below the trusted root too), never blocks
(O_NONBLOCK: a FIFO or a device is refused, not waited on), and reads at most a bound.
Anything else is an UntrustedFileError naming the path and what was found there.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard

# A document (a manifest, a status, run.json) larger than this is not one kctl-train wrote.
MAX_DOCUMENT = 16 << 20
# A CSV kctl-train or Lightning writes (metrics, GPU samples, saves): far below these.
MAX_CSV = 256 << 20
MAX_CSV_LINE = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UntrustedFileError(OSError):
    """A path that is not a plain regular file within bounds; the message says what it is."""

    def __str__(self) -> str:
        return str(self.strerror)


def is_finite_number(value: Any) -> TypeGuard[int | float]:
    """Whether a value read from JSON a pod wrote is a finite number (not a bool, not a
    string, not NaN or an infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _refuse(path: Path | str, what: str) -> UntrustedFileError:
    return UntrustedFileError(errno.EINVAL, f"{path}: {what}; refusing to read it")


def open_regular(path: Path, root: Path | None = None) -> int:
    """A read-only descriptor of the regular file at `path`. With `root` (a directory the
    caller trusts), every component below it is opened without following links, so a
    link anywhere on the way is refused; without it, only the last component is checked.
    FileNotFoundError passes through (callers treat a missing file as missing)."""
    if root is None:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parts: tuple[str, ...] = (path.name,)
    else:
        parent_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parts = PurePosixPath(path.relative_to(root)).parts
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(path, f"{part} on the way is a link or not a directory") from None
                raise
            os.close(parent_fd)
            parent_fd = next_fd
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse(path, "a symbolic link") from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):
                raise _refuse(path, "not a regular file") from None
            raise
    finally:
        os.close(parent_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refuse(path, _kind(mode))
    return fd


def read_bytes(path: Path, limit: int = MAX_DOCUMENT, root: Path | None = None) -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    fd = open_regular(path, root)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise _refuse(path, f"larger than {limit} bytes")
    return data


def read_json(path: Path, limit: int = MAX_DOCUMENT, root: Path | None = None) -> Any:
    """A JSON document from a regular file (ValueError when it is not valid JSON)."""
    return json.loads(read_bytes(path, limit, root))


class _Bounded:
    """The lines of a text stream, refusing a line over MAX_CSV_LINE characters or more
    than `limit` characters in all, so a newline-free or endless file is never held whole."""

    def __init__(self, stream: io.TextIOBase, where: Path | str, limit: int) -> None:
        self.stream, self.where, self.left = stream, where, limit

    def __iter__(self) -> Iterator[str]:
        while line := self.stream.readline(MAX_CSV_LINE + 1):
            if len(line) > MAX_CSV_LINE:
                raise _refuse(self.where, f"a line longer than {MAX_CSV_LINE} characters")
            self.left -= len(line)
            if self.left < 0:
                raise _refuse(self.where, "larger than a CSV kctl-train reads")
            yield line


def csv_rows(
    path: Path, limit: int = MAX_CSV, root: Path | None = None
) -> Iterator[dict[str, str]]:
    """The rows of a CSV file with a header, read as a stream within bounds (each line,
    each field, the whole); UntrustedFileError naming the path for anything else."""
    with opened(path, root) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="")
        reader = csv.DictReader(_Bounded(text, path, limit))
        try:
            for row in reader:
                # A row longer than the header puts its extra cells under None: dropped.
                yield {
                    str(k): v if isinstance(v, str) else "" for k, v in row.items() if k is not None
                }
        except csv.Error as exc:
            why = f"not a CSV kctl-train reads (line {reader.line_num}: {exc})"
            raise _refuse(path, why) from None


def read_tail(path: Path, limit: int) -> bytes:
    """At most the last `limit` bytes of a regular file ("" when it does not exist)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - limit))
        return fh.read(limit)


@contextlib.contextmanager
def opened(path: Path, root: Path | None = None) -> Iterator[Any]:
    """open_regular as a binary file object, closed on exit."""
    with os.fdopen(open_regular(path, root), "rb") as fh:
        yield fh


def regular_files(root: Path) -> Iterator[tuple[str, int]]:
    """(relative POSIX path, size) of every regular file below `root`, without entering
    links; links, FIFOs, sockets and devices are passed over."""
    stack = [""]
    while stack:
        base = stack.pop()
        try:
            entries = list(os.scandir(root / base if base else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            rel = f"{base}/{entry.name}" if base else entry.name
            if entry.is_dir(follow_symlinks=False):
                stack.append(rel)
            elif entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    yield rel, entry.stat(follow_symlinks=False).st_size
