"""Terminal output: colour only on a terminal (and never with NO_COLOR), plain text otherwise.

rich is imported only when stderr is a terminal, so piped and CI runs start faster.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from ..spec.issues import SpecIssue

_STYLE = {"error": "bold red", "warning": "yellow"}


def colour() -> bool:
    """Whether stderr gets colour and live displays (a terminal, NO_COLOR unset)."""
    return sys.stderr.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def report(issues: Iterable[SpecIssue]) -> None:
    """Print spec errors and warnings to stderr, one line each."""
    issues = list(issues)
    if not issues:
        return
    if not colour():
        for issue in issues:
            print(issue, file=sys.stderr)
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    for issue in issues:
        where = f"{issue.source}:{issue.line}:{issue.column}" if issue.line else issue.source
        field = f"[bold]{escape(issue.path)}[/]: " if issue.path else ""
        console.print(
            f"{escape(where)}: [{_STYLE[issue.severity]}]{issue.severity}[/]: "
            f"{field}{escape(issue.message)}"
        )


def error(message: str) -> None:
    """Print one error line (not tied to a spec position) to stderr."""
    report([SpecIssue("kctl-train", 0, 0, "", message)])


def warning(message: str) -> None:
    """Print one warning line (not tied to a spec position) to stderr."""
    report([SpecIssue("kctl-train", 0, 0, "", message, "warning")])


def info(text: str) -> None:
    """A progress or status line on stderr (stdout stays for what scripts capture)."""
    print(text, file=sys.stderr, flush=True)
