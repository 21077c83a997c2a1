"""The Kubernetes backend through the real `kubernetes` client, against the loopback test
fixture in fake_apiserver.py (no API server can run here): what our code sends (content
types, field manager, dryRun, watch parameters) and how it reacts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from operator_client.cli.main import main
from operator_client.render import render
from operator_client.spec import load_job_text

from .conftest import ROOT, job_yaml
from .fake_apiserver import FakeApiServer
from .test_collect import make_run

LABEL = "training.kubeflow.org/job-name"
REPLICATED = "jobset.sigs.k8s.io/replicatedjob-name"


def write(tmp_path: Path, name: str = "train", extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(job_yaml(name, f"  command: [python, train.py]\n  nodes: 2\n{extra}"))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def patches(api: FakeApiServer) -> list[Any]:
    return [r for r in api.state.requests if r.method == "PATCH"]


def pod(name: str, phase: str = "Running", **status: Any) -> dict[str, Any]:
    job = name.rsplit("-", 2)[0]
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {LABEL: job}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, **status},
    }


def test_apply_is_a_server_side_apply_and_reapply_is_a_no_op(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[:2] == (
        0,
        "pytorchjob.kubeflow.org/train created (server-side)\n",
    )
    (request,) = patches(api)
    assert request.content_type == "application/apply-patch+yaml"
    assert request.query == {"fieldManager": "kctl-train"}
    assert request.path == "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/train"
    assert request.body == render(load_job_text(path.read_text()).job)
    assert "unchanged" in run(capsys, "apply", str(path))[1]
    write(tmp_path, extra="  fault: {backoffLimit: 2}\n")
    assert "configured" in run(capsys, "apply", str(path))[1]


def test_server_dry_run_stores_nothing(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "apply", str(write(tmp_path)), "--dry-run=server", "-o", "json")
    assert code == 0 and '"kind": "PyTorchJob"' in out and "server dry run" in err
    assert patches(api)[0].query["dryRun"] == "All"
    assert api.state.jobs == {}


def test_client_dry_run_needs_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    code, out, _ = run(capsys, "apply", str(write(tmp_path)), "--dry-run=client")
    assert code == 0 and "kind: PyTorchJob" in out


def test_conflicts_name_the_fields_and_managers(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[0] == 0
    # Someone edits the job with kubectl (another field manager).
    from kubernetes import client

    from operator_client.backends.kubernetes.api import connect

    other = render(load_job_text(path.read_text()).job)
    other["spec"]["runPolicy"]["backoffLimit"] = 1
    custom = client.CustomObjectsApi(connect())
    custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "train",
        other,
        field_manager="kubectl",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    write(tmp_path, extra="  fault: {backoffLimit: 3}\n")
    code, _, err = run(capsys, "apply", str(path))
    assert code == 1
    assert '.spec.runPolicy.backoffLimit: conflict with "kubectl"' in err
    assert "--force-conflicts" in err
    assert run(capsys, "apply", str(path), "--force-conflicts")[0] == 0
    assert patches(api)[-1].query["force"] == "True"


def test_changing_an_immutable_field_says_what_to_do(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[0] == 0
    api.state.immutable = 'PyTorchJob.kubeflow.org "train" is invalid: spec: field is immutable'
    write(tmp_path, extra="  fault: {backoffLimit: 3}\n")
    code, _, err = run(capsys, "apply", str(path))
    assert (
        code == 1 and "cannot change on an existing job" in err and "kctl-train delete train" in err
    )


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda s: setattr(s, "crd_installed", False), "install the training-operator v1.9.4"),
        (lambda s: s.namespaces.clear(), "kubectl create namespace default"),
        (lambda s: s.denied.add(("create", "pytorchjobs", "")), "you may not create pytorchjobs"),
    ],
)
def test_preflight_errors_stop_the_apply(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: Any, message: str
) -> None:
    setup(api.state)
    code, _, err = run(capsys, "apply", str(write(tmp_path)))
    assert code == 1 and message in err and "not applied" in err
    assert patches(api) == []


def test_doctor_checks_secrets_service_accounts_and_gpu_nodes(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api.state.namespaces.add("imaging")
    api.state.nodes = [
        {
            "metadata": {
                "name": "n1",
                "labels": {"agentpool": "gpu", "kubernetes.azure.com/accelerator": "nvidia"},
            },
            "status": {"allocatable": {"nvidia.com/gpu": "1"}},
        }
    ]
    code, _, err = run(capsys, "doctor", str(ROOT / "examples/aks-a100.yaml"))
    assert code == 1
    assert "Secret minio-credentials does not exist in namespace imaging" in err
    assert "allocatable nvidia.com/gpu" in err or "no node matches" in err
    api.state.secrets.add("minio-credentials")
    api.state.service_accounts.add("trainer")
    code, _, err = run(capsys, "doctor", str(ROOT / "examples/aks-a100.yaml"))
    assert "Secret minio-credentials" not in err


def operator(api: FakeApiServer, *steps: tuple[float, Any]) -> threading.Thread:
    """Play the training-operator: after each delay, apply a change to the fake state."""

    def play() -> None:
        deadline = time.monotonic() + 10
        while ("default", "train") not in api.state.jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        for delay, step in steps:
            time.sleep(delay)
            step()

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def test_wait_follows_conditions_and_shows_why_pods_are_stuck(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = pod(
        "train-worker-0",
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    )
    api.state.pod_events["train-master-0"] = [
        {"type": "Normal", "reason": "Scheduled", "message": "assigned"},
        {"type": "Warning", "reason": "FailedMount", "message": 'secret "s3" not found'},
    ]
    thread = operator(
        api,
        (0.2, lambda: api.set_conditions("default", "train", "Created", "Running")),
        (0.1, lambda: api.state.pods.extend([pod("train-master-0", "Pending"), stuck])),
        (2.5, lambda: api.set_conditions("default", "train", "Created", "Running", "Succeeded")),
    )
    code, _, err = run(capsys, "apply", str(write(tmp_path)), "--wait")
    thread.join()
    assert code == 0, err
    assert "Running: PyTorchJob train is running." in err
    assert (
        "train-worker-0: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        in err
    )
    assert "Succeeded: PyTorchJob train is succeeded." in err
    assert 'train-master-0: FailedMount: secret "s3" not found' in err
    assert "Scheduled" not in err  # Normal events are not news
    watches = [r for r in api.state.requests if r.query.get("watch", "").lower() == "true"]
    assert watches and all(
        r.query.get("resourceVersion") and r.query.get("timeoutSeconds") for r in watches
    )
    assert all(r.query["fieldSelector"] == "metadata.name=train" for r in watches)


@pytest.mark.parametrize("trouble", ["gone", "drop"])
def test_wait_survives_expired_and_dropped_watches(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], trouble: str
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    if trouble == "gone":
        api.state.oldest_rv = 10**9  # every watch from an old resourceVersion gets 410
        thread = operator(
            api,
            (0.5, lambda: setattr(api.state, "oldest_rv", 0)),
            (0.3, lambda: api.set_conditions("default", "train", "Created", "Succeeded")),
        )
    else:
        api.state.drop_watch_after = 1
        thread = operator(
            api,
            (0.3, lambda: api.set_conditions("default", "train", "Created", "Running")),
            (0.5, lambda: api.set_conditions("default", "train", "Created", "Succeeded")),
        )
    code, _, err = run(capsys, "wait", "train", "--timeout", "20")
    thread.join()
    assert code == 0, err


def test_a_failed_job_shows_the_reason_and_the_failing_pods_last_lines(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oom = pod(
        "train-master-0",
        "Failed",
        containerStatuses=[
            {
                "name": "pytorch",
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ],
    )
    api.state.logs["train-master-0"] = [f"line {i}" for i in range(100)] + ["CUDA out of memory"]
    thread = operator(
        api,
        (0.1, lambda: api.state.pods.append(oom)),
        (0.2, lambda: api.set_conditions("default", "train", "Created", "Failed")),
    )
    code, _, err = run(capsys, "apply", str(write(tmp_path)), "--wait")
    thread.join()
    assert code == 1
    assert "error: Failed: PyTorchJob train is failed." in err
    assert "OOMKilled (exit code 137): raise resources.memory" in err
    assert "CUDA out of memory" in err and "line 50" not in err  # the last lines only


def test_logs_of_every_replica_with_prefixes(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0  # logs are a job's, as locally
    api.set_conditions("default", "train", "Created", "Succeeded")  # -f ends with the job
    api.state.pods = [pod("train-master-0"), pod("train-worker-0")]
    api.state.logs = {"train-master-0": ["m1", "m2"], "train-worker-0": ["w1"]}
    api.state.previous_logs = {"train-worker-0": ["before the restart"]}
    code, out, _ = run(capsys, "logs", "train", "-f")
    assert code == 0
    assert sorted(out.splitlines()) == ["[master-0] m1", "[master-0] m2", "[worker-0] w1"]
    assert run(capsys, "logs", "train", "--replica", "worker-0")[1] == "w1\n"
    assert (
        run(capsys, "logs", "train", "--replica", "worker-0", "--previous")[1]
        == "before the restart\n"
    )
    follows = [
        r
        for r in api.state.requests
        if r.path.endswith("/log") and r.query.get("follow", "").lower() == "true"
    ]
    assert {r.query["container"] for r in follows} == {"pytorch"}
    code, _, err = run(capsys, "logs", "train", "--replica", "worker-9")
    assert code == 2 and "master-0, worker-0" in err


def test_following_logs_continues_after_a_container_restart(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "apply", str(write(tmp_path, extra="")))[0] == 0
    api.set_conditions("default", "train", "Created", "Running")
    worker = pod("train-worker-0", containerStatuses=[{"name": "pytorch", "restartCount": 0}])
    api.state.pods = [worker]
    api.state.logs = {"train-worker-0": ["before"]}

    def restart() -> None:
        api.state.logs["train-worker-0"] = ["after"]
        worker["status"]["containerStatuses"][0]["restartCount"] = 1

    thread = operator(
        api,
        (0.3, restart),
        (2.5, lambda: api.set_conditions("default", "train", "Created", "Running", "Succeeded")),
    )
    code, out, _ = run(capsys, "logs", "train", "-f", "--replica", "worker-0")
    thread.join()
    assert code == 0
    assert out.splitlines() == ["before", "--- train-worker-0 restarted (restart 1) ---", "after"]


def test_status_list_and_delete(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    api.set_conditions("default", "train", "Created", "Running")
    api.state.pods = [
        pod(
            "train-master-0",
            containerStatuses=[{"name": "pytorch", "restartCount": 2, "state": {"running": {}}}],
        ),
        pod(
            "train-worker-0",
            "Pending",
            containerStatuses=[
                {
                    "name": "pytorch",
                    "image": "img:1",
                    "state": {"waiting": {"reason": "ImagePullBackOff"}},
                }
            ],
        ),
    ]
    code, out, _ = run(capsys, "status", "train")
    assert code == 0 and "pytorchjob/train  Running" in out
    assert "cannot pull image img:1" in out
    code, out, _ = run(capsys, "list")
    assert out.splitlines()[1].split()[1:6] == ["train", "PyTorchJob", "Running", "2", "2"]
    code, out, _ = run(capsys, "delete", "train", "--wait")
    assert code == 0 and "deleted" in out
    (request,) = [r for r in api.state.requests if r.method == "DELETE"]
    assert request.query["propagationPolicy"] == "Foreground"
    code, _, err = run(capsys, "delete", "train")
    assert code == 1 and "not found" in err
    assert run(capsys, "delete", "train", "--ignore-not-found")[0] == 0


def test_collect_finds_the_run_through_the_jobs_annotations(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_uri = (tmp_path / "bucket").as_uri()
    path = write(tmp_path, extra=f"  storage: {{uri: '{store_uri}'}}\n")
    assert run(capsys, "apply", str(path))[0] == 0
    from operator_client.storage import open_store

    make_run(open_store(f"{store_uri}/default/train/"), tmp_path)
    code, out, err = run(capsys, "collect", "train", "--to", str(tmp_path / "got"))
    assert code == 0, err
    assert (tmp_path / "got/checkpoints/step-000000000040/model.ckpt").is_file()
    assert "final val_loss" in out


def test_no_kubeconfig_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run(capsys, "status", "train")
    assert code == 1 and "no usable Kubernetes configuration" in err and "--local" in err


TRAINER_CRDS = {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"}


@pytest.mark.parametrize(
    ("setup", "argv", "expected"),
    [
        # a PyTorchJob for a cluster that runs Trainer v2 only: say which operator to use
        (
            lambda s: (s.__setattr__("crd_installed", False), s.other_crds.update(TRAINER_CRDS)),
            [],
            "this cluster runs Kubeflow Trainer v2 instead: render for it with --operator trainjob",
        ),
        # a TrainJob for a cluster that runs the training-operator only
        ((lambda s: None), ["--operator", "trainjob"], "use --operator pytorchjob"),
        # Trainer v2 without kctl-train's runtime: which runtimes there are, how to install it
        (
            lambda s: (s.other_crds.update(TRAINER_CRDS), s.runtimes.add("torch-distributed")),
            ["--operator", "trainjob"],
            "ClusterTrainingRuntime kctl-train is not installed (runtimes here: "
            "torch-distributed): kubectl apply --server-side -f "
            "manifests/trainer-v2/cluster-training-runtime.yaml",
        ),
        # Trainer without JobSet
        (
            lambda s: (
                s.other_crds.add("trainjobs.trainer.kubeflow.org"),
                s.runtimes.add("kctl-train"),
            ),
            ["--operator", "trainjob"],
            "the JobSet CRD (jobsets.jobset.x-k8s.io) is not installed",
        ),
    ],
)
def test_doctor_says_which_operator_the_cluster_runs(
    api: FakeApiServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    setup: Any,
    argv: list[str],
    expected: str,
) -> None:
    setup(api.state)
    code, _, err = run(capsys, "doctor", str(write(tmp_path)), *argv)
    assert code == 1 and expected in err, err


def test_doctor_of_a_trainjob_on_a_ready_cluster(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Both operators installed, kctl-train's runtime too: the TrainJob's Secret and the
    GPU nodes are checked as for a PyTorchJob; the PyTorchJob gets a note about Trainer."""
    api.state.other_crds.update(TRAINER_CRDS)
    api.state.runtimes.add("kctl-train")
    api.state.namespaces.add("imaging")
    example = str(ROOT / "examples/aks-a100.yaml")
    code, _, err = run(capsys, "doctor", example, "--operator", "trainjob")
    assert code == 1 and "Secret minio-credentials does not exist in namespace imaging" in err
    assert "CRD" not in err and "ClusterTrainingRuntime" not in err
    api.state.secrets.add("minio-credentials")
    api.state.service_accounts.add("trainer")
    api.state.nodes = [
        {
            "metadata": {"name": "n1", "labels": {"kubernetes.azure.com/agentpool": "a100pool"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
    ]
    code, out, err = run(capsys, "doctor", example, "--operator", "trainjob")
    assert (code, out.strip()) == (
        0,
        "trainjob/segmentation: the kubernetes backend is ready for it",
    ), err
    code, _, err = run(capsys, "doctor", example)
    assert "also runs Kubeflow Trainer v2 (TrainJob): --operator trainjob renders for it" in err


def test_a_trainjob_is_applied_followed_and_deleted_as_a_trainjob(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its own API path, the TrainJob's conditions and jobsStatus, its JobSet's pods, and
    a delete of the TrainJob itself (never only its JobSet: Trainer would rerun it)."""
    api.state.other_crds.update(TRAINER_CRDS)
    api.state.runtimes.add("kctl-train")
    path = write(tmp_path, extra="  operator: trainjob\n")
    assert run(capsys, "apply", str(path))[:2] == (
        0,
        "trainjob.trainer.kubeflow.org/train created (server-side)\n",
    )
    (request,) = patches(api)
    assert request.path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/train"
    assert request.body["kind"] == "TrainJob"
    jobset = {"jobset.sigs.k8s.io/jobset-name": "train"}
    api.state.pods = [
        # A pod of another replicated Job of the JobSet is not a trainer pod.
        {**pod("train-node-0-0-ab12c"), "metadata": {"name": "train-node-0-0-ab12c",
         "namespace": "default", "labels": {**jobset, REPLICATED: "node"}}},
        {**pod("train-init-0-0-zz9yy"), "metadata": {"name": "train-init-0-0-zz9yy",
         "namespace": "default", "labels": {**jobset, REPLICATED: "dataset-initializer"}}},
    ]  # fmt: skip
    api.set_conditions("default", "train", "Created", "Running")
    code, out, _ = run(capsys, "status", "train")
    assert code == 0 and out.startswith("trainjob/train  Running")
    assert "node-0-0" in out and "init" not in out
    api.set_conditions("default", "train", "Succeeded")
    code, out, _ = run(capsys, "status", "train")
    assert "Succeeded" in out and "Complete: jobset completed successfully" in out
    assert out.split()[2] != "-"  # its age: from its creation to its final condition
    assert run(capsys, "delete", "train")[:2] == (
        0,
        "trainjob.trainer.kubeflow.org/train deleted (kubernetes)\n",
    )
    (deleted,) = [r for r in api.state.requests if r.method == "DELETE"]
    assert deleted.path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/train"
    assert deleted.query["propagationPolicy"] == "Foreground"
    gone_within(api, 5)


def gone_within(api: FakeApiServer, seconds: float) -> None:
    """A foreground deletion: the job goes once its pods are gone."""
    deadline = time.monotonic() + seconds
    while api.state.jobs:
        assert time.monotonic() < deadline, api.state.jobs
        time.sleep(0.05)


def test_a_cluster_without_trainer_lists_its_pytorchjobs(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    code, out, _ = run(capsys, "status")
    assert code == 0 and "train" in out  # the TrainJob list's 404 means none
    code, _, err = run(capsys, "status", "other")
    assert code == 1 and "other" in err


def test_a_trainer_only_cluster_lists_its_trainjobs_and_one_without_either_says_so(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.state.crd_installed = False
    api.state.other_crds.update(TRAINER_CRDS)
    api.state.runtimes.add("kctl-train")
    assert run(capsys, "apply", str(write(tmp_path, extra="  operator: trainjob\n")))[0] == 0
    code, out, _ = run(capsys, "status")
    assert code == 0 and out.splitlines()[1].split()[1:3] == ["train", "TrainJob"]
    api.state.other_crds.clear()
    code, _, err = run(capsys, "status")
    assert code != 0 and "neither the PyTorchJob nor the TrainJob CRD is installed" in err


def test_pods_the_operator_could_not_create_show_why_while_they_are_missing(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's Warning events on the job (its FailedCreatePod: admission refused a
    pod) show in status while the job has fewer pods than it asks for, and only then."""
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    api.set_conditions("default", "train", "Created")
    api.state.pods.append(pod("train-master-0"))
    refused = (
        'Error creating: pods "train-worker-0" is forbidden: exceeded quota: one-pod, '
        "requested: pods=1, used: pods=1, limited: pods=1"
    )
    api.state.pod_events["train"] = [
        {"type": "Warning", "reason": "FailedCreatePod", "message": refused},
        {"type": "Warning", "reason": "FailedCreatePod", "message": refused},
    ]
    code, out, _ = run(capsys, "status", "train")
    assert code == 0
    assert out.count(f"FailedCreatePod: {refused}") == 1, out
    api.state.pods.append(pod("train-worker-0"))
    assert "FailedCreatePod" not in run(capsys, "status", "train")[1]


@pytest.mark.parametrize("flag", ["client", "server"])
def test_a_dry_run_with_o_name_prints_only_the_name(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    code, out, _ = run(capsys, "apply", str(write(tmp_path)), f"--dry-run={flag}", "-o", "name")
    assert (code, out) == (0, "pytorchjob.kubeflow.org/train\n")


def test_a_pods_times_are_read_from_its_status() -> None:
    """When a pod was made, bound and its trainer container first started (not after a
    restart: the kubelet then keeps only the newest start)."""
    from operator_client.backends.kubernetes.pod_view import replica_of as _replica
    from operator_client.kubeflow.kinds import PYTORCHJOB

    pod: dict[str, Any] = {
        "metadata": {"name": "job-master-0", "creationTimestamp": "2026-12-06T10:00:00Z"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-06T10:00:09Z"},
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-12-06T10:00:03Z",
                },
            ],
            "containerStatuses": [
                {"name": "sidecar", "restartCount": 0, "state": {"running": {"startedAt": "x"}}},
                {
                    "name": "pytorch",
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-12-06T10:00:07Z"}},
                },
            ],
        },
    }
    replica = _replica(PYTORCHJOB, "job", pod)
    made = replica.created
    assert made is not None and (replica.scheduled, replica.started) == (made + 3, made + 7)
    pod["status"]["containerStatuses"][1]["restartCount"] = 1
    assert _replica(PYTORCHJOB, "job", pod).started is None
    del pod["status"]["conditions"][1]
    assert _replica(PYTORCHJOB, "job", pod).scheduled is None


def test_image_pulls_are_read_from_the_kubelets_pulled_events() -> None:
    """The kubelet's words (pkg/kubelet/images/image_manager.go): what the pod waited,
    a serialized pull included; an image already present costs nothing; events of an
    earlier pod of the same name (another uid), or of other kinds, are not this pod's."""
    from operator_client.backends.kubernetes.pod_view import go_duration, image_pull_seconds

    def pulled(uid: str, message: str, kind: str = "Pod") -> dict[str, Any]:
        involved = {"kind": kind, "name": "job-master-0", "uid": uid}
        return {"reason": "Pulled", "involvedObject": involved, "message": message}

    pods = [{"metadata": {"name": "job-master-0", "uid": "u1"}}]
    events = [
        pulled("u1", 'Successfully pulled image "a" in 3.2s (1m4.5s including waiting). '
               "Image size: 3 bytes."),
        pulled("u1", 'Container image "b" already present on machine'),
        pulled("u0", 'Successfully pulled image "a" in 1s (1s including waiting).'),
        pulled("u1", 'Successfully pulled image "a" in 1s (1s including waiting).', "Node"),
    ]  # fmt: skip
    assert image_pull_seconds(events, pods) == {"job-master-0": 64.5}
    assert [go_duration(t) for t in ("1h2m3.5s", "512ms", "1.5µs", "3x", "")] == [
        3723.5, 0.512, 1.5e-06, None, None,
    ]  # fmt: skip


META: dict[str, Any] = {"labels": {"a": "1"}, "resourceVersion": "7"}
JOB: dict[str, Any] = {"metadata": META, "spec": {"nodes": 2}}


@pytest.mark.parametrize(
    ("after", "changed"),
    [
        (JOB, False),
        # The operator wrote the status between the read and the apply: same request.
        ({**JOB, "metadata": {**META, "resourceVersion": "9"}, "status": {}}, False),
        ({**JOB, "spec": {"nodes": 3}}, True),
        ({**JOB, "metadata": {"labels": {"a": "2"}, "resourceVersion": "8"}}, True),
        ({**JOB, "metadata": {**META, "annotations": {"b": "1"}}}, True),
    ],
)
def test_an_apply_changed_the_job_only_if_what_it_asks_for_changed(
    after: dict[str, Any], changed: bool
) -> None:
    from operator_client.backends.kubernetes.pod_view import apply_changed

    assert apply_changed(JOB, after) is changed
