"""GitOps material under manifests/: every YAML parses, kustomizations point at files that
exist, the committed rendered jobs match a fresh render, and Argo CD's health Lua (run for
real with lupa) maps the operator's conditions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT

MANIFESTS = sorted((ROOT / "manifests").rglob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_manifest_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs
    for doc in docs:
        assert "kind" in doc or set(doc) == {"data"}, path  # argocd-cm patches are data only


@pytest.mark.parametrize(
    "path", [p for p in MANIFESTS if p.name == "kustomization.yaml"], ids=lambda p: p.parent.name
)
def test_kustomizations_reference_what_exists(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    if doc["kind"] != "Kustomization" or "resources" not in doc:
        return
    for resource in doc["resources"]:
        if "://" in resource or resource.startswith("github.com/"):
            continue  # a remote base (the training-operator)
        target = (path.parent / resource).resolve()
        assert target.is_file() or (target / "kustomization.yaml").is_file(), resource


def test_committed_jobs_match_a_fresh_render() -> None:
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "kctl-train"),
            "render",
            str(ROOT / "examples/quickstart.yaml"),
            "--check",
            str(ROOT / "manifests/kustomize/base/jobs"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


HEALTH = {
    "PyTorchJob": ("pytorchjob-health.yaml", "kubeflow.org_PyTorchJob"),
    "TrainJob": ("trainjob-health.yaml", "trainer.kubeflow.org_TrainJob"),
}


def health(obj: dict[str, Any]) -> dict[str, str]:
    lupa = pytest.importorskip("lupa", reason="lupa (Lua for Python) is not installed")
    file, key = HEALTH[obj["kind"]]
    doc = yaml.safe_load((ROOT / "manifests/argocd" / file).read_text())
    script = doc["data"][f"resource.customizations.health.{key}"]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    fn = lua.eval(f"function(obj)\n{script}\nend")

    def table(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: table(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([table(v) for v in value])  # 1-based, as Argo CD's
        return value

    result = fn(table(obj))
    return {"status": result["status"], "message": result["message"]}


def cond(type_: str, status: str = "True") -> dict[str, str]:
    return {"type": type_, "status": status, "message": f"job is {type_.lower()}"}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, {"status": "Progressing", "message": "waiting for the training-operator"}),
        ({"conditions": [cond("Created")]}, {"status": "Progressing", "message": "job is created"}),
        (
            {"conditions": [cond("Created"), cond("Running", "False"), cond("Succeeded")]},
            {"status": "Healthy", "message": "job is succeeded"},
        ),
        (
            {"conditions": [cond("Created"), cond("Running", "False"), cond("Failed")]},
            {"status": "Degraded", "message": "job is failed"},
        ),
        (
            {"conditions": [cond("Created"), cond("Restarting")]},
            {"status": "Progressing", "message": "job is restarting"},
        ),
        # Kueue suspends a queued job until it is admitted: not Progressing
        (
            {"conditions": [cond("Created"), cond("Suspended")]},
            {"status": "Suspended", "message": "job is suspended"},
        ),
        (
            {"conditions": [cond("Created"), cond("Suspended", "False"), cond("Running")]},
            {"status": "Progressing", "message": "job is running"},
        ),
    ],
)
def test_argocd_health(status: dict[str, Any] | None, expected: dict[str, str]) -> None:
    obj: dict[str, Any] = {"kind": "PyTorchJob"}
    if status is not None:
        obj["status"] = status
    assert health(obj) == expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            None,
            {
                "status": "Progressing",
                "message": "running (Kubeflow Trainer reports no progress condition)",
            },
        ),
        (
            {"conditions": [cond("Suspended")]},
            {"status": "Suspended", "message": "job is suspended"},
        ),
        (
            {
                "conditions": [cond("Suspended", "False")],
                "jobsStatus": [{"name": "node", "active": 1}],
            },
            {
                "status": "Progressing",
                "message": "running (Kubeflow Trainer reports no progress condition)",
            },
        ),
        ({"conditions": [cond("Complete")]}, {"status": "Healthy", "message": "job is complete"}),
        (
            {"conditions": [cond("Suspended", "False"), cond("Failed")]},
            {"status": "Degraded", "message": "job is failed"},
        ),
    ],
)
def test_argocd_health_of_a_trainjob(
    status: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    """Trainer v2.3's conditions: Suspended, Complete, Failed (no Created or Running)."""
    obj: dict[str, Any] = {"kind": "TrainJob"}
    if status is not None:
        obj["status"] = status
    assert health(obj) == expected
