"""An upstream oracle in every clone: every object kctl-train writes (each example as a
PyTorchJob and as a TrainJob, kctl-train's ClusterTrainingRuntime, the Helm chart's
output) goes through the official generated models and back (tests/official_models.py in
.venv-oracle: kubeflow-training 1.9.4, kubeflow-trainer-api 2.3.0, the Kubernetes client),
and any field lost or changed fails. Beside the CRD tests, which need ../shared, this
needs only what `make test` installs; missing, it fails under CI=true and skips elsewhere."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client.kubeflow.training_runtime import runtime
from operator_client.render import render
from operator_client.spec import SpecError, load_job_text

from .conftest import EXAMPLES, ROOT

ORACLE = ROOT / ".venv-oracle" / "bin" / "python"
SCRIPT = ROOT / "tests" / "official_models.py"


def round_trips(objects: list[dict[str, Any]]) -> list[list[str]]:
    """Each object's differences after the official models' round trip."""
    if not ORACLE.exists():
        reason = f"the official models are not installed ({ORACLE}): make test installs them"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    out = subprocess.run(
        [str(ORACLE), str(SCRIPT)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    found: list[list[str]] = json.loads(out.stdout)
    return found


def written() -> dict[str, dict[str, Any]]:
    """Every object kctl-train writes from its examples, and its runtime."""
    objects = {"runtime/kctl-train": runtime()}
    for path in EXAMPLES:
        text = path.read_text()
        for operator in ("pytorchjob", "trainjob"):
            try:
                objects[f"{path.stem}/{operator}"] = render(
                    load_job_text(text, str(path), operator).job
                )
            except SpecError:
                continue  # refused for this operator (tests/golden says why)
    return objects


def test_every_object_kctl_train_writes_survives_the_official_models() -> None:
    objects = written()
    assert {o["kind"] for o in objects.values()} == {
        "PyTorchJob",
        "TrainJob",
        "ClusterTrainingRuntime",
    }
    results = dict(zip(objects, round_trips(list(objects.values())), strict=True))
    assert {name: diffs for name, diffs in results.items() if diffs} == {}


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """The objects of a chart's output (its templates' YAML; NOTES.txt is text)."""
    docs = [yaml.safe_load(t) for path, t in rendered.items() if path.endswith(".yaml") and t]
    return [d for d in docs if d]


def test_the_helm_charts_output_survives_the_official_models() -> None:
    helm_python = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    chart = helm_python.Chart.load(str(ROOT / "charts" / "kctl-train"))
    try:
        values = yaml.safe_load((ROOT / "charts/kctl-train/ci/quickstart-values.yaml").read_text())
        values["trainingRuntime"] = {"install": True}
        out = chart.render(values=values, name="release", namespace="ml")
        objects = manifests(out)
        values["spec"]["operator"] = "trainjob"
        objects += manifests(chart.render(values=values, name="release", namespace="ml"))
    finally:
        chart.close()
    assert {o["kind"] for o in objects} >= {"PyTorchJob", "TrainJob", "ClusterTrainingRuntime"}
    assert round_trips(objects) == [[] for _ in objects]


def test_the_oracle_reports_a_field_the_models_do_not_know(tmp_path: Path) -> None:
    """The round trip can fail: an unknown field at any depth is reported lost."""
    objects = written()
    job = copy.deepcopy(objects["quickstart/pytorchjob"])
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["bogus"] = 1
    trainjob = copy.deepcopy(objects["quickstart/trainjob"])
    trainjob["spec"]["trainer"]["numProcs"] = 2
    shipped = copy.deepcopy(objects["runtime/kctl-train"])
    pod = shipped["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod["template"]["spec"]["restartPolicyy"] = "Never"
    assert round_trips([job, trainjob, shipped]) == [
        ["lost .spec.pytorchReplicaSpecs.Master.template.spec.containers[0].bogus"],
        ["lost .spec.trainer.numProcs"],
        [
            "lost .spec.template.spec.replicatedJobs[0].template.spec.template.spec.restartPolicyy",
            "replicatedJobs[0] pod template: lost .spec.restartPolicyy",
        ],
    ]
