"""The local backend's pods against the real controllers' (tests/fidelity/golden, recorded
from the cluster of `make cluster` by record.py). With a cluster, the goldens are recorded
again first and any change fails with its diff; without one, the committed goldens are used.
"""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import ROOT
from .corpus import GOLDEN, INPUTS, names
from .local import local
from .project import project, refusal


def _text(found: dict[str, Any]) -> list[str]:
    return yaml.safe_dump(found, sort_keys=True, width=100).splitlines(keepends=True)


# What the local backend refuses to run rather than run differently (docs/LOCAL_PODS.md):
# input, and a word of its reason.
NOT_RUN_LOCALLY = {
    "rt-deepspeed-distributed": "MPI",  # mpirun over SSH between the pods
    "rt-mlx-distributed": "MPI",
    "rt-jax-distributed": "jax policy",  # JAX_* from the jax plugin
    "rt-xgboost-distributed": "xgboost policy",  # DMLC_* from the xgboost plugin
    "rt-torchtune-llama3-2-1b": "volumeClaimPolicies",  # JobSet's PVCs
    "tj-suspended": "suspend: true",  # no pods until resumed; nothing resumes it locally
}


def compare(golden: dict[str, Any], found: dict[str, Any]) -> str:
    """The differences between a golden and the local result, as a diff ('' for none).
    A refusal matches a refusal; pods the API server refused (their Warning events) match
    the local Pod Security refusals when each of those is among the events."""
    if "refused" in golden or "refused" in found:
        same = "refused" in golden and "refused" in found
        return "" if same else "".join(difflib.unified_diff(_text(golden), _text(found)))
    if golden["pods"] == [] and golden.get("events"):
        # The operator may stop at the first pod it cannot create: each refusal it reports
        # is one of the local ones.
        refusals = [refusal(r) for r in found.get("refused_pods") or []]
        if found["pods"] == [] and all(any(r in e for r in refusals) for e in golden["events"]):
            return ""
    return "".join(
        difflib.unified_diff(_text(golden), _text(found), "real controllers", "local backend")
    )


@pytest.mark.parametrize("name", names())
def test_the_local_pods_are_the_real_controllers(name: str) -> None:
    golden = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    found = local(name)
    if name in NOT_RUN_LOCALLY:
        assert NOT_RUN_LOCALLY[name] in found.get("refused", ""), found
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
