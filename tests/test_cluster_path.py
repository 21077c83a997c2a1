"""The cluster path as a real API server behaves (issue 22), through the real `kubernetes`
client against the fixture (fake_apiserver.py; docs/KUBERNETES_FIXTURE.md): a job still
terminating, a finished job applied again, a control plane that refuses connections or
sheds load, several changes on one watch stream, a Trainer too old for the TrainJob, and
a user with exactly the shipped Role."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from operator_client.backends.kubernetes import api as kube_api
from operator_client.backends.kubernetes import backend as kube_backend
from operator_client.backends.kubernetes.api import Api, connect
from operator_client.errors import ClusterError
from operator_client.render import render
from operator_client.spec import load_job_text

from .conftest import ROOT
from .fake_apiserver import FakeApiServer, allowed, request_attributes, role_rules
from .test_kubernetes_backend import TRAINER_CRDS, operator, pod, run, write
from .written import trainjob

RBAC = ROOT / "manifests/rbac/kctl-train-user.yaml"
# A store with a Secret for its keys (an unreachable endpoint: nothing is read from it here).
STORE = (
    "  storage: {uri: 's3://bucket/runs', endpoint: 'http://127.0.0.1:9', credentialsSecret: s3}\n"
)
# What the v2.2 TrainJob CRD declares in spec: no runtimePatches (it came in v2.3).
TRAINER_22_SPEC = {"runtimeRef", "initializer", "trainer", "labels", "annotations",
                   "podSpecOverrides", "suspend", "managedBy"}  # fmt: skip


def test_apply_right_after_delete_waits_for_the_terminating_job_then_creates_it(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[0] == 0
    api.state.pods = [pod("train-master-0"), pod("train-worker-0")]
    api.state.pod_linger = 1.5  # the pods' grace period: the job lingers, Terminating
    assert run(capsys, "delete", "train")[0] == 0
    assert api.state.jobs[("default", "train")]["metadata"]["finalizers"] == ["foregroundDeletion"]
    code, out, err = run(capsys, "apply", str(path))
    assert code == 0 and out == "pytorchjob.kubeflow.org/train created (server-side)\n", err
    assert "/train is terminating (deleted at" in err
    assert "waiting for it to go before applying" in err
    job = api.state.jobs[("default", "train")]
    assert "deletionTimestamp" not in job["metadata"] and api.state.pods == []


def test_a_finished_job_applied_again_is_replaced_and_the_new_run_followed(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[0] == 0
    api.set_conditions("default", "train", "Created", "Succeeded")
    code, out, err = run(capsys, "apply", str(path), "--dry-run=server")
    assert code == 0 and "is Succeeded: apply replaces it" in err, err
    assert api.state.jobs[("default", "train")]["status"]  # a dry run changes nothing

    def new_run() -> None:  # the operator starts the new object, then it succeeds
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            job = api.state.jobs.get(("default", "train"))
            if job is not None and not job.get("status"):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        api.set_conditions("default", "train", "Created", "Running")
        time.sleep(0.3)
        api.set_conditions("default", "train", "Created", "Running", "Succeeded")

    thread = threading.Thread(target=new_run, daemon=True)
    thread.start()
    code, out, err = run(capsys, "apply", str(path), "--wait", "--no-collect")
    thread.join()
    assert code == 0, err
    assert out.startswith("pytorchjob.kubeflow.org/train replaced (server-side)")
    assert "is Succeeded: replacing it" in err and "Running: PyTorchJob train is running." in err
    (deleted,) = [r for r in api.state.requests if r.method == "DELETE"]
    assert deleted.query["propagationPolicy"] == "Foreground"


def test_wait_rides_out_refused_connections_and_a_burst_of_errors(
    api: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A control plane restarted for 30 s, then shedding load: the wait goes on, and says
    what it rides out."""
    monkeypatch.setattr(kube_api, "MAX_BACKOFF", 1.0)  # the bound is not what is tested here
    path = write(tmp_path)
    thread = operator(
        api,
        (0.3, lambda: api.set_conditions("default", "train", "Created", "Running")),
        (0.5, lambda: api.refuse_for(30)),
        (31, lambda: api.fail(503, times=4)),
        (0.1, lambda: api.fail(429, times=2, retry_after=1)),
        (0.1, lambda: api.fail(500, times=1)),
        (0.5, lambda: api.set_conditions("default", "train", "Created", "Running", "Succeeded")),
    )
    code, _, err = run(capsys, "apply", str(path), "--wait", "--no-collect")
    thread.join()
    assert code == 0, err
    assert "Succeeded: PyTorchJob train is succeeded." in err
    assert "MaxRetryError; trying again in 1.0s" in err  # the refused connections
    assert "503 Service Unavailable; trying again" in err


def test_an_apply_shed_with_429_is_sent_again_after_retry_after(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """urllib3 itself retries a GET answered 429 with Retry-After, never a PATCH: the apply
    is retried by kctl-train, no sooner than the server asked."""
    api.fail(429, times=2, retry_after=2, path="pytorchjobs/train$", method="PATCH")
    code, _, err = run(capsys, "apply", str(write(tmp_path)))
    assert code == 0, err
    assert err.count("429 Too Many Requests; trying again in 2.0s") == 2, err
    patches = [r for r in api.state.requests if r.method == "PATCH"]
    assert len(patches) == 3


@pytest.mark.parametrize(("code", "times"), [(403, 1), (404, 1)])
def test_answers_are_final_not_retried(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: int, times: int
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    before = len(api.state.requests)
    api.fail(code, times=times, path="pytorchjobs/train$")
    assert run(capsys, "status", "train")[0] != 0
    gets = [r for r in api.state.requests[before:] if r.path.endswith("pytorchjobs/train")]
    assert len(gets) == 1


def test_several_changes_arrive_on_one_watch_stream(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "apply", str(write(tmp_path)))[0] == 0
    thread = operator(
        api,
        (0.5, lambda: api.set_conditions("default", "train", "Created")),
        (0.3, lambda: api.set_conditions("default", "train", "Created", "Running")),
        (0.3, lambda: api.set_conditions("default", "train", "Created", "Running", "Restarting")),
        (0.3, lambda: api.set_conditions("default", "train", "Created", "Running")),
        (0.3, lambda: api.set_conditions("default", "train", "Created", "Running", "Succeeded")),
    )
    code, _, err = run(capsys, "wait", "train")
    thread.join()
    assert code == 0, err
    assert "Restarting: PyTorchJob train is restarting." in err
    watches = [r for r in api.state.requests if r.query.get("watch", "").lower() == "true"]
    assert len(watches) == 1  # one stream, kept open across every transition


def test_a_trainer_too_old_for_the_trainjob_is_named_and_how_to_proceed(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.state.other_crds.update(TRAINER_CRDS)
    api.state.runtimes.add("kctl-train")
    api.state.declared["trainjobs"] = TRAINER_22_SPEC
    path = write(tmp_path, extra="  operator: trainjob\n")
    code, _, err = run(capsys, "apply", str(path))
    assert code == 1
    assert "the TrainJob schema this cluster serves (its CRD) does not declare " in err
    assert (
        "spec.runtimePatches" in err and "older than v2.3" in err and "--operator pytorchjob" in err
    )
    # Reading CRDs forbidden: the cluster's OpenAPI says the same.
    api.bind_role(RBAC)
    assert api.state.rbac is not None
    cluster = api.state.rbac[""]
    api.state.rbac[""] = [r for r in cluster if "customresourcedefinitions" not in r.resources]
    code, _, err = run(capsys, "doctor", str(path))
    assert code == 1 and "(the cluster's OpenAPI (reading CRDs is not allowed))" in err, err
    # And the API server's own answer, were the apply sent: its 500 in plain words.
    manifest = render(load_job_text(path.read_text()).job)
    with pytest.raises(
        ClusterError, match=r"TrainJob CRD is older than Trainer v2\.3 .*runtimePatches"
    ):
        Api(connect()).apply(manifest)


def test_a_user_with_the_shipped_role_applies_follows_and_deletes_without_a_warning(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For either kind: every request the backend makes is one the Role grants, and the
    Role grants nothing the backend does not use."""
    api.state.other_crds.update(TRAINER_CRDS)
    api.state.runtimes.add("kctl-train")
    api.state.service_accounts.add("trainer")
    api.state.nodes = [{"metadata": {"name": "n1", "labels": {}}, "status": {"allocatable": {}}}]
    api.bind_role(RBAC)
    for kind, name, labels in (
        ("pytorchjob", "train-master-0", {"training.kubeflow.org/job-name": "train"}),
        ("trainjob", "train-node-0-0-ab12c", {"jobset.sigs.k8s.io/jobset-name": "train",
                                               "jobset.sigs.k8s.io/replicatedjob-name": "node"}),
    ):  # fmt: skip
        path = write(tmp_path, extra=f"  operator: {kind}\n  serviceAccountName: trainer\n{STORE}")
        api.state.logs = {name: ["hello"]}
        labelled = {
            **pod(name, phase="Pending"),
            "metadata": {"name": name, "namespace": "default", "labels": labels},
        }
        thread = operator(
            api,
            (0.3, lambda p=labelled: api.state.pods.append(p)),  # Pending: its events are read
            (1.5, lambda p=labelled: p["status"].update(phase="Running")),
            (0.3, lambda: api.set_conditions("default", "train", "Created", "Running")),
            (
                0.5,
                lambda: api.set_conditions("default", "train", "Created", "Running", "Succeeded"),
            ),
        )
        code, _, err = run(capsys, "apply", str(path), "--wait", "--no-collect")
        thread.join()
        assert code == 0 and "warning" not in err.lower() and "forbidden" not in err.lower(), err
        for argv in (("logs", "train"), ("status", "train"), ("list", "-n", "default"),
                     ("doctor", str(path))):  # fmt: skip
            code, _, err = run(capsys, *argv)
            assert code == 0 and "warning" not in err.lower(), (argv, err)
        code, _, err = run(capsys, "delete", "train", "--wait")
        assert code == 0, err
    # A local run with --context borrows the runtime its TrainJob names, of either kind.
    for kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        job = trainjob("borrow", "team-runtime", ["true"])
        job["spec"]["runtimeRef"]["kind"] = kind
        (tmp_path / "borrow.yaml").write_text(yaml.safe_dump(job))
        _, _, err = run(
            capsys, "doctor", str(tmp_path / "borrow.yaml"), "--local", "--context", "fake"
        )
        assert f"{kind}/team-runtime" in err and "forbidden" not in err.lower(), err
    used = set()
    for r in api.state.requests:
        attributes = request_attributes(r.method, r.path, r.query)
        if attributes is None:
            continue  # discovery, OpenAPI, access reviews: every user's
        assert allowed(api.state, *attributes), attributes
        verb, group, resource, sub, _, _ = attributes
        used.add((group, f"{resource}/{sub}" if sub else resource, verb))
        if verb == "patch" and r.query.get("dryRun") is None:
            used.add((group, resource, "create"))  # an apply that creates needs create too
    granted = {
        (group, resource, verb)
        for scope in role_rules(RBAC).values()
        for rule in scope
        for group in rule.groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    assert used == granted, (used - granted, granted - used)
    # And the preflight asks about exactly what the job's commands do (not its own reads).
    asked = {
        (a["group"], f"{a['resource']}/{a['subresource']}" if a.get("subresource") else
         a["resource"], a["verb"])
        for r in api.state.requests
        if r.path.endswith("/selfsubjectaccessreviews")
        for a in [r.body["spec"]["resourceAttributes"]]
    }  # fmt: skip
    # The preflight's own reads, and the runtimes a local run borrows (not a cluster job's).
    own = {"secrets", "serviceaccounts", "namespaces", "nodes", "customresourcedefinitions",
           "clustertrainingruntimes", "trainingruntimes"}  # fmt: skip
    assert {a for a in asked if a[1] not in own} == {u for u in used if u[1] not in own}
    code, _, err = run(capsys, "list")  # every namespace: the Role grants one
    assert code == 1 and "list one namespace with -n NAMESPACE" in err, err


def test_delete_wait_has_a_deadline_and_says_what_holds_the_job(
    api: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_backend, "GONE_MARGIN", 1)
    path = write(tmp_path, extra="  fault: {terminationGracePeriod: 1s}\n")
    assert run(capsys, "apply", str(path))[0] == 0
    api.state.pods = [pod("train-master-0")]
    api.state.pod_linger = 60  # a pod that does not go
    code, _, err = run(capsys, "delete", "train", "--wait")
    assert code == 1
    assert "still terminating after 2s (finalizers: foregroundDeletion; pods left: " in err
    assert "train-master-0" in err


def test_the_fixture_keeps_other_managers_fields_and_answers_as_the_api_server(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    path = write(tmp_path)
    assert run(capsys, "apply", str(path))[0] == 0
    custom = client.CustomObjectsApi(connect())
    meta = {"name": "train", "namespace": "default", "labels": {"team": "a"}}
    labelled = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta}
    custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", "train", labelled,
        field_manager="kubectl", _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    assert run(capsys, "apply", str(path))[0] == 0  # kctl-train's apply does not name it
    assert api.state.jobs[("default", "train")]["metadata"]["labels"]["team"] == "a"
    with pytest.raises(ApiException) as info:
        custom.patch_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "train", labelled,
            _content_type="application/apply-patch+yaml",
        )  # fmt: skip
    assert info.value.status == 422 and "fieldManager: Required value" in str(info.value.body)
    # Pods are listed per namespace; the kubelet's refusals keep its wording.
    elsewhere = {**pod("train-worker-0")["metadata"], "namespace": "other"}
    api.state.pods = [pod("train-master-0"), {**pod("train-worker-0"), "metadata": elsewhere}]
    listed = client.CoreV1Api(connect()).list_namespaced_pod("default", _preload_content=False)
    assert [p["metadata"]["name"] for p in json.loads(listed.data)["items"]] == ["train-master-0"]
    code, _, err = run(capsys, "logs", "train", "--previous")
    assert code == 1 and 'previous terminated container "pytorch" in pod "train-master-0"' in err
    code, _, err = run(capsys, "logs", "train")
    assert code == 1 and "is waiting to start: ContainerCreating" in err


def test_a_webhook_denial_is_shown_as_the_operator_said_it_not_as_rbac(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A validating webhook's refusal arrives as a 403 (controller-runtime's Denied): it is
    final, and it is the operator speaking, not the user's permissions."""
    api.state.webhook_denial = (
        "validator.pytorchjob.training-operator.kubeflow.org",
        "PyTorchJobSpec is not valid: Master ReplicaSpec must have only one replica",
    )
    code, _, err = run(capsys, "apply", str(write(tmp_path)))
    assert code == 1
    assert 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied' in err
    assert "Master ReplicaSpec must have only one replica" in err
    assert "you may not" not in err and "rbac" not in err.lower()
    assert len([r for r in api.state.requests if r.method == "PATCH"]) == 1
