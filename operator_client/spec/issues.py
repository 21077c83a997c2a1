"""One problem in a job file (no model or YAML machinery: the CLI prints these cheaply)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a job file, with the position and field path it refers to."""

    source: str
    line: int
    column: int
    path: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}:{self.column}" if self.line else self.source
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {self.severity}: {field}{self.message}"
