"""One suite for every backend (backends/base.py, its shapes in backends/types.py) and
both job kinds: the same scenarios through the public Client, against the local backend
(real processes) and the Kubernetes backend (the real `kubernetes` client against the
loopback API fixture, where the test plays the training-operator or Trainer v2), each
with the job as a PyTorchJob and as a TrainJob. A backend added later joins BACKENDS and
must pass all of it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operator_client import Client
from operator_client.backends.local import LocalBackend
from operator_client.backends.types import ConditionReached, JobChanged, LogLine
from operator_client.errors import BadInput, JobNotFound
from operator_client.storage import open_store

from .conftest import job_yaml
from .fake_apiserver import FakeApiServer
from .test_collect import make_run

# The local backend both ways: pod sandboxes (where possible: the default as root) and
# plain processes (docs/LOCAL_PODS.md).
BACKENDS = ["local", "local-processes", "kubernetes"]
KINDS = ["pytorchjob", "trainjob"]
# The node's rank: the training-operator sets RANK, Trainer v2 only PET_NODE_RANK.
SUCCEED = (
    "import os, time; "
    "print('hello from rank', os.environ.get('RANK', os.environ.get('PET_NODE_RANK'))); "
    "time.sleep(2)"
)
FAIL = "print('line 1'); print('boom: bad config'); raise SystemExit(3)"


@dataclass
class Harness:
    """A backend under test: its client, and how a job's life is brought about (locally
    by the job's own command; on the fixture by playing the operator)."""

    backend: str
    client: Client
    tmp: Path
    kind: str = "pytorchjob"
    api: FakeApiServer | None = None

    @property
    def trainjob(self) -> bool:
        return self.kind == "trainjob"

    @property
    def tags(self) -> tuple[str, str]:
        """The job's two replicas, rank 0 first."""
        return ("node-0-0", "node-0-1") if self.trainjob else ("master-0", "worker-0")

    @property
    def success(self) -> str:
        """The condition success brings: Trainer copies the JobSet's Complete."""
        return "Complete" if self.trainjob else "Succeeded"

    def job(self, name: str, outcome: str) -> Path:
        script = SUCCEED if outcome == "succeed" else FAIL
        # A PyTorchJob fails at once; a TrainJob's pods restart up to the Job's
        # backoffLimit (6), quickly (KCTL_TRAIN_LOCAL_RESTART_BACKOFF, set by the fixture).
        fault = ""
        if outcome == "fail":
            fault = "  fault: {maxRestarts: 0}\n"
            if not self.trainjob:
                fault = "  fault: {restartPolicy: Never, maxRestarts: 0}\n"
        store = (self.tmp / "store").as_uri()
        path = self.tmp / f"{name}.yaml"
        path.write_text(
            job_yaml(
                name,
                f'  command: [python, -c, "{script}"]\n  nodes: 2\n'
                f"  storage: {{uri: '{store}'}}\n{fault}  operator: {self.kind}\n",
            )
        )
        if self.api is not None:
            self._play(name, outcome)
        return path

    def _play(self, name: str, outcome: str) -> None:
        api = self.api
        assert api is not None

        container = "node" if self.trainjob else "pytorch"
        # The pods as each operator makes them: a JobSet's carry 5 random characters.
        names = [f"{name}-{t}-x7k2p" if self.trainjob else f"{name}-{t}" for t in self.tags]
        labels = (
            {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
            }
            if self.trainjob
            else {"training.kubeflow.org/job-name": name}
        )

        def pod(index: int, phase: str, code: int | None = None) -> dict[str, Any]:
            status: dict[str, Any] = {"phase": phase}
            if code is not None:
                terminated = {"exitCode": code, "reason": "Error" if code else "Completed"}
                status["containerStatuses"] = [
                    {"name": container, "restartCount": 0, "state": {"terminated": terminated}}
                ]
            return {
                "metadata": {"name": names[index], "namespace": "default", "labels": labels},
                "spec": {"nodeName": "node-1"},
                "status": status,
            }

        def play() -> None:
            with contextlib.suppress(KeyError):  # the test deleted the job before its end
                live()

        def live() -> None:
            deadline = time.monotonic() + 10
            # A job as just applied (no status yet): not the finished one it replaces.
            while time.monotonic() < deadline and (
                ("default", name) not in api.state.jobs
                or api.state.jobs[("default", name)].get("status")
            ):
                time.sleep(0.05)
            api.state.logs[names[0]] = ["hello from rank 0"]
            api.state.logs[names[1]] = ["hello from rank 1"]
            api.state.pods = [pod(0, "Running"), pod(1, "Running")]
            api.set_conditions("default", name, "Created", "Running")
            time.sleep(1.5)
            if outcome == "succeed":
                api.state.pods = [pod(0, "Succeeded", 0), pod(1, "Succeeded", 0)]
                api.set_conditions("default", name, "Created", "Running", "Succeeded")
            else:
                api.state.logs[names[0]] = ["line 1", "boom: bad config"]
                api.state.pods = [pod(0, "Failed", 3), pod(1, "Running")]
                api.set_conditions("default", name, "Created", "Running", "Failed")

        threading.Thread(target=play, daemon=True).start()


@pytest.fixture(params=[(b, k) for k in KINDS for b in BACKENDS], ids="-".join)
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    backend, kind = request.param
    if backend.startswith("local"):
        monkeypatch.setenv("KCTL_TRAIN_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("KCTL_TRAIN_LOCAL_RESTART_BACKOFF", "0.1,0.2")
        monkeypatch.chdir(tmp_path)
        pods = "process" if backend == "local-processes" else None
        client = Client(LocalBackend(tmp_path / "home", pods=pods))
        yield Harness("local", client, tmp_path, kind)
        return
    api = FakeApiServer()
    api.state.other_crds.update({"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"})
    api.state.runtimes.add("kctl-train")
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield Harness("kubernetes", Client("kubernetes"), tmp_path, kind, api)
    api.stop()


def test_submit_get_list_and_an_unchanged_resubmit(harness: Harness) -> None:
    path = harness.job("conf", "succeed")
    handle = harness.client.apply(path)
    assert handle.submitted is not None and handle.submitted.verb == "created"
    view = handle.status()
    assert (view.name, view.namespace, view.backend, view.nodes) == (
        "conf",
        "default",
        harness.backend,
        2,
    )
    assert view.storage is not None and view.storage.root.endswith("/store/default/conf/")
    again = harness.client.apply(path)
    assert again.submitted is not None and again.submitted.verb == "unchanged"
    assert [v.name for v in harness.client.list()] == ["conf"]
    assert harness.client.list("elsewhere") == []
    assert handle.wait(timeout=60).succeeded


def test_a_finished_job_submitted_again_is_replaced_and_runs_again(harness: Harness) -> None:
    path = harness.job("conf", "succeed")
    assert harness.client.apply(path).wait(timeout=60).succeeded
    checked = harness.client.apply(path, dry_run="server")
    assert checked.submitted is not None and "replace" in (checked.submitted.note or "")
    again = harness.client.apply(harness.job("conf", "succeed"))
    assert again.submitted is not None and again.submitted.verb == "replaced"
    assert not again.status().ended  # the new run, not the old Succeeded
    assert again.wait(timeout=60).succeeded


def test_watch_follows_the_job_to_success(harness: Harness) -> None:
    handle = harness.client.apply(harness.job("conf", "succeed"))
    events = list(handle.events(heartbeat=0.5))
    assert isinstance(events[0], JobChanged)
    reached = [e.condition.type for e in events if isinstance(e, ConditionReached)]
    assert harness.success in reached and len(reached) == len(set(reached))
    last = events[-1]
    assert isinstance(last, JobChanged) and last.view.ended and last.view.succeeded
    assert handle.failure() is None


def test_a_failure_reports_the_reason_and_the_last_log_lines(harness: Harness) -> None:
    handle = harness.client.apply(harness.job("conf", "fail"))
    # A TrainJob's nodes fail 3 times each before the Job's backoffLimit (6); every round
    # starts two torchrun agents, which a loaded 2-core machine makes slow.
    view = handle.wait(timeout=180)
    assert view.ended and not view.succeeded and view.state == "Failed"
    report = handle.failure()
    assert report is not None and not report.stopped and report.message
    assert report.replica is not None and report.replica.tag == harness.tags[0]
    assert report.replica.exit_code not in (None, 0)
    assert "boom: bad config" in report.lines


def test_logs_of_every_replica_and_of_one(harness: Harness) -> None:
    handle = harness.client.apply(harness.job("conf", "succeed"))
    handle.wait(timeout=60)
    first, second = harness.tags
    lines = list(handle.logs())
    assert {line.tag for line in lines} == {first, second}
    assert LogLine(second, "hello from rank 1") in lines
    master = [line for line in handle.logs(replica=first)]
    assert {line.tag for line in master} == {first}
    assert "hello from rank 0" in [line.text for line in master]
    assert [line.text for line in handle.logs(replica=first, tail=1)] == [master[-1].text]
    with pytest.raises(BadInput, match=f"{first}, {second}"):
        list(handle.logs(replica="worker-9"))


def test_delete_removes_the_job_and_keeps_its_data(harness: Harness) -> None:
    handle = harness.client.apply(harness.job("conf", "succeed"))
    store = open_store((harness.tmp / "store/default/conf/").as_uri())
    store.put_bytes("keep.txt", b"data")
    assert handle.delete(wait=True) is True
    assert "conf" not in [view.name for view in harness.client.list("default")]
    assert handle.delete() is False
    assert harness.client.delete("conf", missing_ok=True) is False
    with pytest.raises(JobNotFound):
        harness.client.delete("conf")
    with pytest.raises(JobNotFound):
        harness.client.job("conf")
    assert store.exists("keep.txt")


def test_collect_through_the_job(harness: Harness) -> None:
    handle = harness.client.apply(harness.job("conf", "succeed"))
    handle.wait(timeout=60)
    make_run(open_store((harness.tmp / "store/default/conf/").as_uri()), harness.tmp)
    got = handle.collect(to=harness.tmp / "got")
    assert got.problems == [] and "final val_loss" in got.report
    assert (harness.tmp / "got/checkpoints/step-000000000040/model.ckpt").is_file()
    assert got.summary["job"]["name"] == "conf"
