"""Every example's pods pass Pod Security "restricted"; only the RDMA network profiles
add IPC_LOCK (which fails even "baseline"), and they say so in their docs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from operator_client.render import render
from operator_client.spec import load_job

from .conftest import EXAMPLES
from .pss import violations


def pods(path: Path) -> tuple[str, list[dict[str, Any]]]:
    job = load_job(path).job
    manifest = render(job)
    specs = manifest["spec"]["pytorchReplicaSpecs"].values()
    return job.spec.network.profile, [r["template"]["spec"] for r in specs]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_pass_pod_security_restricted(path: Path) -> None:
    profile, specs = pods(path)
    for spec in specs:
        found = violations(spec)
        if profile == "none":
            assert found == []
        else:
            assert found == ["pytorch: adds capabilities ['IPC_LOCK'] (baseline)"]


def _base() -> dict[str, Any]:
    return pods(next(p for p in EXAMPLES if p.stem == "quickstart"))[1][0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p.update(hostIPC=True), "hostIPC is set"),
        (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "volume h"),
        (
            lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
            "allowPrivilegeEscalation is not false",
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
            "do not drop ALL",
        ),
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile"),
        (
            lambda p: (
                p["securityContext"].update(runAsNonRoot=False),
                p["containers"][0]["securityContext"].pop("runAsNonRoot"),
            ),
            "runAsNonRoot is not true",
        ),
    ],
)
def test_the_checker_catches_each_rule(change: Any, expected: str) -> None:
    spec = copy.deepcopy(_base())
    change(spec)
    assert any(expected in v for v in violations(spec)), violations(spec)
