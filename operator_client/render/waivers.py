"""checkov findings that are the design of a training pod, not defects: they go on the pod
templates as `checkov.io/skipN` annotations, each with its reason, so users' own scans of
the pods pass and say why. Findings that depend on the user's choices (the namespace, an
image pinned by tag rather than digest) are not waived here."""

from __future__ import annotations

from ..spec.model import TrainingJob

POD_WAIVERS = {
    "CKV_K8S_8": "batch training pods have no liveness probe; a hung rank is caught by the "
    "rendezvous and collective timeouts",
    "CKV_K8S_9": "batch training pods serve no traffic, so no readiness probe",
    "CKV_K8S_11": "no CPU limit by design: CFS throttling stalls the data loader workers",
}


def scan_waivers(job: TrainingJob) -> dict[str, str]:
    """check id -> reason, for this job's pods."""
    spec = job.spec
    waivers = dict(POD_WAIVERS)
    if spec.image_pull_policy != "Always":
        waivers["CKV_K8S_15"] = (
            f"imagePullPolicy {spec.image_pull_policy}: images are pinned by tag or digest, "
            "and Always adds a registry round trip to every pod start of a gang"
        )
    if spec.network.profile != "none":
        waivers["CKV_K8S_25"] = (
            f"IPC_LOCK, added only by the {spec.network.profile} network profile: RDMA needs "
            "to pin memory"
        )
    if spec.storage is not None and spec.storage.credentials_secret:
        waivers["CKV_K8S_35"] = (
            "object-store keys as env from a Secret: boto3 reads them there; use IRSA or "
            "workload identity (storage without credentialsSecret) to avoid Secrets"
        )
    return waivers


def skip_annotations(job: TrainingJob) -> dict[str, str]:
    """The waivers as checkov reads them: `checkov.io/skipN: <check id>=<reason>`."""
    return {
        f"checkov.io/skip{i}": f"{check}={reason}"
        for i, (check, reason) in enumerate(sorted(scan_waivers(job).items()), 1)
    }
