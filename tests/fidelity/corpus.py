"""The fidelity corpus: jobs whose pods the local backend must build as the real controllers
do. Each input is tests/fidelity/inputs/NAME.yaml: the job (a PyTorchJob or TrainJob named
NAME, in namespace kctl-fidelity), then the TrainingRuntimes or ClusterTrainingRuntimes it
needs (applied first; Kubeflow's as shipped). Its golden, recorded from the real cluster by
record.py, is golden/NAME.yaml.

`python -m tests.fidelity.corpus` writes the inputs derived from the examples (ex-*: each as
a PyTorchJob, and as a TrainJob where one can carry it) and one TrainJob on each of Kubeflow's
shipped runtimes (rt-*). The others (pj-*, tj-*) are written by hand, each saying what it
probes in its first line. An input the local backend refuses rather than run differently
(docs/LOCAL_PODS.md) says so in a comment line `# not run locally: WORDS`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..conftest import ROOT

HERE = Path(__file__).parent
INPUTS = HERE / "inputs"
GOLDEN = HERE / "golden"
NAMESPACE = "kctl-fidelity"
KUBEFLOW_RUNTIMES = ROOT.parent / "shared/schemas/trainer-v2.3.0/runtimes"


def names() -> list[str]:
    return sorted(p.stem for p in INPUTS.glob("*.yaml"))


NOT_RUN_MARK = "# not run locally:"


def not_run_locally(name: str) -> str | None:
    """What the input's comments say a local run refuses it for (a line `# not run locally:
    WORDS`: the local refusal must contain WORDS), or None: it runs locally."""
    for line in (INPUTS / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            return None
        if line.startswith(NOT_RUN_MARK):
            return line[len(NOT_RUN_MARK) :].strip()
    return None


def documents(name: str) -> list[dict[str, Any]]:
    """The input's job first, then its own runtimes."""
    return [d for d in yaml.safe_load_all((INPUTS / f"{name}.yaml").read_text()) if d]


def _render(example: Path, name: str, operator: str) -> dict[str, Any] | None:
    doc = yaml.safe_load(example.read_text())
    doc["metadata"].update(name=name, namespace=NAMESPACE)
    spec = INPUTS / f".{name}.spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    try:
        done = subprocess.run(
            [str(ROOT / ".venv/bin/kctl-train"), "render", str(spec), "--operator", operator],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        spec.unlink()
    return yaml.safe_load(done.stdout) if done.returncode == 0 else None


def _write(name: str, *docs: dict[str, Any], comment: str = "") -> None:
    header = f"{comment}\n" if comment else ""
    (INPUTS / f"{name}.yaml").write_text(header + yaml.safe_dump_all(docs, sort_keys=False))


# Kubeflow's shipped runtimes that a local run refuses, and the words of its reason.
SHIPPED_NOT_RUN = {
    "deepspeed-distributed": "an MPI policy",  # mpirun over SSH between the pods
    "mlx-distributed": "an MPI policy",
    "jax-distributed": "a jax policy",  # JAX_* from the jax plugin
    "xgboost-distributed": "a xgboost policy",  # DMLC_* from the xgboost plugin
    "torchtune-llama3.2-1b": "volumeClaimPolicies",  # JobSet's PVCs
}


def write_inputs() -> None:
    INPUTS.mkdir(exist_ok=True)
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        for operator, short in (("pytorchjob", "pj"), ("trainjob", "tj")):
            name = f"ex-{example.stem}-{short}"[:52]
            rendered = _render(example, name, operator)
            if rendered is not None:
                _write(name, rendered)
    shipped = [KUBEFLOW_RUNTIMES.parent / "torch_distributed.yaml"]
    for runtime in [*shipped, *sorted(KUBEFLOW_RUNTIMES.rglob("*.yaml"))]:
        found = yaml.safe_load(runtime.read_text())
        if not found or found.get("kind") != "ClusterTrainingRuntime":
            continue
        rt = found["metadata"]["name"]
        name = f"rt-{rt}".replace(".", "-")[:52].rstrip("-")
        trainjob = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "runtimeRef": {"name": rt},
                "trainer": {"image": "kctl-train/probe:1", "command": ["true"]},
            },
        }
        refused = SHIPPED_NOT_RUN.get(rt)
        _write(name, trainjob, found, comment=f"{NOT_RUN_MARK} {refused}" if refused else "")


if __name__ == "__main__":
    write_inputs()
