"""Any Trainer v2 runtime, run locally as Trainer v2.3 and JobSet v0.12 build its pods
(controlplane/trainjob_pods.py; docs/TRAINJOB.md "The controllers' rules" cites the Go source of
each rule). The tables use Kubeflow's own v2.3.0 runtimes from ../shared/schemas, read as
the CRD tests read the CRDs: missing, they fail under CI=true and skip elsewhere."""

from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client.controlplane import lifecycle as lc
from operator_client.controlplane.trainjob_pods import TORCH_PORT
from operator_client.controlplane.workload import WorkloadError, workload_of
from operator_client.kubeflow.manifest_files import ManifestFileError
from operator_client.kubeflow.runtime_files import load_runtimes
from operator_client.kubeflow.webhook import trainjob_errors

from .conftest import job_yaml
from .crd import SCHEMAS

TRAINER = SCHEMAS / "trainer-v2.3.0"
TORCH = TRAINER / "torch_distributed.yaml"
RUNTIMES = TRAINER / "runtimes"
KCTL = str(Path(sys.executable).parent / "kctl-train")


def shared(path: Path) -> Path:
    if not path.exists():
        reason = f"{path} not found (a copy of shared/ belongs at ../shared)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def runtime(path: Path) -> dict[str, Any]:
    (found,) = load_runtimes([shared(path)]).values()
    return found


def trainjob(runtime_name: str, **spec: Any) -> dict[str, Any]:
    """A TrainJob as a user or the Kubeflow SDK writes it."""
    body: dict[str, Any] = {"runtimeRef": {"name": runtime_name}}
    body.update(spec)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "default"},
        "spec": body,
    }


def pods_of(manifest: dict[str, Any], *runtimes: dict[str, Any]) -> Any:
    return workload_of(manifest, {r["metadata"]["name"]: r for r in runtimes})


TRAINER_SPEC = {"image": "me/train:1", "command": ["train"], "numNodes": 2}


def test_torch_distributed_as_shipped_gets_the_torch_plugins_env_and_port() -> None:
    """torch.go: PET_* into container `node` of the trainer's Job, containerPort 29500."""
    workload = pods_of(trainjob("torch-distributed", trainer=TRAINER_SPEC), runtime(TORCH))
    assert [p for p, _, _ in workload.pods()] == ["tj-node-0-0", "tj-node-0-1"]
    container = workload.container("node")
    assert container["image"] == "me/train:1" and container["command"] == ["train"]
    assert {"containerPort": TORCH_PORT} in container["ports"]
    assert workload.operator_env("node", 1) == {
        "JOB_COMPLETION_INDEX": "1",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",  # no resources anywhere: 1 (the real plugin's, tests/fidelity)
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "tj-node-0-0.tj",
        "PET_MASTER_PORT": "29500",
    }


def test_initializers_run_first_in_depends_on_order_and_take_spec_initializer() -> None:
    """The ancestor label decides which Job takes what: `trainer` the TrainJob's trainer,
    the initializers spec.initializer (constants.go; jobset/builder.go)."""
    llama = copy.deepcopy(runtime(RUNTIMES / "llama3_2_1B.yaml"))
    # Its PVCs are refused locally (test below); the order of its Jobs is what counts here,
    # with an emptyDir where JobSet would mount the claim.
    del llama["spec"]["template"]["spec"]["volumeClaimPolicies"]
    for job in llama["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["volumes"] = [{"name": "initializer", "emptyDir": {}}]
    dataset_given = {"storageUri": "hf://mine/data", "env": [{"name": "B", "value": "2"}]}
    manifest = trainjob(
        "torchtune-llama3.2-1b",
        trainer={"numNodes": 1, "env": [{"name": "A", "value": "1"}]},
        initializer={"dataset": dataset_given},
    )
    workload = pods_of(manifest, llama)
    order = [g.type for g in workload.groups]
    assert order == ["dataset-initializer", "model-initializer", "node"]
    assert workload.group("node").depends_on == (
        ("dataset-initializer", "Complete"),
        ("model-initializer", "Complete"),
    )
    dataset = workload.container("dataset-initializer")
    assert dataset["env"] == [
        {"name": "STORAGE_URI", "value": "hf://mine/data"},
        {"name": "B", "value": "2"},
    ]
    assert {"name": "A", "value": "1"} in workload.container("node")["env"]  # trainer: node
    # Initializers get JOB_COMPLETION_INDEX only (Kubernetes'); PET_* is the trainer's.
    assert workload.operator_env("model-initializer", 0) == {"JOB_COMPLETION_INDEX": "0"}
    # The node Job starts once both initializers' pods succeeded, not before.
    pods = lc.replicas_of(workload)
    assert lc.startable(workload.groups, pods, []) == order[:2]

    def phase(of: str, value: str, replicas: list[lc.ReplicaState]) -> list[lc.ReplicaState]:
        return [replace(r, phase=value) if r.type == of else r for r in replicas]

    done = phase("model-initializer", lc.DONE, phase("dataset-initializer", lc.DONE, pods))
    assert (
        lc.startable(workload.groups, phase("model-initializer", lc.ACTIVE, done), order[:2]) == []
    )
    assert lc.startable(workload.groups, done, order[:2]) == ["node"]


def test_a_runtime_with_volume_claims_is_refused_locally() -> None:
    llama = runtime(RUNTIMES / "llama3_2_1B.yaml")
    with pytest.raises(WorkloadError, match="volumeClaimPolicies: JobSet makes"):
        pods_of(trainjob("torchtune-llama3.2-1b", trainer={"numNodes": 1}), llama)


def test_an_mpi_runtime_is_refused_locally_with_the_reason() -> None:
    deepspeed = runtime(RUNTIMES / "deepspeed_distributed.yaml")
    with pytest.raises(WorkloadError, match=r"MPI policy.*SSH"):
        pods_of(trainjob("deepspeed-distributed", trainer=TRAINER_SPEC), deepspeed)


@pytest.mark.parametrize(
    ("file", "words"), [("jax_distributed.yaml", "JAX_"), ("xgboost_distributed.yaml", "DMLC_")]
)
def test_a_runtime_whose_plugin_env_is_not_modelled_is_refused_locally(
    file: str, words: str
) -> None:
    """The real jax and xgboost plugins add their own variables and port (tests/fidelity
    recorded them); a local run would lack them, so it is refused, not run differently."""
    found = runtime(RUNTIMES / file)
    manifest = trainjob(found["metadata"]["name"], trainer=TRAINER_SPEC)
    with pytest.raises(WorkloadError, match=rf"policy: its plugin sets {words}"):
        pods_of(manifest, found)


def plain(name: str = "plain", **network: Any) -> dict[str, Any]:
    """torch-distributed without its torch policy (and with a JobSet network)."""
    found = copy.deepcopy(runtime(TORCH))
    found["metadata"]["name"] = name
    found["spec"]["mlPolicy"] = {"numNodes": 1}
    if network:
        found["spec"]["template"]["spec"]["network"] = network
    return found


def test_jobset_network_subdomain_and_dns_hostnames_are_honoured() -> None:
    """jobset_controller.go: the Service (and pods' subdomain) is network.subdomain, else
    the JobSet's name; enableDNSHostnames: false gives pods no DNS names. The torch
    plugin's PET_MASTER_ADDR keeps the TrainJob's name (torch.go), as on a cluster."""
    torch = runtime(TORCH)
    renamed = copy.deepcopy(torch)
    renamed["spec"]["template"]["spec"]["network"] = {"subdomain": "svc"}
    workload = pods_of(trainjob("torch-distributed", trainer=TRAINER_SPEC), renamed)
    assert workload.pod_spec("node")["subdomain"] == "svc"
    assert workload.dns_names("tj-node-0-1") == ("tj-node-0-1", "tj-node-0-1.svc")
    assert workload.operator_env("node", 0)["PET_MASTER_ADDR"] == "tj-node-0-0.tj"
    hidden = plain(enableDNSHostnames=False)
    assert pods_of(trainjob("plain", trainer=TRAINER_SPEC), hidden).dns_names("tj-node-0-0") == ()


def test_zero_nodes_make_no_pods() -> None:
    workload = pods_of(trainjob("torch-distributed", trainer={"numNodes": 0}), runtime(TORCH))
    assert workload.pods() == [] and workload.group("node").count == 0


# The webhook's runtimePatches rules (plugins/jobset/jobset.go, Validate) and the CRD's
# integer type for numProcPerNode (trainer.kubeflow.org_trainjobs.yaml).
def patch(job: str, container: dict[str, Any]) -> dict[str, Any]:
    pod = {"spec": {"containers": [container]}}
    rjob = {"name": job, "template": {"spec": {"template": pod}}}
    return {
        "manager": "example.com/me",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [rjob]}}},
    }


@pytest.mark.parametrize(
    ("patches", "refusal"),
    [
        ([patch("node", {"name": "node", "env": [{"name": "X", "value": "1"}]})],
         "must not have envs for the dataset-initializer, model-initializer, node containers"),
        # The webhook checks the patched runtime, so a new Job passes it; its Job does not
        # pass the API server (tests/fidelity: tj-patch-unknown-job).
        ([patch("launcher", {"name": "node"})],
         'Job.batch "tj-launcher-0" is invalid: spec.template.spec.containers\\[0\\].image: '
         "Required value"),
    ],
)  # fmt: skip
def test_runtime_patches_the_webhook_or_the_api_server_refuses(
    patches: list[Any], refusal: str
) -> None:
    manifest = trainjob("torch-distributed", trainer=TRAINER_SPEC, runtimePatches=patches)
    with pytest.raises(WorkloadError, match=refusal):
        pods_of(manifest, runtime(TORCH))


def test_a_runtime_patch_may_add_a_container() -> None:
    """Admitted as on a cluster; a local run then names it as a container it does not run
    (backends/local/admission.py)."""
    sidecar = [patch("node", {"name": "sidecar", "image": "x"})]
    manifest = trainjob("torch-distributed", trainer=TRAINER_SPEC, runtimePatches=sidecar)
    containers = pods_of(manifest, runtime(TORCH)).pod_spec("node")["containers"]
    assert [c["name"] for c in containers] == ["node", "sidecar"]


def test_a_runtime_patch_merges_as_the_controller_merges() -> None:
    """Tolerations are replaced, schedulingGates merge by name, a null is "not set", and
    the TrainJob's env entry replaces the runtime's whole (never value and valueFrom)."""
    torch = copy.deepcopy(runtime(TORCH))
    pod = torch["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["tolerations"] = [{"key": "a"}]
    pod["spec"]["schedulingGates"] = [{"name": "g1"}]
    pod["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "default"}]
    tweak = patch("node", {"name": "node"})
    spec = tweak["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    spec["template"]["spec"]["template"]["spec"].update(
        tolerations=[{"key": "b"}], schedulingGates=[{"name": "g2"}], nodeSelector=None
    )
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    trainer = {**TRAINER_SPEC, "env": [secret]}
    workload = pods_of(
        trainjob("torch-distributed", trainer=trainer, runtimePatches=[tweak]), torch
    )
    pod_spec = workload.pod_spec("node")
    assert pod_spec["tolerations"] == [{"key": "b"}]
    assert pod_spec["schedulingGates"] == [{"name": "g1"}, {"name": "g2"}]
    assert "nodeSelector" not in pod_spec
    assert workload.container("node")["env"] == [secret]


@pytest.mark.parametrize(
    ("trainer", "error"),
    [
        ({"numProcPerNode": "auto"},
         'spec.trainer.numProcPerNode in body must be of type integer: "string"'),
        ({"numNodes": 1.5}, 'spec.trainer.numNodes in body must be of type integer: "number"'),
    ],
)  # fmt: skip
def test_strings_where_the_crd_wants_integers_are_clean_errors(
    trainer: dict[str, Any], error: str
) -> None:
    assert any(error in e for e in trainjob_errors(trainjob("torch-distributed", trainer=trainer)))


def test_runtime_files_name_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("kind: TrainJob\n")
    with pytest.raises(ManifestFileError, match="document 1: kind 'TrainJob' is not a"):
        load_runtimes([tmp_path / "job.yaml"])
    with pytest.raises(ManifestFileError, match="no such file"):
        load_runtimes([tmp_path / "nope.yaml"])
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(ManifestFileError, match="not a regular file"):
        load_runtimes([tmp_path / "fifo.yaml"])
    twice = shared(RUNTIMES)
    found = load_runtimes([twice])
    assert "deepspeed-distributed" in found and "jax-distributed" in found
    with pytest.raises(ManifestFileError, match="also defined in"):
        load_runtimes([twice, RUNTIMES / "jax_distributed.yaml"])


# End to end: the CLI, the supervisor, torchrun, Lightning, collect.


def kctl(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KCTL_TRAIN_HOME": str(cwd / "home"), "NO_COLOR": "1"}
    return subprocess.run(
        [KCTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


JOB = """  operator: trainjob
  train:
    model: operator_client.examples.regression:RegressionModel
    data: operator_client.examples.regression:RegressionData
    trainer: {max_steps: 40, log_every_n_steps: 10}
  nodes: 2
  checkpoint: {every: 20 steps, keep: 1}
"""


def test_kubeflows_torch_distributed_runs_the_model_locally_and_collects_every_row(
    tmp_path: Path,
) -> None:
    """The runtime file as shipped, a TrainJob naming it (rendered, then its runtimeRef
    edited, as a user of Kubeflow's runtimes would): trained, collected, every row once."""
    pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")
    # A store both nodes share (apply of a job file picks one; a TrainJob names its own).
    store = f"  storage: {{uri: '{(tmp_path / 'store').as_uri()}'}}\n"
    (tmp_path / "job.yaml").write_text(job_yaml("tdist", JOB + store))
    rendered = kctl("render", "job.yaml", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    manifest = yaml.safe_load(rendered.stdout)
    manifest["spec"]["runtimeRef"]["name"] = "torch-distributed"
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump(manifest))
    doctor = kctl("doctor", "tj.yaml", "--local", "--runtime", str(shared(TORCH)), cwd=tmp_path)
    assert "runtime: torch-distributed (given with --runtime)" in doctor.stdout + doctor.stderr
    out = kctl("apply", "tj.yaml", "--local", "--runtime", str(TORCH), "--wait", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trainjob.trainer.kubeflow.org/tdist created" in out.stdout
    status = json.loads(kctl("status", "tdist", "--local", "-o", "json", cwd=tmp_path).stdout)
    assert [c["type"] for c in status["status"]["conditions"]] == ["Complete"]
    with (tmp_path / "results/tdist/outputs/val/all.csv").open(newline="") as fh:
        rows = [(r["epoch"], r["sample"]) for r in csv.DictReader(fh)]
    assert len(rows) == 240 == len(set(rows))  # every validation sample once


def test_a_hand_written_trainjob_runs_its_initializer_first_and_a_plain_runtime_no_pet(
    tmp_path: Path,
) -> None:
    """A TrainJob as the SDK writes one, against a test copy of Kubeflow's
    torch-distributed-with-cache (the initializer's image and command replaced: it would
    download) without its torch policy: the initializer runs to completion first, with its
    downward-API env; the node's env has JOB_COMPLETION_INDEX and no PET_*."""
    found = copy.deepcopy(runtime(RUNTIMES / "torch_distributed_with_cache.yaml"))
    found["spec"]["mlPolicy"] = {"numNodes": 1}
    init = found["spec"]["template"]["spec"]["replicatedJobs"][0]
    container = init["template"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [
        sys.executable, "-c", "import os; print('initializing for', os.environ['TRAIN_JOB_NAME'])"
    ]  # fmt: skip
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(found))
    show = "env | sort; echo started-after-init"
    job = trainjob(
        "torch-distributed-with-cache",
        trainer={"image": "x", "command": ["sh", "-c", show], "numNodes": 2},
    )
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump(job))
    out = kctl(
        "apply", "tj.yaml", "--local", "--runtime", "runtime.yaml", "--wait", "--no-collect",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    status = json.loads(kctl("status", "tj", "--local", "-o", "json", cwd=tmp_path).stdout)
    jobs = {j["name"]: j["succeeded"] for j in status["status"]["jobsStatus"]}
    assert jobs == {"dataset-initializer": 1, "node": 1}
    logs = kctl("logs", "tj", "--local", cwd=tmp_path).stdout
    assert "initializing for tj" in logs
    node = [line for line in logs.splitlines() if line.startswith("[node-0-1]")]
    assert "[node-0-1] JOB_COMPLETION_INDEX=1" in node and "[node-0-1] TRAIN_JOB_NAME=tj" in node
    assert not [line for line in node if "PET_" in line]


def test_with_a_context_the_runtime_and_secrets_come_from_that_cluster(tmp_path: Path) -> None:
    """`apply --local --context C`: the runtime the TrainJob names and the Secret its pods
    read, given by no file, are read from the cluster (here the test API server)."""
    from .fake_apiserver import FakeApiServer

    api = FakeApiServer()
    try:
        api.state.other_crds.add("trainjobs.trainer.kubeflow.org")
        api.state.objects[("clustertrainingruntimes", "torch-distributed")] = runtime(TORCH)
        api.state.objects[("secrets", "creds")] = {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
            "data": {"token": "czNjcjN0"},
        }  # fmt: skip
        secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
        job = trainjob(
            "torch-distributed",
            trainer={"command": ["sh", "-c", "echo token=$TOKEN"], "env": [secret]},
        )
        (tmp_path / "tj.yaml").write_text(yaml.safe_dump(job))
        where = ["--kubeconfig", str(api.kubeconfig(tmp_path)), "--context", "fake"]
        doctor = kctl("doctor", "tj.yaml", "--local", *where, cwd=tmp_path)
        said = doctor.stdout + doctor.stderr
        assert "from the cluster: torch-distributed (runtime)" in said, said
        assert "from the cluster: Secret creds" in said
        out = kctl("apply", "tj.yaml", "--local", *where, "--wait", "--no-collect", cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        logs = kctl("logs", "tj", "--local", cwd=tmp_path).stdout
        assert "token=s3cr3t" in logs
    finally:
        api.stop()
