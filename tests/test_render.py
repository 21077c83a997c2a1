"""The renderer, rule by rule: each case is a spec fragment and what the manifest must show."""

from __future__ import annotations

from typing import Any

import pytest

from operator_client.render import render, spec_hash, to_json, to_yaml
from operator_client.render.placement import gpu_toleration_key
from operator_client.spec import load_job_text

HEAD = """\
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata:
  name: demo
  namespace: ml
spec:
  image: ghcr.io/acme/trainer:1.0
  train: {model: pkg.mod:Model}
"""


def manifest(extra: str = "") -> dict[str, Any]:
    return render(load_job_text(HEAD + extra).job)


def pod(m: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    spec: dict[str, Any] = m["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
    return spec


def container(m: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    (c,) = pod(m, replica)["containers"]
    assert isinstance(c, dict)
    return c


def env(m: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(m, replica)["env"]}


@pytest.mark.parametrize(
    ("nodes", "replicas"),
    [("1", {"Master": 1}), ("2", {"Master": 1, "Worker": 1}), ("4", {"Master": 1, "Worker": 3})],
)
def test_fixed_jobs_have_an_explicit_master(nodes: str, replicas: dict[str, int]) -> None:
    m = manifest(f"  nodes: {nodes}\n")
    specs = m["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == replicas
    assert "elasticPolicy" not in m["spec"]


def test_elastic_jobs_are_workers_only_with_a_full_elastic_policy() -> None:
    m = manifest("  nodes: {min: 2, max: 6}\n  fault: {maxRestarts: 7}\n")
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 6
    policy = m["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d"
    assert policy["rdzvId"] == "demo"
    assert (policy["minReplicas"], policy["maxReplicas"], policy["maxRestarts"]) == (2, 6, 7)
    assert "standalone" not in policy
    assert "nProcPerNode" not in policy
    assert {c["key"] for c in policy["rdzvConf"]} >= {"keep_alive_interval", "join_timeout"}


@pytest.mark.parametrize(
    ("extra", "nproc"),
    [
        ("", "1"),  # CPU, auto -> 1, never torchrun's per-core auto
        ("  resources: {gpus: 8}\n", "8"),
        ("  resources: {gpus: 8}\n  processesPerNode: 4\n", "4"),
        ("  resources: {gpus: 8}\n  processesPerNode: detect\n", "auto"),
        ("  processesPerNode: 3\n", "3"),  # CPU with an explicit count
        ("  resources: {gpus: 2, gpuResource: nvidia.com/mig-1g.10gb}\n", "2"),
    ],
)
def test_nproc_per_node_is_an_explicit_string(extra: str, nproc: str) -> None:
    assert manifest(extra)["spec"]["nprocPerNode"] == nproc


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        ("{cpu: 4, memory: 16Gi}", {"cpu": "4", "memory": "16Gi"}, {"memory": "16Gi"}),
        (
            "{gpus: 8, cpu: '90', memory: 1000Gi}",
            {"cpu": "90", "memory": "1000Gi", "nvidia.com/gpu": "8"},
            {"memory": "1000Gi", "nvidia.com/gpu": "8"},
        ),
        (
            "{gpus: 4, gpuResource: amd.com/gpu}",
            {"cpu": "2", "memory": "8Gi", "amd.com/gpu": "4"},
            {"memory": "8Gi", "amd.com/gpu": "4"},
        ),
    ],
)
def test_resources(resources: str, requests: dict[str, str], limits: dict[str, str]) -> None:
    c = container(manifest(f"  resources: {resources}\n"))
    assert c["resources"] == {"requests": requests, "limits": limits}


@pytest.mark.parametrize(
    ("extra", "tolerations"),
    [
        ("", []),
        (
            "  resources: {gpus: 1}\n",
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        (
            "  resources: {gpus: 1, gpuResource: nvidia.com/mig-3g.40gb}\n",
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        (
            "  resources: {gpus: 1, gpuResource: amd.com/gpu}\n",
            [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        ("  nodePool: {preset: aks, pool: cpu}\n", []),  # no GPUs: neither GPU nor sku taint
        (
            "  resources: {gpus: 1}\n  nodePool: {preset: aks, pool: gpu}\n",
            [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            ],
        ),
        (
            "  nodePool: {tolerations: [{key: spot, operator: Exists, effect: NoExecute}]}\n",
            [{"key": "spot", "operator": "Exists", "effect": "NoExecute"}],
        ),
    ],
)
def test_gpu_toleration_only_for_gpu_pods(extra: str, tolerations: list[Any]) -> None:
    assert pod(manifest(extra)).get("tolerations", []) == tolerations


@pytest.mark.parametrize(
    ("node_pool", "selector"),
    [
        (
            "{preset: gke, accelerator: nvidia-h100-80gb, pool: a3}",
            {
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "cloud.google.com/gke-nodepool": "a3",
            },
        ),
        ("{preset: eks, pool: p5}", {"eks.amazonaws.com/nodegroup": "p5"}),
        ("{preset: aks, pool: gpupool}", {"kubernetes.azure.com/agentpool": "gpupool"}),
        (
            "{preset: karpenter, accelerator: h100, pool: gpu}",
            {"karpenter.k8s.aws/instance-gpu-name": "h100", "karpenter.sh/nodepool": "gpu"},
        ),
        (
            "{preset: gfd, accelerator: NVIDIA-H100-80GB-HBM3}",
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        ),
        (
            "{preset: gke, pool: a3, nodeSelector: {zone: b, cloud.google.com/gke-nodepool: a4}}",
            {"cloud.google.com/gke-nodepool": "a4", "zone": "b"},
        ),
        ("{}", None),
    ],
)
def test_node_pool_presets(node_pool: str, selector: dict[str, str] | None) -> None:
    assert pod(manifest(f"  nodePool: {node_pool}\n")).get("nodeSelector") == selector


def test_affinity_is_passed_through_to_every_replica() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
                ]
            }
        }
    }
    m = manifest(
        "  nodes: 2\n  nodePool:\n    affinity: " + to_json(affinity).replace("\n", " ") + "\n"
    )
    assert pod(m)["affinity"] == affinity == pod(m, "Worker")["affinity"]
    assert "&id" not in to_yaml(m)  # shared objects are printed in full, never as YAML aliases


def test_shared_memory_is_always_a_memory_empty_dir() -> None:
    for extra, size in (("", "1Gi"), ("  resources: {sharedMemory: 64Gi, memory: 1Ti}\n", "64Gi")):
        p = pod(manifest(extra))
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}} in p["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in p["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(
    ("network", "resource", "env_names", "caps"),
    [
        ("{profile: none}", None, set(), None),
        (
            "{profile: efa, devices: 32}",
            ("vpc.amazonaws.com/efa", "32"),
            {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"},
            ["IPC_LOCK"],
        ),
        (
            "{profile: infiniband}",
            ("rdma/rdma_shared_device_a", "1"),
            {"NCCL_IB_DISABLE"},
            ["IPC_LOCK"],
        ),
        (
            "{profile: infiniband, resource: rdma/ib, devices: 2}",
            ("rdma/ib", "2"),
            {"NCCL_IB_DISABLE"},
            ["IPC_LOCK"],
        ),
    ],
)
def test_network_profiles(
    network: str, resource: tuple[str, str] | None, env_names: set[str], caps: list[str] | None
) -> None:
    m = manifest(f"  resources: {{gpus: 8}}\n  network: {network}\n")
    c = container(m)
    if resource:
        assert c["resources"]["limits"][resource[0]] == resource[1]
        assert c["resources"]["requests"][resource[0]] == resource[1]
    assert env_names <= set(env(m))
    assert c["securityContext"]["capabilities"].get("add") == caps
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_user_env_overrides_profile_env_and_is_sorted() -> None:
    m = manifest("  network: {profile: efa}\n  env: {FI_PROVIDER: tcp, A_FIRST: '1'}\n")
    names = [e["name"] for e in container(m)["env"]]
    assert names[:2] == ["KCTL_TRAIN_SPEC", "KCTL_TRAIN_POD_IP"]
    assert names[2:] == sorted(names[2:])
    assert env(m)["FI_PROVIDER"] == "tcp"


def test_security_defaults_are_restricted() -> None:
    p = pod(manifest())
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["runAsUser"] != 0
    assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert p["automountServiceAccountToken"] is False
    sc = p["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod(manifest("  mountServiceAccountToken: true\n"))["automountServiceAccountToken"]


def test_run_policy() -> None:
    m = manifest(
        "  fault: {backoffLimit: 2, activeDeadline: 2h, restartPolicy: ExitCode}\n"
        "  cleanup: {pods: All, ttlAfterFinished: 1h}\n"
    )
    assert m["spec"]["runPolicy"] == {
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 3600,
        "backoffLimit": 2,
        "activeDeadlineSeconds": 7200,
    }
    assert m["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "ExitCode"
    default = manifest()["spec"]["runPolicy"]
    assert default["cleanPodPolicy"] == "Running"
    assert "activeDeadlineSeconds" not in default


def test_kueue_queue_and_gang_scheduling() -> None:
    m = manifest(
        "  nodes: {min: 3, max: 5}\n"
        "  scheduling: {queue: team-a, gang: volcano, priorityClassName: high}\n"
    )
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert m["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 3,
        "priorityClass": "high",
    }
    assert pod(m, "Worker")["priorityClassName"] == "high"
    assert "schedulingPolicy" not in manifest()["spec"]["runPolicy"]


def test_storage_env_never_inlines_credentials() -> None:
    m = manifest(
        "  storage: {uri: 's3://bkt/p', endpoint: 'http://minio:9000', region: eu,"
        " credentialsSecret: s3-creds}\n"
    )
    e = env(m)
    assert e["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert e["AWS_REGION"] == "eu"
    assert e["AWS_REQUEST_CHECKSUM_CALCULATION"] == "when_required"
    assert e["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    plain = env(manifest("  storage: {uri: 's3://bkt/p'}\n"))
    assert "AWS_ACCESS_KEY_ID" not in plain
    assert "AWS_REQUEST_CHECKSUM_CALCULATION" not in plain


def test_runtime_gets_the_whole_spec_inside_the_one_object() -> None:
    import json

    loaded = load_job_text(HEAD + "  nodes: 2\n")
    m = render(loaded.job)
    carried = json.loads(env(m)["KCTL_TRAIN_SPEC"])
    assert carried["spec"]["nodes"] == 2
    assert carried["spec"]["checkpoint"] == {
        "every": "30m",
        "keep": 3,
        "resume": "auto",
        "whenBusy": "wait",
    }
    assert carried == json.loads(env(m, "Worker")["KCTL_TRAIN_SPEC"])
    c = container(m)
    assert c["name"] == "pytorch"
    assert c["command"] == ["kctl-train-runtime"]
    assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]


def test_labels_and_spec_hash() -> None:
    m = manifest()
    labels = m["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "kctl-train"
    assert labels["app.kubernetes.io/managed-by"] == "kctl-train"
    assert labels["app.kubernetes.io/instance"] == "demo"
    assert pod(m) is not None
    template_labels = m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]
    assert template_labels["app.kubernetes.io/instance"] == "demo"
    h = m["metadata"]["annotations"]["kctl-train.io/spec-hash"]
    assert len(h) == 64
    assert h == spec_hash(load_job_text(HEAD).job)
    assert h != manifest("  nodes: 2\n")["metadata"]["annotations"]["kctl-train.io/spec-hash"]


def test_user_labels_cannot_replace_ours() -> None:
    text = HEAD.replace(
        "  namespace: ml\n",
        "  namespace: ml\n  labels:\n    app.kubernetes.io/managed-by: helm\n    team: a\n",
    )
    labels = render(load_job_text(text).job)["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "kctl-train"
    assert labels["team"] == "a"


def test_render_is_deterministic() -> None:
    text = HEAD + "  nodes: {min: 1, max: 3}\n  env: {Z: '1', A: '2', M: '3'}\n"
    first = to_yaml(render(load_job_text(text).job))
    for _ in range(3):
        assert to_yaml(render(load_job_text(text).job)) == first
    # Key order in the input does not leak into the output either.
    reordered = HEAD + "  env: {M: '3', A: '2', Z: '1'}\n  nodes: {max: 3, min: 1}\n"
    assert to_yaml(render(load_job_text(reordered).job)) == first


def test_gpu_toleration_keys() -> None:
    assert gpu_toleration_key("nvidia.com/gpu") == "nvidia.com/gpu"
    assert gpu_toleration_key("nvidia.com/mig-1g.10gb") == "nvidia.com/gpu"
    assert gpu_toleration_key("amd.com/gpu") == "amd.com/gpu"
