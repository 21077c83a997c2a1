"""The local backend's pods against the real controllers' (tests/fidelity/golden, recorded
from the cluster of `make cluster` by record.py). With a cluster, the goldens are recorded
again first and any change fails with its diff; without one, the committed goldens are used.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import ROOT
from .corpus import GOLDEN, INPUTS, names, not_run_locally
from .local import local
from .project import project, refusal


def _text(found: dict[str, Any]) -> list[str]:
    return yaml.safe_dump(found, sort_keys=True, width=100).splitlines(keepends=True)


# The events by which a controller reports an object it could not create, other than a pod
# Pod Security refused (record.py records these).
POD_SECURITY = "violates PodSecurity"
# A field path as the API server and the webhooks name it (`spec.a[Master].b[0].c`).
FIELD_PATH = re.compile(r"(?<![\w])\.?((?:spec|metadata)(?:\.[A-Za-z]+|\[[^\]\s]*\])+)")


def reasons(message: str) -> set[str]:
    """What a refusal is about: the field paths it names, list positions aside (the
    controllers place a patched-in list entry where the local merge may not); where it
    names none, its last clause, word for word."""
    paths = {re.sub(r"\[\d+\]", "[]", m) for m in FIELD_PATH.findall(message)}
    return paths or {message.rsplit(": ", 1)[-1].strip()}


def same_reason(cluster: str, local: str) -> bool:
    """The local refusal is for the cluster's reason: each of the cluster's appears in it."""
    return all(r in local or r in reasons(local) for r in reasons(cluster))


def failures(golden: dict[str, Any]) -> list[str]:
    """The cluster's refusals: admission's, or the controllers' creation failures other
    than Pod Security's (those are compared pod by pod)."""
    if "refused" in golden:
        return [golden["refused"]]
    return [e for e in golden.get("events") or [] if POD_SECURITY not in e]


def compare(golden: dict[str, Any], found: dict[str, Any]) -> str:
    """The differences between a golden and the local result ('' for none), as a diff or
    the refusals side by side. Where the cluster refused the job or failed to create one of
    its objects, the local backend must refuse it for the same reason (it would never run
    as written there); pods the API server refused under Pod Security (their Warning
    events) match the local Pod Security refusals when each of those is among the events."""
    refused = failures(golden)
    if refused or "refused" in found:
        local = found.get("refused", "")
        if refused and local and all(same_reason(r, local) for r in refused):
            return ""
        return f"real controllers: {refused or golden}\nlocal backend: {local or found}\n"
    if golden["pods"] == [] and golden.get("events"):
        # The operator may stop at the first pod it cannot create: each refusal it reports
        # is one of the local ones.
        pod_refusals = [refusal(r) for r in found.get("refused_pods") or []]
        if found["pods"] == [] and all(any(r in e for r in pod_refusals) for e in golden["events"]):
            return ""
    return "".join(
        difflib.unified_diff(_text(golden), _text(found), "real controllers", "local backend")
    )


@pytest.mark.parametrize("name", names())
def test_the_local_pods_are_the_real_controllers(name: str) -> None:
    golden = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    found = local(name)
    refused_for = not_run_locally(name)
    if refused_for is not None:
        assert refused_for in found.get("refused", ""), found
        return
    differences = compare(golden, found)
    assert not differences, differences


def test_a_planted_difference_is_found() -> None:
    """The comparison can fail: one env value changed in a recorded pod is reported."""
    name = "ex-quickstart-tj"
    golden = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    found = local(name)
    assert compare(golden, found) == ""
    env = found["pods"][0]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "PET_MASTER_PORT")["value"] = "29501"
    assert "PET_MASTER_PORT" in compare(golden, found)


def test_a_local_server_dry_run_prints_these_pods(tmp_path: Path) -> None:
    """`apply --local --dry-run=server -o yaml`: the user's view of what will run."""
    name = "ex-quickstart-tj"
    done = subprocess.run(
        [str(ROOT / ".venv/bin/kctl-train"), "apply", str(INPUTS / f"{name}.yaml"), "--local",
         "--dry-run=server", "-o", "yaml"],
        capture_output=True, text=True, env={**os.environ, "KCTL_TRAIN_HOME": str(tmp_path)},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)
    assert printed["kind"] == "List"
    assert [project(p) for p in printed["items"]] == local(name)["pods"]


def test_a_planted_refusal_reason_is_found() -> None:
    """A local refusal for another reason than the cluster's is a difference; so is a run
    where the cluster failed to create an object."""
    name = "tj-numnodes-negative"
    golden = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    found = local(name)
    assert compare(golden, found) == ""
    other = {"refused": found["refused"].replace("spec.completions", "spec.backoffLimit")}
    assert "spec.completions" in compare(golden, other)
    assert compare(golden, {"pods": []}) != ""


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1",
         {"spec.pytorchReplicaSpecs[Master].replicas"}),
        ('Job.batch "j" is invalid: [spec.parallelism: Invalid value: -1: x, '
         "spec.template.spec.containers[0].image: Required value]",
         {"spec.parallelism", "spec.template.spec.containers[].image"}),
        ("quantities must match the regular expression '^x$'",
         {"quantities must match the regular expression '^x$'"}),
    ],
)  # fmt: skip
def test_a_refusal_is_about_its_field_paths(message: str, expected: set[str]) -> None:
    assert reasons(message) == expected
