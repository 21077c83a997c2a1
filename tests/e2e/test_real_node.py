"""The users' main path on the real node of `make cluster` (kubelet, containerd, runc,
CoreDNS, moto as the S3 store): `kctl-train apply examples/kind-cpu.yaml --wait
--to DIR`, the training-operator making the pods, the trainer image (`make image`)
training in them, checkpoints in S3, collect; then a pod deleted mid-training and a
`kctl-train delete` during training.

The node has two CPUs and each job takes both: these tests run one at a time
(cluster.node_to_oneself), with the other test that puts a pod there.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import ROOT
from .cluster import KCTL, NAMESPACE, Cluster, connect, eventually, missing, node_to_oneself

S3 = "http://127.0.0.1:9000"  # moto, as the host reaches it (pods: minio.minio.svc)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "moto",
    "AWS_SECRET_ACCESS_KEY": "moto-e2e",
    "AWS_REGION": "us-east-1",
}
BUCKET = "kctl-train"  # examples/kind-cpu.yaml's store: s3://kctl-train/runs


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    found = connect()
    nodes = found.get("nodes", "-l", "!type")["items"]  # the real ones (kwok's carry type)
    if not nodes:
        missing("the cluster has no real node (make cluster starts one as root, with containerd)")
    images = found.kubectl(
        "get", "node", "kctl-node", "-o", "jsonpath={.status.images[*].names}"
    ).stdout
    if "kctl-train/trainer:e2e" not in images:
        missing(
            "the trainer image is not on the node: `make image`, then `make cluster` imports it"
        )
    old = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    yield found
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _one_at_a_time() -> Iterator[None]:
    with node_to_oneself():
        yield


def _s3() -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=S3, region_name="us-east-1")


def _fresh_run(name: str) -> None:
    """The bucket exists and holds nothing of `name`'s earlier runs (which it would resume)."""
    s3 = _s3()
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    prefix = f"runs/{NAMESPACE}/{name}/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=item["Key"])


def _checkpoint_rows(name: str) -> list[dict[str, str]]:
    try:
        body = _s3().get_object(
            Bucket=BUCKET, Key=f"runs/{NAMESPACE}/{name}/metrics/checkpoints.csv"
        )
    except Exception:  # not written yet
        return []
    return list(csv.DictReader(io.StringIO(body["Body"].read().decode())))


def _long_job(tmp_path: Path, name: str, steps: int) -> Path:
    """examples/kind-cpu.yaml renamed, training longer with a checkpoint every 200 steps."""
    doc = yaml.safe_load((ROOT / "examples/kind-cpu.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["train"]["trainer"]["max_steps"] = steps
    doc["spec"]["checkpoint"]["every"] = "200 steps"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    _fresh_run(name)
    return path


def _assert_complete(out: Path, *, pods: bool = True) -> None:
    """A collected kind-cpu run: its final checkpoint, every rank's outputs, the report;
    `pods`: collected through the job (not `--from` its store), which knows its pods."""
    assert (out / "_SUCCESS").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000000000300"]
    assert (out / "checkpoints/step-000000000300/MANIFEST.json").is_file()
    with (out / "outputs/val/all.csv").open() as f:
        rows = list(csv.DictReader(f))
    # Every rank wrote its share; rank 0 aggregated them: each sample once per epoch.
    assert {r["rank"] for r in rows} == {"0", "1"}
    assert len({(r["epoch"], r["sample"]) for r in rows}) == len(rows) > 0
    assert (out / "report.png").is_file() and (out / "report.txt").is_file()
    # Every rank-second accounted, the time before each process split by what the API
    # server and the kubelet said of its pod (made, bound, started).
    goodput = json.loads((out / "summary.json").read_text())["goodput"]
    assert sum(goodput["categories"].values()) == pytest.approx(goodput["total_s"], rel=0.01)
    assert (goodput["categories"]["container_start"] > 0) is pods, goodput["categories"]


def _as_trainjob(tmp_path: Path, name: str) -> Path:
    """examples/kind-cpu.yaml for a TrainJob: renamed, and without `imagePullPolicy: Never`
    (for kind's side-loaded images), which only a runtime may set; kctl-train's runtime has
    IfNotPresent, which finds the imported image on the node just as well."""
    doc = yaml.safe_load((ROOT / "examples/kind-cpu.yaml").read_text())
    doc["metadata"]["name"] = name
    del doc["spec"]["imagePullPolicy"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    _fresh_run(name)
    return path


def _pod_names(cluster: Cluster, name: str, kind: str = "pytorchjob") -> list[str]:
    return [p["metadata"]["name"] for p in cluster.pods(name, kind=kind)]


def test_kind_cpu_trains_on_the_real_node_and_is_collected(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.kctl("delete", "kind-cpu", "-n", NAMESPACE, "--wait")
    _fresh_run("kind-cpu")
    out = tmp_path / "collected"
    applying = subprocess.Popen(
        [str(KCTL), "apply", "examples/kind-cpu.yaml", "-n", NAMESPACE, "--force-namespace",
         "--wait", "--timeout", "600", "--to", str(out), "--endpoint", S3],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.user_env, cwd=ROOT,
    )  # fmt: skip
    try:
        # Every rank's log, followed through the API server and the kubelet until the end
        # (once the job succeeds, a pod still running is cleaned up, its log with it).
        eventually(
            lambda: True if len(_pod_names(cluster, "kind-cpu")) == 2 else None, 300, "2 pods"
        )
        logs = cluster.kctl("logs", "kind-cpu", "-n", NAMESPACE, "-f", timeout=700)
        stdout, stderr = applying.communicate(timeout=700)
    finally:
        applying.kill()
    assert logs.returncode == 0, logs.stderr
    assert "[master-0]" in logs.stdout and "[worker-0]" in logs.stdout
    assert "finished at step 300" in logs.stdout
    assert applying.returncode == 0, stderr[-3000:]
    assert "Succeeded: PyTorchJob kind-cpu is successfully completed." in stderr
    assert "kind-cpu: finished at step 300" in stdout + stderr
    _assert_complete(out)
    # Applied again once finished: replaced, and the same spec finds itself finished: every
    # replica exits 0 before the rendezvous, no second attempt, nothing saved again.
    again = cluster.kctl(
        "apply", "examples/kind-cpu.yaml", "-n", NAMESPACE, "--force-namespace", "--wait",
        "--timeout", "600", "--no-collect", timeout=700,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "pytorchjob.kubeflow.org/kind-cpu replaced" in again.stdout
    logs = cluster.kctl("logs", "kind-cpu", "-n", NAMESPACE)
    assert "this spec already finished at step 300 (attempt 1)" in logs.stdout, logs.stderr
    listed = _s3().list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{NAMESPACE}/kind-cpu/attempts/")
    assert [o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", [])] == ["1.json"]
    assert {r["attempt"] for r in _checkpoint_rows("kind-cpu")} == {"1"}


def test_a_pod_deleted_mid_training_comes_back_and_the_run_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """As `kubectl delete pod` would: the operator makes the pod again, the job resumes
    from its newest committed checkpoint and finishes."""
    name = "kind-cpu-kill"
    cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
    path = _long_job(tmp_path, name, 6000)
    applied = cluster.kctl("apply", str(path), "-n", NAMESPACE, "--force-namespace")
    assert applied.returncode == 0, applied.stderr
    try:
        eventually(
            lambda: True if _checkpoint_rows(name) else None,
            300,
            f"a committed checkpoint of {name}",
        )
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, f"{name}-master-0", "--wait=false")
        done = cluster.kctl("wait", name, "-n", NAMESPACE, "--timeout", "600", timeout=700)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = _checkpoint_rows(name)
        assert rows[-1]["step"] == "6000"
        assert {r["attempt"] for r in rows} >= {"1", "2"}, rows  # the second attempt saved too
        # It resumed: its first save comes after the first attempt's last (a fresh start
        # would save the first interval's step again). Not from the logs: rank 0, which says
        # "resuming", may move to the Worker, whose pod the finished job may have removed.
        first = [int(r["step"]) for r in rows if r["attempt"] == "1"]
        second = [int(r["step"]) for r in rows if r["attempt"] == "2"]
        assert min(second) > max(first), rows
    finally:
        cluster.kctl("delete", name, "-n", NAMESPACE)


def test_delete_during_training_leaves_no_pods_and_an_emergency_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    name = "kind-cpu-stop"
    cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
    path = _long_job(tmp_path, name, 200000)
    applied = cluster.kctl("apply", str(path), "-n", NAMESPACE, "--force-namespace")
    assert applied.returncode == 0, applied.stderr
    eventually(
        lambda: True if _checkpoint_rows(name) else None, 300, f"a committed checkpoint of {name}"
    )
    started = time.monotonic()
    gone = cluster.kctl("delete", name, "-n", NAMESPACE, "--wait", timeout=300)
    assert gone.returncode == 0, gone.stderr
    assert time.monotonic() - started < 240
    # --wait returned once the job and its pods were gone; the operator's cache may still
    # make a pod for the job it has not yet seen go, which the garbage collector removes.
    eventually(lambda: True if not _pod_names(cluster, name) else None, 30, f"{name}'s pods gone")
    emergency = [r for r in _checkpoint_rows(name) if r["emergency"] == "1"]
    assert len(emergency) == 1, _checkpoint_rows(name)


def test_apply_wait_rides_out_a_control_plane_that_resets_and_hangs(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The fault proxy (tests/fault_proxy.py) in front of the real API server: while the job
    trains, every connection is reset for a while, then left unanswered, then let through;
    `apply --wait` retries, says so, and ends with the job's success."""
    from ..fault_proxy import FaultProxy

    name = "kind-cpu-faults"
    path = _long_job(tmp_path, name, 1500)
    server = yaml.safe_load(cluster.user.read_text())["clusters"][0]["cluster"]["server"]
    with FaultProxy(server.replace("https://", "http://")) as proxy:
        config = yaml.safe_load(cluster.user.read_text())
        port = proxy.endpoint.rsplit(":", 1)[1]
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        kubeconfig = tmp_path / "through-proxy.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        env = {**cluster.user_env, "KUBECONFIG": str(kubeconfig)}
        waiting = subprocess.Popen(
            [str(KCTL), "apply", str(path), "-n", NAMESPACE, "--force-namespace", "--wait",
             "--timeout", "600", "--no-collect"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            eventually(lambda: True if _pod_names(cluster, name) else None, 120, f"{name}'s pods")
            for mode in ("reset", "blackhole"):
                proxy.mode = mode
                time.sleep(8)
            proxy.mode = "pass"
            err = waiting.communicate(timeout=600)[1]
        finally:
            waiting.kill()
            cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
    assert waiting.returncode == 0, err[-3000:]
    assert "trying again" in err
    assert f"Succeeded: PyTorchJob {name} is successfully completed." in err


def test_kind_cpu_as_a_trainjob_trains_and_is_collected(cluster: Cluster, tmp_path: Path) -> None:
    """The same job through Kubeflow Trainer: the TrainJob on kctl-train's
    ClusterTrainingRuntime, its JobSet, the Job controller's indexed pods, torchrun from
    Trainer's PET_* variables; then collect."""
    name = "kind-cpu-tj"
    cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
    path = _as_trainjob(tmp_path, name)
    out = tmp_path / "collected"
    done = cluster.kctl(
        "apply", str(path), "-n", NAMESPACE, "--force-namespace", "--operator", "trainjob",
        "--wait", "--timeout", "600", "--to", str(out), "--endpoint", S3,
        timeout=700,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"trainjob.trainer.kubeflow.org/{name} created" in done.stdout
        assert "Complete: jobset completed successfully" in done.stderr
        assert f"{name}: finished at step 300" in done.stdout + done.stderr
        _assert_complete(out)
        pods = sorted(_pod_names(cluster, name, "trainjob"))
        assert [p.rsplit("-", 1)[0] for p in pods] == [f"{name}-node-0-0", f"{name}-node-0-1"]
        logs = cluster.kctl("logs", name, "-n", NAMESPACE)
        assert "[node-0-0]" in logs.stdout and "[node-0-1]" in logs.stdout, logs.stderr
    finally:
        cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")


def test_the_trainjob_runs_unchanged_on_kubeflows_torch_distributed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """On Kubeflow's own torch-distributed ClusterTrainingRuntime, installed unchanged from
    Trainer's module: the rendered TrainJob's runtime patch carries what kctl-train's runtime
    adds to it (the restricted security contexts, /tmp and /dev/shm, labels), so naming the
    other runtime is the only change, and the restricted namespace admits its pods."""
    name = "kind-cpu-td"
    cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
    spec = _as_trainjob(tmp_path, name)
    doc = yaml.safe_load(spec.read_text())
    doc["metadata"]["namespace"] = NAMESPACE  # the object, and the spec its pods read
    spec.write_text(yaml.safe_dump(doc))
    rendered = cluster.kctl("render", str(spec), "--operator", "trainjob")
    assert rendered.returncode == 0, rendered.stderr
    trainjob = yaml.safe_load(rendered.stdout)
    trainjob["spec"]["runtimeRef"]["name"] = "torch-distributed"
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(trainjob))
    done = cluster.kctl(
        "apply", str(path), "-n", NAMESPACE, "--wait", "--timeout", "600", "--no-collect",
        timeout=700,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Complete: jobset completed successfully" in done.stderr
        jobset = cluster.get("jobset", "-n", NAMESPACE, name)
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == "kctl-train/trainer:e2e"
        # torch-distributed's Job template, not kctl-train's (which sets backoffLimit: 6).
        assert "backoffLimit" not in jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
        out = tmp_path / "collected"
        collected = cluster.kctl(
            "collect", name, "-n", NAMESPACE, "--from", f"s3://{BUCKET}/runs",
            "--endpoint", S3, "--to", str(out),
        )  # fmt: skip
        assert collected.returncode == 0, collected.stderr
        _assert_complete(out, pods=False)
    finally:
        cluster.kctl("delete", name, "-n", NAMESPACE, "--wait")
