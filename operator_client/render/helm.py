"""The Helm chart's generated files (charts/kctl-train/values.schema.json and values.yaml,
from the same model as job.yaml; files/cluster-training-runtime.yaml, kctl-train's
ClusterTrainingRuntime for `trainingRuntime.install`): `python -m operator_client.render.helm
charts/kctl-train` writes them; a test fails when the committed ones are stale."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from ..spec.document import spec_document
from ..spec.model import TrainingJob
from ..spec.schema import job_schema
from ..version import __version__
from .output import to_yaml
from .trainjob import write_runtime

# The trainer image of this release: the chart's default, like appVersion.
DEFAULT_IMAGE = f"ghcr.io/kctl-train/trainer:{__version__}"
DNS_1035_OR_EMPTY = r"^([a-z]([-a-z0-9]{0,61}[a-z0-9])?)?$"


def values_schema() -> dict[str, Any]:
    """JSON schema of the chart's values: `spec` is job.yaml's spec, field for field."""
    job = job_schema()
    meta = job["$defs"]["Metadata"]["properties"]
    return {
        "$schema": job["$schema"],
        "title": "kctl-train chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {
                "type": "string",
                "pattern": DNS_1035_OR_EMPTY,
                "description": "Job name (default: the release name).",
            },
            "namespace": {"type": "string", "description": "Default: the release namespace."},
            "labels": meta["labels"],
            "annotations": meta["annotations"],
            "spec": {"$ref": "#/$defs/JobSpec"},
            "serviceAccount": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "create": {"type": "boolean"},
                    "name": {"type": "string", "pattern": DNS_1035_OR_EMPTY},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "trainingRuntime": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "install": {
                        "type": "boolean",
                        "description": "Install kctl-train's ClusterTrainingRuntime, which "
                        "spec.operator: trainjob renders against (cluster-wide: in one release "
                        "only).",
                    }
                },
            },
        },
        "$defs": _relaxed(job["$defs"]),
    }


def _relaxed(defs: dict[str, Any]) -> dict[str, Any]:
    """values.yaml carries train's defaults without a model (a command job has none), so
    the schema cannot require it; the chart's template says when it is missing."""
    defs = copy.deepcopy(defs)
    train = defs["TrainSpec"]
    train["required"] = [r for r in train.get("required", []) if r != "model"]
    if not train["required"]:
        del train["required"]
    return defs


def default_values() -> dict[str, Any]:
    """values.yaml: every spec default filled in (Helm merges the user's values over it,
    as the model fills defaults), the image of this release, no model and no command."""
    sample = TrainingJob.model_validate(
        {
            "apiVersion": "kctl-train/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "defaults"},
            "spec": {"image": DEFAULT_IMAGE, "train": {"model": "defaults:Model"}},
        }
    )
    spec = copy.deepcopy(spec_document(sample)["spec"])
    # The train section's defaults, without a model: the chart uses `train` only when a
    # model is given, and drops it for a spec.command job.
    spec["train"].pop("model")
    # A count or a {min, max} table: Helm warns when a table replaces a number, so the
    # chart's template supplies the default instead.
    spec.pop("nodes")
    return {
        "name": "",
        "namespace": "",
        "labels": {},
        "annotations": {},
        "spec": spec,
        "serviceAccount": {"create": False, "name": "", "annotations": {}},
        "trainingRuntime": {"install": False},
    }


VALUES_HEADER = """\
# Generated from the TrainingJob model (python -m operator_client.render.helm charts/kctl-train);
# do not edit. `spec` has the shape of a job.yaml's spec: paste yours over it, with either
# spec.train or spec.command. Every default is written out because Helm, unlike kctl-train,
# does not apply a schema's defaults. Leave name/namespace empty for the release's.
# serviceAccount.create makes a ServiceAccount (annotate it for IRSA / workload identity)
# and runs the pods with it. trainingRuntime.install installs kctl-train's
# ClusterTrainingRuntime (a TrainJob's pods come from it): cluster-wide, so in one release.
"""


def write(chart: Path) -> None:
    """Regenerate the chart's values.schema.json, values.yaml and runtime file."""
    (chart / "values.schema.json").write_text(json.dumps(values_schema(), indent=2) + "\n")
    (chart / "values.yaml").write_text(VALUES_HEADER + to_yaml(default_values()))
    (chart / "files").mkdir(exist_ok=True)
    write_runtime(chart / "files")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
