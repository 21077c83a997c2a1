"""Reading replica logs as they grow: whole lines only, each tagged with its replica.

A replica writes what it likes to its log: a line without end, gigabytes at once. Lines
are cut at MAX_LINE bytes and each poll reads at most POLL_BYTES, so what the host holds
stays bounded whatever the pod printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...untrusted import open_regular, read_tail

MAX_LINE = 64 << 10
POLL_BYTES = 8 << 20


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (over-long ones cut into MAX_LINE pieces) and the unfinished rest."""
    *lines, rest = data.split(b"\n")
    out = [line[i : i + MAX_LINE] for line in lines for i in range(0, max(len(line), 1), MAX_LINE)]
    while len(rest) > MAX_LINE:
        out.append(rest[:MAX_LINE])
        rest = rest[MAX_LINE:]
    return out, rest


def _text(line: bytes) -> str:
    return line.decode(errors="replace").rstrip("\r")


@dataclass
class LogFollower:
    """Yields the complete lines appended to a set of files since the last poll."""

    files: dict[str, Path]  # tag -> file
    _offsets: dict[str, int] = field(default_factory=dict)
    _partial: dict[str, bytes] = field(default_factory=dict)

    def poll(self, final: bool = False) -> list[tuple[str, str]]:
        """New (tag, line) pairs; with final, a last line without newline too."""
        out: list[tuple[str, str]] = []
        for tag, path in self.files.items():
            try:
                with open(open_regular(path), "rb") as fh:
                    fh.seek(self._offsets.get(tag, 0))
                    data = fh.read(POLL_BYTES)
            except (FileNotFoundError, OSError):
                continue
            self._offsets[tag] = self._offsets.get(tag, 0) + len(data)
            lines, rest = _split(self._partial.pop(tag, b"") + data)
            if rest and final:
                lines.append(rest)
            elif rest:
                self._partial[tag] = rest
            out.extend((tag, _text(line)) for line in lines)
        return out


def tail(path: Path, lines: int) -> list[str]:
    """The last lines of a file, each at most MAX_LINE bytes (only the end is read)."""
    try:
        data = read_tail(path, lines * MAX_LINE)
    except OSError:
        return []
    complete, rest = _split(data)
    found = [*complete, rest] if rest else complete
    return [_text(line) for line in found[-lines:]] if lines > 0 else []
