"""How jobs are printed, for every backend: `-o yaml|json`, the job table, one job's
replicas and conditions, ages, and the report of a job that did not succeed."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import console

if TYPE_CHECKING:  # the parser imports this module for every command: only names here
    from ..client import JobView
    from ..client.failure import FailureReport


def objects(body: Mapping[str, Any] | list[Mapping[str, Any]], fmt: str) -> None:
    """Objects on stdout as YAML or JSON (a list as a kubectl List)."""
    from ..render import to_json, to_yaml

    if isinstance(body, list):
        body = {"apiVersion": "v1", "kind": "List", "items": list(body)}
    sys.stdout.write(to_json(body) if fmt == "json" else to_yaml(body))


def age(since: float | None, until: float | None = None) -> str:
    """kubectl's AGE: 45s, 12m, 3h, 2d."""
    if not since:
        return "-"
    seconds = max(0, int((until or time.time()) - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def job_table(views: list[JobView]) -> None:
    print(f"{'NAMESPACE':<12}{'NAME':<28}{'KIND':<12}{'STATE':<12}{'NODES':<7}{'RESTARTS':<10}AGE")
    for v in views:
        print(
            f"{v.namespace:<12}{v.name:<28}{v.kind:<12}{v.state:<12}{v.nodes:<7}"
            f"{v.restarts:<10}{age(v.created)}"
        )


def job_detail(view: JobView) -> None:
    """One job: state, replicas (with why each is stuck), conditions."""
    how = f", {view.runs_as}" if view.runs_as else ""
    where = f" (local{how})" if view.backend == "local" else ""
    print(
        f"{view.kind.lower()}/{view.name}{where}  {view.state}  {age(view.started, view.completed)}"
    )
    for problem in view.problems:
        print(f"  {problem}")
    print(f"{'REPLICA':<14}{'PHASE':<12}{'RESTARTS':<10}{'EXIT':<6}NODE")
    for r in view.replicas:
        code = "-" if r.exit_code is None else str(r.exit_code)
        print(f"{r.tag:<14}{r.phase:<12}{r.restarts:<10}{code:<6}{r.node}")
        for problem in r.problems:
            print(f"  {problem}")
    for cond in view.conditions:
        flag = "" if cond.holds else " (no longer)"
        print(f"  {cond.time}  {cond.type}{flag}: {cond.message}")


def failure(report: FailureReport, again: str) -> None:
    """Why the job did not succeed, on stderr; `again` is the command that resumes it."""
    if report.stopped:
        console.info(f"{report.state}: {report.message}")
        console.info(f"committed checkpoints are kept; `{again}` resumes")
        return
    console.error(f"{report.state}: {report.message}")
    if report.replica is None:
        return
    code = report.replica.exit_code
    exit_text = f" (exit code {code})" if code not in (None, 0) else ""
    console.info(f"last lines of {report.replica.name}{exit_text}:")
    if report.log_problem:
        console.info(f"  (no log: {report.log_problem})")
    for text in report.lines:
        console.info(f"  {text}")
