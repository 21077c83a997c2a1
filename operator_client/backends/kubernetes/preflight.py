"""Checks before the first apply (and `kctl-train doctor`): what would otherwise show up
later as a stuck or rejected job. Each finding says how to fix it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from ...errors import ClusterError
from ...kubeflow import pytorchjob as pj
from ..base import Finding
from .api import Api

OPERATOR_INSTALL = (
    'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/'
    'manifests/overlays/standalone?ref=v1.9.4"'
)


def _template(manifest: Mapping[str, Any]) -> dict[str, Any]:
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    first = replicas.get(pj.MASTER) or replicas[pj.WORKER]
    template: dict[str, Any] = first["template"]
    return template


def _gpu_needs(container: Mapping[str, Any]) -> dict[str, int]:
    limits = container.get("resources", {}).get("limits", {})
    return {k: int(v) for k, v in limits.items() if "gpu" in k and str(v).isdigit()}


def node_findings(manifest: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[Finding]:
    """Warnings when no node matches the pod template's selector or has the GPUs one pod
    needs (warnings only: an autoscaler may add nodes). Pure."""
    pod = _template(manifest)["spec"]
    selector = pod.get("nodeSelector", {})
    container = next(c for c in pod["containers"] if c["name"] == pj.CONTAINER_NAME)
    needs = _gpu_needs(container)
    matching = [
        n
        for n in nodes
        if all(n.get("metadata", {}).get("labels", {}).get(k) == v for k, v in selector.items())
    ]
    shown = ", ".join(f"{k}={v}" for k, v in selector.items()) or "(any)"
    if not matching:
        return [
            Finding(
                "warning",
                f"no node matches the node pool {shown}; "
                "pods stay Pending unless an autoscaler adds one",
            )
        ]
    findings = []
    for resource, count in needs.items():
        fits = [
            n
            for n in matching
            if int(str(n.get("status", {}).get("allocatable", {}).get(resource, "0")) or 0) >= count
        ]
        if not fits:
            findings.append(
                Finding(
                    "warning",
                    f"none of the {len(matching)} nodes matching {shown} has {count} allocatable "
                    f"{resource}; pods stay Pending unless an autoscaler adds one",
                )
            )
    return findings


def preflight(backend: Api, manifest: Mapping[str, Any]) -> list[Finding]:
    """Everything checkable before an apply; errors first."""
    namespace = manifest["metadata"]["namespace"]
    findings: list[Finding] = []
    ext = client.ApiextensionsV1Api(backend.api)
    try:
        backend.raw("CRD", ext.read_custom_resource_definition, pj.CRD_NAME)
    except ClusterError as exc:
        if exc.code == 404:
            findings.append(
                Finding(
                    "error",
                    f"the PyTorchJob CRD ({pj.CRD_NAME}) is not installed: install the "
                    f"training-operator v1.9.4: {OPERATOR_INSTALL}",
                )
            )
        elif exc.code != 403:
            raise
    try:
        backend.raw(f"namespace {namespace}", backend.core.read_namespace, namespace)
    except ClusterError as exc:
        if exc.code == 404:
            findings.append(
                Finding(
                    "error",
                    f"namespace {namespace} does not exist: kubectl create namespace {namespace}",
                )
            )
        elif exc.code != 403:
            raise
    auth = client.AuthorizationV1Api(backend.api)
    for verb, group, resource, sub, level in (
        ("create", pj.GROUP, pj.PLURAL, None, "error"),
        ("patch", pj.GROUP, pj.PLURAL, None, "error"),
        ("get", "", "pods", None, "warning"),
        ("get", "", "pods", "log", "warning"),
    ):
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, group=group, resource=resource, subresource=sub
                )
            )
        )
        answer = backend._call("access review", auth.create_self_subject_access_review, review)
        if not answer.status.allowed:
            what = f"{resource}/{sub}" if sub else resource
            findings.append(
                Finding(
                    level,
                    f"you may not {verb} {what} in namespace {namespace} "
                    "(manifests/rbac/kctl-train-user.yaml has the Role to bind)",
                )
            )
    pod = _template(manifest)["spec"]
    secrets = [s["name"] for s in pod.get("imagePullSecrets", [])]
    for container in pod["containers"]:
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] not in secrets:
                secrets.append(ref["name"])
    for name in secrets:
        findings += _missing(
            backend, backend.core.read_namespaced_secret, "Secret", name, namespace
        )
    account = pod.get("serviceAccountName")
    if account:
        findings += _missing(
            backend,
            backend.core.read_namespaced_service_account,
            "ServiceAccount",
            account,
            namespace,
        )
    try:
        nodes = backend.raw("nodes", backend.core.list_node)
        findings += node_findings(manifest, list(nodes.get("items", [])))
    except ClusterError as exc:
        if exc.code != 403:
            raise
        findings.append(Finding("warning", "cannot list nodes (RBAC): GPU capacity not checked"))
    return sorted(findings, key=lambda f: f.level != "error")


def _missing(backend: Api, read: Any, kind: str, name: str, namespace: str) -> list[Finding]:
    try:
        backend.raw(f"{kind} {name}", read, name, namespace)
    except ClusterError as exc:
        if exc.code == 404:
            return [
                Finding(
                    "error",
                    f"{kind} {name} does not exist in namespace {namespace}: "
                    "the pods could not start",
                )
            ]
        if exc.code == 403:
            return [Finding("warning", f"cannot read {kind} {name} (RBAC): not checked")]
        raise
    return []
