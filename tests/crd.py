"""The real CRDs (../shared/schemas: PyTorchJob; Trainer v2.3's TrainJob and
ClusterTrainingRuntime) as strict JSON-schema validators.

The API server prunes fields a structural schema does not know, silently; here an
unknown field is an error, so a renderer typo cannot hide. Missing file: the test
fails under CI=true and skips elsewhere, with the reason.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[1].parent / "shared" / "schemas"
CRD_PATH = SCHEMAS / "kubeflow.org_pytorchjobs.yaml"
TRAINJOB_CRD = SCHEMAS / "trainer-v2.3.0" / "trainer.kubeflow.org_trainjobs.yaml"
RUNTIME_CRD = SCHEMAS / "trainer-v2.3.0" / "trainer.kubeflow.org_clustertrainingruntimes.yaml"
# Each kind's CRD, for manifests of any kind.
CRDS = {
    "PyTorchJob": CRD_PATH,
    "TrainJob": TRAINJOB_CRD,
    "ClusterTrainingRuntime": RUNTIME_CRD,
}


def _strict(node: Any) -> Any:
    """Translate Kubernetes structural-schema conventions into plain JSON schema."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if out.get("type") == "object" and "properties" in out and not preserve:
        out.setdefault("additionalProperties", False)
    return out


@functools.cache
def _validator(path: Path) -> Draft202012Validator:
    crd = yaml.safe_load(path.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return Draft202012Validator(_strict(schema))


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    """Every way the manifest breaks its kind's CRD OpenAPI schema, one line each."""
    path = CRDS[manifest["kind"]]
    if not path.exists():
        reason = (
            f"{manifest['kind']} CRD not found at {path} (a copy of shared/ belongs at ../shared)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in _validator(path).iter_errors(manifest)
    ]
