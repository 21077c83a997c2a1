"""Checks before the first apply (and `kctl-train doctor`): what would otherwise show up
later as a stuck or rejected job. Each finding says how to fix it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from ...errors import ClusterError
from ...kubeflow import pytorchjob as pj
from ...kubeflow import trainjob as tj
from ..base import Finding
from .api import Api

OPERATOR_INSTALL = (
    'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/'
    'manifests/overlays/standalone?ref=v1.9.4"'
)
TRAINER_INSTALL = (
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/'
    'manifests/overlays/manager?ref=v2.3.0"'
)
TRAINJOB_CRD = f"{tj.PLURAL}.{tj.GROUP}"
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
RUNTIME_INSTALL = (
    "kubectl apply --server-side -f manifests/trainer-v2/cluster-training-runtime.yaml"
)


def _pod_view(manifest: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the checks read of a node pod, from either kind: its pod spec fields
    (selector, secrets, service account) and its trainer container (env, resources)."""
    if manifest["kind"] == tj.KIND:
        trainer = manifest["spec"]["trainer"]
        pod: dict[str, Any] = {}
        for patch in manifest["spec"].get("runtimePatches", []):
            for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                pod.update(rj["template"]["spec"]["template"].get("spec", {}))
        container = {
            "env": trainer.get("env", []),
            "resources": trainer.get("resourcesPerNode", {}),
        }
        return pod, container
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    first = replicas.get(pj.MASTER) or replicas[pj.WORKER]
    spec = first["template"]["spec"]
    return spec, next(c for c in spec["containers"] if c["name"] == pj.CONTAINER_NAME)


def _gpu_needs(container: Mapping[str, Any]) -> dict[str, int]:
    limits = container.get("resources", {}).get("limits", {})
    return {k: int(v) for k, v in limits.items() if "gpu" in k and str(v).isdigit()}


def node_findings(manifest: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[Finding]:
    """Warnings when no node matches the pod template's selector or has the GPUs one pod
    needs (warnings only: an autoscaler may add nodes). Pure."""
    pod, container = _pod_view(manifest)
    selector = pod.get("nodeSelector", {})
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
    findings = operator_findings(backend, manifest["kind"])
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
    job_group, plural = (
        (tj.GROUP, tj.PLURAL) if manifest["kind"] == tj.KIND else (pj.GROUP, pj.PLURAL)
    )
    for verb, group, resource, sub, level in (
        ("create", job_group, plural, None, "error"),
        ("patch", job_group, plural, None, "error"),
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
    pod, container = _pod_view(manifest)
    secrets = [s["name"] for s in pod.get("imagePullSecrets", [])]
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


def _has_crd(backend: Api, name: str) -> bool | None:
    """Whether the cluster serves this CRD (None: not allowed to look)."""
    ext = client.ApiextensionsV1Api(backend.api)
    try:
        backend.raw("CRD", ext.read_custom_resource_definition, name)
    except ClusterError as exc:
        if exc.code == 403:
            return None
        if exc.code == 404:
            return False
        raise
    return True


def _runtimes(backend: Api) -> list[str] | None:
    """The ClusterTrainingRuntimes' names (None: not allowed to list them)."""
    custom = client.CustomObjectsApi(backend.api)
    try:
        listed = backend.raw(
            "ClusterTrainingRuntimes",
            custom.list_cluster_custom_object,
            tj.GROUP,
            tj.VERSION,
            "clustertrainingruntimes",
        )
    except ClusterError as exc:
        if exc.code in (403, 404):
            return None
        raise
    return sorted(item["metadata"]["name"] for item in listed.get("items", []))


def operator_findings(backend: Api, kind: str) -> list[Finding]:
    """Which operators the cluster runs, against the kind the job renders to: an error
    naming the other operator when this one is missing, and the runtime a TrainJob needs."""
    v1, v2 = _has_crd(backend, pj.CRD_NAME), _has_crd(backend, TRAINJOB_CRD)
    if kind == pj.KIND:
        if v1 is False:
            other = (
                "; this cluster runs Kubeflow Trainer v2 instead: render for it with "
                "--operator trainjob (spec.operator: trainjob)"
                if v2
                else ""
            )
            return [
                Finding(
                    "error",
                    f"the PyTorchJob CRD ({pj.CRD_NAME}) is not installed: install the "
                    f"training-operator v1.9.4: {OPERATOR_INSTALL}{other}",
                )
            ]
        if v2:
            return [
                Finding(
                    "info",
                    "this cluster also runs Kubeflow Trainer v2 (TrainJob): --operator trainjob "
                    "renders for it",
                )
            ]
        return []
    findings: list[Finding] = []
    if v2 is False:
        other = "; this cluster runs the training-operator: use --operator pytorchjob" if v1 else ""
        return [
            Finding(
                "error",
                f"the TrainJob CRD ({TRAINJOB_CRD}) is not installed: install Kubeflow Trainer "
                f"v2.3 (with JobSet): {TRAINER_INSTALL}{other}",
            )
        ]
    if _has_crd(backend, JOBSET_CRD) is False:
        findings.append(
            Finding(
                "error",
                f"the JobSet CRD ({JOBSET_CRD}) is not installed: Kubeflow Trainer runs "
                f"TrainJobs through JobSet ({TRAINER_INSTALL} installs both)",
            )
        )
    runtimes = _runtimes(backend)
    if runtimes is not None and tj.RUNTIME_NAME not in runtimes:
        findings.append(
            Finding(
                "error",
                f"the ClusterTrainingRuntime {tj.RUNTIME_NAME} is not installed (runtimes here: "
                f"{', '.join(runtimes) or 'none'}): {RUNTIME_INSTALL}",
            )
        )
    return findings


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
