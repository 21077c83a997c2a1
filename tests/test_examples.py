"""Every example renders, passes the real CRD schema and the operator's webhook rules,
and matches its golden file (regenerate with UPDATE_GOLDEN=1 after an intended change)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from operator_client.kubeflow.webhook import webhook_errors
from operator_client.render import render, to_yaml
from operator_client.spec import load_job

from .conftest import EXAMPLES, ROOT
from .crd import crd_errors

GOLDEN = ROOT / "tests" / "golden"
# The list: quickstart CPU, 4x8 GPU GKE, elastic EKS with EFA, AKS, Kueue.
REQUIRED_GOLDEN = {"quickstart", "gke-h100-4x8", "eks-elastic-efa", "aks-a100", "kueue-queued"}


def test_required_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= REQUIRED_GOLDEN


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_renders_to_a_valid_pytorchjob(example: Path) -> None:
    manifest = render(load_job(example).job)
    assert crd_errors(manifest) == []
    assert webhook_errors(manifest) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_golden_file(example: Path) -> None:
    text = to_yaml(render(load_job(example).job))
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run UPDATE_GOLDEN=1 make test"
    expected = golden.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), str(golden), "rendered"
            )
        )
        pytest.fail(f"render differs from the golden file (UPDATE_GOLDEN=1 if intended):\n{diff}")


# Each a deliberately broken manifest and the rule that must catch it.
def _broken() -> list[tuple[str, dict, str]]:  # type: ignore[type-arg]
    base = render(load_job(ROOT / "examples" / "quickstart.yaml").job)
    import copy

    cases = []
    m = copy.deepcopy(base)
    m["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    cases.append(("master-replicas", m, "[Master].replicas: Forbidden: must be 1"))
    m = copy.deepcopy(base)
    m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = "x"
    cases.append(("container-name", m, "must have at least one container with name pytorch"))
    m = copy.deepcopy(base)
    m["spec"]["pytorchReplicaSpecs"]["Chief"] = m["spec"]["pytorchReplicaSpecs"].pop("Worker")
    cases.append(("replica-type", m, 'Unsupported value: "Chief": supported values'))
    m = copy.deepcopy(base)
    del m["spec"]["pytorchReplicaSpecs"]["Worker"]
    m["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d"}
    cases.append(("elastic-without-worker", m, "must be configured if elastic policy is used"))
    m = copy.deepcopy(base)
    m["spec"]["elasticPolicy"] = {"nProcPerNode": 1}
    cases.append(
        ("deprecated-nproc", m, "nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")
    )
    m = copy.deepcopy(base)
    m["metadata"]["name"] = "Bad_Name"
    cases.append(("name", m, "DNS-1035"))
    m = copy.deepcopy(base)
    m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = ""
    cases.append(("image", m, "image: Required value: must be required"))
    m = copy.deepcopy(base)
    m["spec"]["runPolicy"]["managedBy"] = "someone-else"
    cases.append(("managed-by", m, "managedBy must be one of"))
    return cases


@pytest.mark.parametrize(
    ("case", "manifest", "message"), _broken(), ids=lambda c: c if isinstance(c, str) else ""
)
def test_webhook_rules_catch_broken_manifests(
    case: str,
    manifest: dict,  # type: ignore[type-arg]
    message: str,
) -> None:
    errors = webhook_errors(manifest)
    assert any(message in e for e in errors), errors


def test_crd_check_is_strict_about_unknown_fields() -> None:
    manifest = render(load_job(ROOT / "examples" / "quickstart.yaml").job)
    manifest["spec"]["runPolicy"]["cleanupPolicy"] = "All"  # a typo the API server would prune
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0]["resource"] = {}
    errors = crd_errors(manifest)
    assert any("cleanupPolicy" in e for e in errors), errors
    assert any("'resource' was unexpected" in e for e in errors), errors
