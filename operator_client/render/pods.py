"""Each replica's pod template as a standalone Pod: for scanners (checkov, kube-score,
Pod Security checks) that do not look inside a PyTorchJob. Not for applying."""

from __future__ import annotations

from typing import Any

from ..kubeflow import pytorchjob as pj


def replica_pods(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One Pod per replica type, named as the operator names its first pod."""
    meta = manifest["metadata"]
    pods = []
    for rtype, replica in manifest["spec"]["pytorchReplicaSpecs"].items():
        template = replica["template"]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pj.pod_name(meta["name"], rtype, 0),
                    "namespace": meta["namespace"],
                    **template.get("metadata", {}),
                },
                "spec": template["spec"],
            }
        )
    return pods
