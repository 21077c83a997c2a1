"""Reading replica logs as they grow: whole lines only, each tagged with its replica."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path


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
                with path.open("rb") as fh:
                    fh.seek(self._offsets.get(tag, 0))
                    data = fh.read()
            except FileNotFoundError:
                continue
            self._offsets[tag] = self._offsets.get(tag, 0) + len(data)
            data = self._partial.pop(tag, b"") + data
            *lines, rest = data.split(b"\n")
            if rest and final:
                lines.append(rest)
            elif rest:
                self._partial[tag] = rest
            out.extend((tag, line.decode(errors="replace").rstrip("\r")) for line in lines)
        return out


def tail(path: Path, lines: int) -> list[str]:
    """The last lines of a file (the whole file is not held in memory)."""
    try:
        with path.open(errors="replace") as fh:
            return [line.rstrip("\n") for line in deque(fh, maxlen=lines)]
    except FileNotFoundError:
        return []
