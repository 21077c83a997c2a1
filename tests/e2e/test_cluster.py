"""kctl-train against the real cluster of `make cluster`: the real API server (RBAC, Pod
Security, server-side apply and dry runs, its own error words), the real training-operator,
Kubeflow Trainer and JobSet making the pods, and the real scheduler placing them on simulated
GPU node pools (kwok).

Every command runs as the namespaced user the shipped manifests/rbac describes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import ROOT
from .cluster import NAMESPACE, Cluster, connect, eventually, node_to_oneself

# The examples whose GPU pods land on a simulated pool: example, its namespace, the pool's
# node label. RDMA jobs (EFA, InfiniBand) add IPC_LOCK: only a privileged namespace admits them.
HPC = "kctl-e2e-hpc"
POOLS = {
    "gke-h100-4x8": (NAMESPACE, "cloud.google.com/gke-nodepool", "a3-highgpu"),
    "eks-elastic-efa": (HPC, "eks.amazonaws.com/nodegroup", "p5-48xlarge"),
    "aks-a100": (NAMESPACE, "kubernetes.azure.com/agentpool", "a100pool"),
    "onprem-infiniband": (HPC, "node-role.kubernetes.io/gpu", "true"),
}
# The examples a TrainJob can carry (`validate --operator trainjob`); the others set what only
# a runtime may (a TTL, a PriorityClass, gang scheduling, an image pull policy).
TRAINJOBS = ("aks-a100", "gke-h100-4x8", "quickstart")
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml"))
RESOURCE = {"pytorchjob": "pytorchjob.kubeflow.org", "trainjob": "trainjob.trainer.kubeflow.org"}


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return connect()


def _apply(
    cluster: Cluster, example: str, namespace: str = NAMESPACE, operator: str = "pytorchjob"
) -> None:
    done = cluster.kctl(
        "apply", f"examples/{example}.yaml", "-n", namespace, "--force-namespace",
        "--operator", operator,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout


def _rendered(
    cluster: Cluster, example: str, namespace: str, operator: str = "pytorchjob"
) -> dict[str, Any]:
    done = cluster.kctl(
        "apply", f"examples/{example}.yaml", "-n", namespace, "--force-namespace",
        "--operator", operator, "--dry-run=client", "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job: dict[str, Any] = json.loads(done.stdout)
    return job


def _placed(
    cluster: Cluster, job: str, namespace: str, count: int, operator: str = "pytorchjob"
) -> list[dict[str, Any]] | None:
    pods = cluster.pods(job, namespace, operator)
    if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
        return pods
    return None


def _pod_count(job: dict[str, Any]) -> int:
    if job["kind"] == "TrainJob":
        return int(job["spec"]["trainer"]["numNodes"])
    return sum(s["replicas"] for s in job["spec"]["pytorchReplicaSpecs"].values())


def test_preflight_runs_against_the_real_rbac(cluster: Cluster) -> None:
    done = cluster.kctl(
        "doctor", "examples/gke-h100-4x8.yaml", "-n", NAMESPACE, "--force-namespace"
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "pytorchjob/resnet50-ddp: the kubernetes backend is ready for it" in done.stdout
    # The Role grants no Secret reads, and the preflight says so rather than guessing.
    assert "Secrets regcred not checked: you may not read Secrets in kctl-e2e" in done.stderr


def test_outside_its_namespace_the_user_is_refused_before_anything_is_sent(
    cluster: Cluster,
) -> None:
    done = cluster.kctl("apply", "examples/quickstart.yaml", "-n", "default", "--force-namespace")
    assert done.returncode == 1
    assert "you may not create pytorchjobs in namespace default" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_servers_own_words_reach_the_user(cluster: Cluster) -> None:
    done = cluster.kctl("status", "quickstart", "-n", "kube-system")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert 'cannot get resource "pytorchjobs" in API group "kubeflow.org"' in done.stderr, (
        done.stderr
    )


def test_the_trainjob_preflight_finds_trainer_and_its_runtime(cluster: Cluster) -> None:
    done = cluster.kctl(
        "doctor", "examples/aks-a100.yaml", "-n", NAMESPACE, "--force-namespace",
        "--operator", "trainjob",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert "trainjob/segmentation: the kubernetes backend is ready for it" in done.stdout


def test_a_local_run_borrows_kubeflows_runtime_from_the_cluster(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`apply --local --context`: a hand-written TrainJob's runtime (Kubeflow's
    torch-distributed, as Trainer's overlay installed it) is read from the real cluster with
    the shipped RBAC; its pod runs here, in a sandbox."""
    job = tmp_path / "trainjob.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "borrowed", "namespace": NAMESPACE},
                "spec": {
                    "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"command": ["python3", "-c", "print('ran here')"], "numNodes": 1},
                },
            }
        )
    )
    home = {"KCTL_TRAIN_HOME": str(tmp_path / "home")}
    done = cluster.kctl(
        "apply", str(job), "--local", "--context", "kctl-train", "--wait", env=home
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Complete: jobset completed successfully" in done.stderr
    logs = cluster.kctl("logs", "borrowed", "-n", NAMESPACE, "--local", env=home)
    assert "ran here" in logs.stdout, logs.stdout + logs.stderr


@pytest.mark.parametrize(
    "example,operator",
    [(e, "pytorchjob") for e in EXAMPLES] + [(e, "trainjob") for e in TRAINJOBS],
)
def test_every_example_passes_a_server_side_dry_run(
    cluster: Cluster, example: str, operator: str
) -> None:
    """The real API server's schema and the operators' own webhooks (training-operator's
    for a PyTorchJob; Trainer's, with the runtime it names, for a TrainJob) accept each."""
    namespace = POOLS.get(example, (NAMESPACE,))[0]
    done = cluster.kctl(
        "apply", f"examples/{example}.yaml", "-n", namespace, "--force-namespace",
        "--operator", operator, "--dry-run=server", "-o", "name",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(RESOURCE[operator] + "/"), done.stdout
    assert "server dry run" in done.stderr


# A PyTorchJob's pods run on the simulated nodes until deleted; a TrainJob's are Job pods,
# which kwok's fast stages complete at once: the state kctl-train shows, then what a second
# apply does (nothing to a running job; a finished one is replaced).
SETTLED = {"pytorchjob": ("Running", "unchanged"), "trainjob": ("Succeeded", "replaced")}


@pytest.mark.parametrize(
    "example,operator",
    [(e, "pytorchjob") for e in sorted(POOLS)] + [(e, "trainjob") for e in TRAINJOBS if e in POOLS],
)
def test_the_scheduler_puts_each_gpu_example_on_its_pool(
    cluster: Cluster, example: str, operator: str
) -> None:
    """The real controllers make the pods (the training-operator; or Trainer, JobSet and the
    Job controller), the real scheduler places them by the job's selectors, tolerations and
    GPU requests; the simulated nodes run them."""
    namespace, label, value = POOLS[example]
    job = _rendered(cluster, example, namespace, operator)
    name = job["metadata"]["name"]
    count = _pod_count(job)
    state, second_apply = SETTLED[operator]
    _apply(cluster, example, namespace, operator)
    try:
        pods = eventually(
            lambda: _placed(cluster, name, namespace, count, operator),
            90,
            f"{count} placed pods of {name}",
        )
        for pod in pods:
            node = cluster.get("node", pod["spec"]["nodeName"])
            assert node["metadata"]["labels"].get(label) == value, pod["metadata"]["name"]

        def settled() -> bool | None:
            shown = cluster.kctl("status", name, "-n", namespace).stdout
            return True if shown.startswith(f"{operator}/{name}  {state}") else None

        eventually(settled, 60, f"{name} {state} in kctl-train status")
        again = cluster.kctl(
            "apply", f"examples/{example}.yaml", "-n", namespace, "--force-namespace",
            "--operator", operator,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"{RESOURCE[operator]}/{name} {second_apply}" in again.stdout, again.stdout
        assert name in cluster.kctl("list", "-n", namespace).stdout
    finally:
        gone = cluster.kctl("delete", name, "-n", namespace)
    assert gone.returncode == 0, gone.stderr
    # delete returns once the job and its pods are gone; the operator's cache may still
    # make a pod for the job it has not yet seen go, which the garbage collector removes.
    eventually(
        lambda: True if not cluster.pods(name, namespace, operator) else None,
        30,
        f"{name}'s pods gone",
    )


def test_the_preflight_refuses_what_pod_security_would_in_the_servers_words(
    cluster: Cluster,
) -> None:
    """EFA needs IPC_LOCK: in a restricted namespace the preflight refuses the job with the
    words the API server gives the same pod (asked with a server-side dry run)."""
    done = cluster.kctl(
        "doctor", "examples/eks-elastic-efa.yaml", "-n", NAMESPACE, "--force-namespace"
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    ours = done.stderr.split("error: ", 1)[1].split(": namespace kctl-e2e enforces")[0]
    worker = _rendered(cluster, "eks-elastic-efa", NAMESPACE)["spec"]["pytorchReplicaSpecs"]
    template = worker["Worker"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": "llm-pretrain-worker-0",
            "namespace": NAMESPACE,
        },
        "spec": template["spec"],
    }
    server = subprocess.run(
        [str(cluster.kubectl_bin), "--kubeconfig", str(cluster.admin), "create",
         "--dry-run=server", "-f", "-"],
        input=json.dumps(pod), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert server.returncode != 0
    assert ours in server.stderr, (ours, server.stderr)


def test_a_job_no_pool_fits_shows_the_schedulers_reason(cluster: Cluster) -> None:
    """kueue-queued asks for A100 SXM nodes, whose pool's taint it does not tolerate (Kueue,
    which would add the toleration, is not installed): the scheduler's words reach status."""
    name = "finetune-queued"
    _apply(cluster, "kueue-queued")
    try:

        def unschedulable() -> str | None:
            shown = cluster.kctl("status", name, "-n", NAMESPACE).stdout
            return shown if "nodes are available" in shown else None

        shown = eventually(unschedulable, 60, "the scheduler's reason in kctl-train status")
        assert "Unschedulable: 0/" in shown
        assert "untolerated taint" in shown
    finally:
        cluster.kctl("delete", name, "-n", NAMESPACE)


def test_pods_the_operator_cannot_create_show_why(cluster: Cluster) -> None:
    """In a namespace whose quota admits one pod, the worker is refused: the operator's
    FailedCreatePod (the API server's quota words) shows in status."""
    with node_to_oneself():  # its one pod lands on the real node
        _refused_by_quota(cluster)


def _refused_by_quota(cluster: Cluster) -> None:
    namespace = "kctl-e2e-quota"
    done = cluster.kctl("apply", "examples/quickstart.yaml", "-n", namespace, "--force-namespace")
    assert done.returncode == 0, done.stderr
    try:

        def refused() -> str | None:
            shown = cluster.kctl("status", "quickstart", "-n", namespace).stdout
            return shown if "FailedCreatePod" in shown else None

        shown = eventually(refused, 60, "FailedCreatePod in kctl-train status")
        assert "exceeded quota: one-pod" in shown
    finally:
        cluster.kctl("delete", "quickstart", "-n", namespace)


def test_the_kustomize_overlay_is_accepted_by_the_real_server(cluster: Cluster) -> None:
    """`kubectl apply --server-side -k` of the GitOps overlay (its rendered job, labels,
    queue patch and the RBAC it carries), checked by the real API server and webhook."""
    done = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-k",
        str(ROOT / "manifests/kustomize/overlays/team-a"), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pytorchjob.kubeflow.org/quickstart serverside-applied (server dry run)" in done.stdout


def test_a_helm_release_of_the_chart_runs_its_job_on_the_pool(cluster: Cluster) -> None:
    """The chart installed by the Helm engine the chart tests use (Helm v4's Go code):
    the operator makes the release's pods and the scheduler puts them on the AKS pool."""
    helm_python = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    doc = yaml.safe_load((ROOT / "examples/aks-a100.yaml").read_text())
    name = "helm-segmentation"
    values = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {},
        "annotations": {},
        "spec": doc["spec"],
    }
    helm = helm_python.Config(kubeconfig_path=str(cluster.admin), namespace=NAMESPACE)
    chart = helm_python.Chart.load(str(ROOT / "charts" / "kctl-train"))
    try:
        helm.install(chart, name, values, namespace=NAMESPACE)
        pods = eventually(
            lambda: _placed(cluster, name, NAMESPACE, 2), 60, f"2 placed pods of {name}"
        )
        for pod in pods:
            node = cluster.get("node", pod["spec"]["nodeName"])
            assert node["metadata"]["labels"]["kubernetes.azure.com/agentpool"] == "a100pool"
        assert "Running" in cluster.kctl("status", name, "-n", NAMESPACE).stdout
    finally:
        helm.uninstall(name, ignore_not_found=True)
        chart.close()
    eventually(lambda: True if not cluster.pods(name) else None, 60, f"{name}'s pods gone")
