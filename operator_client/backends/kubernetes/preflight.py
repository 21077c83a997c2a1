"""Checks before the first apply (and `kctl-train doctor`): what would otherwise show up
later as a stuck or rejected job. Each finding says how to fix it.

The access checks ask for exactly what the backend does (api.py): get, create, patch the
job (an apply), list and watch it (following it), delete it (delete, or replacing a
finished job), list its pods, read their logs, list their events. The served CRD's schema
is checked against the fields the job sets (a TrainJob's runtimePatches needs Trainer
v2.3); where reading CRDs is not allowed, the cluster's discovery and OpenAPI, which
every user may read, tell the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from ...controlplane import pod_security as pss
from ...controlplane.workload import workload_of
from ...errors import ClusterError
from ...kubeflow import pytorchjob as pj
from ...kubeflow import trainjob as tj
from ..types import Finding
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
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
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


# What the backend does with each resource, and what a refusal means.
ACCESS = (
    ("get", None, None, "error", "to apply it"),
    ("create", None, None, "error", "to apply it"),
    ("patch", None, None, "error", "to apply it"),
    ("list", None, None, "warning", "to follow it (--wait, wait, status, list)"),
    ("watch", None, None, "warning", "to follow it (--wait, wait)"),
    ("delete", None, None, "warning", "to delete it, or replace it once finished"),
    ("list", "", "pods", "warning", "to show its pods"),
    ("get", "", "pods/log", "warning", "to show its logs"),
    ("list", "", "events", "warning", "to show why its pods are stuck"),
)


def _allowed(backend: Api, namespace: str, verb: str, group: str, resource: str) -> bool:
    auth = client.AuthorizationV1Api(backend.api)
    plural, _, sub = resource.partition("/")
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb=verb, group=group, resource=plural,
                subresource=sub or None,
            )
        )
    )  # fmt: skip
    answer = backend._call("access review", auth.create_self_subject_access_review, review)
    return bool(answer.status.allowed)


def access_findings(backend: Api, manifest: Mapping[str, Any]) -> list[Finding]:
    """What the user may not do that the backend would do with this job."""
    namespace = manifest["metadata"]["namespace"]
    job_group, plural = (
        (tj.GROUP, tj.PLURAL) if manifest["kind"] == tj.KIND else (pj.GROUP, pj.PLURAL)
    )
    findings = []
    for verb, group, resource, level, why in ACCESS:
        resource = resource or plural
        if not _allowed(backend, namespace, verb, job_group if group is None else group, resource):
            findings.append(
                Finding(
                    level,
                    f"you may not {verb} {resource} in namespace {namespace}, needed {why} "
                    "(manifests/rbac/kctl-train-user.yaml has the Role to bind)",
                )
            )
    return findings


def admission_findings(namespace: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[Finding]:
    """An error for each PyTorchJob pod group the namespace's Pod Security admission
    (its `enforce` label) would refuse: the operator's pod creations would fail with these
    words and the job would wait forever. The operator's own additions (the v1 operator's
    init container for workers) are its configuration's, not checked here."""
    level = (namespace.get("metadata", {}).get("labels") or {}).get(PSA_ENFORCE)
    if manifest["kind"] != pj.KIND or level not in pss.LEVELS:
        return []
    name = namespace["metadata"]["name"]
    return [
        Finding(
            "error",
            f"{refusal}: namespace {name} enforces Pod Security {level!r}; run the job where "
            "its pods are admitted, or change what the refusal names",
            bad_input=True,
        )
        for refusal in pss.group_refusals(workload_of(manifest), level).values()
    ]


def preflight(backend: Api, manifest: Mapping[str, Any]) -> list[Finding]:
    """Everything checkable before an apply; errors first."""
    namespace = manifest["metadata"]["namespace"]
    findings = operator_findings(backend, manifest["kind"])
    findings += schema_findings(backend, manifest)
    try:
        found = backend.raw(f"namespace {namespace}", backend.core.read_namespace, namespace)
        findings += admission_findings(found, manifest)
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
    findings += access_findings(backend, manifest)
    pod, container = _pod_view(manifest)
    secrets = [s["name"] for s in pod.get("imagePullSecrets", [])]
    for item in container.get("env", []):
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] not in secrets:
            secrets.append(ref["name"])
    readable = bool(secrets) and _allowed(backend, namespace, "get", "", "secrets")
    for name in secrets if readable else ():
        findings += _missing(
            backend, backend.core.read_namespaced_secret, "Secret", name, namespace
        )
    if secrets and not readable:
        findings.append(
            Finding(
                "info",
                f"Secrets {', '.join(secrets)} not checked: you may not read Secrets in "
                f"{namespace} (kctl-train's Role does not grant it, by design)",
            )
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


def _read_crd(backend: Api, name: str) -> dict[str, Any] | None:
    """The CRD (None: not installed); ClusterError 403 when reading CRDs is not allowed."""
    ext = client.ApiextensionsV1Api(backend.api)
    try:
        return backend.raw("CRD", ext.read_custom_resource_definition, name)
    except ClusterError as exc:
        if exc.code == 404:
            return None
        raise


def _served(backend: Api, group: str, version: str, plural: str) -> bool:
    """Whether the cluster serves the plural, from its discovery (readable by anyone)."""
    try:
        listed = backend.read_path("discovery", f"/apis/{group}/{version}")
    except ClusterError as exc:
        if exc.code == 404:
            return False
        raise
    return any(r.get("name") == plural for r in listed.get("resources", []))


def _has_crd(backend: Api, name: str) -> bool | None:
    """Whether the cluster serves this CRD; where reading CRDs is not allowed, whether
    discovery lists it (None: not even that could be asked)."""
    try:
        return _read_crd(backend, name) is not None
    except ClusterError as exc:
        if exc.code != 403:
            raise
    known = {
        pj.CRD_NAME: (pj.GROUP, pj.VERSION, pj.PLURAL),
        TRAINJOB_CRD: (tj.GROUP, tj.VERSION, tj.PLURAL),
    }
    if name not in known:
        return None
    try:
        return _served(backend, *known[name])
    except ClusterError:
        return None


def _spec_fields(schema: Mapping[str, Any]) -> set[str] | None:
    """The spec fields an object schema declares (None: it takes any)."""
    spec = schema.get("properties", {}).get("spec", {})
    fields = spec.get("properties")
    return None if fields is None else set(fields)


def served_spec_fields(backend: Api, kind: str) -> tuple[set[str] | None, str]:
    """The spec fields the served version of `kind` declares, and where that was read:
    the CRD, else (reading CRDs not allowed) the cluster's OpenAPI v3 document."""
    group, version, plural = (
        (tj.GROUP, tj.VERSION, tj.PLURAL) if kind == tj.KIND else (pj.GROUP, pj.VERSION, pj.PLURAL)
    )
    try:
        crd = _read_crd(backend, f"{plural}.{group}")
    except ClusterError as exc:
        if exc.code != 403:
            raise
    else:
        for served in (crd or {}).get("spec", {}).get("versions", []):
            if served.get("name") == version:
                schema = served.get("schema", {}).get("openAPIV3Schema", {})
                return _spec_fields(schema), "its CRD"
        return None, "its CRD"
    try:
        document = backend.read_path("OpenAPI", f"/openapi/v3/apis/{group}/{version}")
    except ClusterError:
        return None, "the cluster's OpenAPI"
    for schema in document.get("components", {}).get("schemas", {}).values():
        kinds = schema.get("x-kubernetes-group-version-kind", [])
        if any(k.get("kind") == kind and k.get("group") == group for k in kinds):
            return _spec_fields(schema), "the cluster's OpenAPI (reading CRDs is not allowed)"
    return None, "the cluster's OpenAPI"


def schema_findings(backend: Api, manifest: Mapping[str, Any]) -> list[Finding]:
    """An error for each spec field of the job the served schema does not declare: the
    API server would answer a server-side apply with a 500 (an older operator)."""
    kind = manifest["kind"]
    try:
        fields, where = served_spec_fields(backend, kind)
    except ClusterError:
        return []
    missing = sorted(set(manifest.get("spec", {})) - fields) if fields is not None else []
    if not missing:
        return []
    if kind == tj.KIND:
        fix = "this cluster runs Kubeflow Trainer older than v2.3: upgrade Trainer to v2.3"
        fix += ", or use --operator pytorchjob"
    else:
        fix = "this cluster's training-operator is older than v1.9: upgrade it"
    return [
        Finding(
            "error",
            f"the {kind} schema this cluster serves ({where}) does not declare "
            f"{', '.join('spec.' + m for m in missing)}: {fix}",
        )
    ]


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
