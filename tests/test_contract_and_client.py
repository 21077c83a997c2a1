"""Pure pieces of the backend seam, one table row per case: the progress line format, the
job state every backend derives, the TorchX app id, the failure report's choice of replica,
the storage location from annotations, and the client's job inputs."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from operator_client.backends.types import Condition, JobView, LogLine, Replica, StorageLocation
from operator_client.client import JobHandle
from operator_client.client.failure import failure_report
from operator_client.client.jobs import JobText, load, with_namespace
from operator_client.client.store_words import LiveWords, StoreWords
from operator_client.contract import Progress
from operator_client.controlplane.lifecycle import job_state
from operator_client.errors import BadInput, KctlTrainError
from operator_client.integrations.torchx_appdef import app_id as make
from operator_client.integrations.torchx_appdef import parse_app_id
from operator_client.runstore.checkpoint_log import SaveBudget
from operator_client.spec import SpecError, load_job_text
from operator_client.spec.document import MAX_BYTES
from operator_client.spec.save_estimate import SaveEstimate

from .conftest import ROOT, job_yaml


@pytest.mark.parametrize(
    "progress",
    [
        Progress(epoch=0, step=10),
        Progress(epoch=2, step=120, total=300, loss=0.0312, rate=78.1),
        Progress(epoch=1, step=5, total=None, loss=float("1e-9"), rate=0.0),
    ],
)
def test_progress_lines_round_trip(progress: Progress) -> None:
    line = progress.line()
    assert line.startswith("kctl-train.progress {")
    assert Progress.parse(f"12:00:00 [rank 0] {line}") == progress  # after a launcher prefix


@pytest.mark.parametrize(
    "line",
    [
        "epoch 2 step 120/300 loss 0.03 (78.1 steps/s)",  # prose is not progress
        "kctl-train.progress not json",
        'kctl-train.progress {"epoch": 1}',  # no step
        'kctl-train.progress {"epoch": "x", "step": 1}',
        "",
    ],
)
def test_lines_that_are_not_progress(line: str) -> None:
    assert Progress.parse(line) is None


def test_the_newest_progress_of_a_stretch_of_log() -> None:
    first, last = Progress(epoch=0, step=10), Progress(epoch=0, step=20, loss=0.5)
    lines = ["starting", first.line(), "checkpoint step 10 committed", last.line(), "noise"]
    assert Progress.newest(lines) == last
    assert Progress.newest(["no progress here"]) is None


def cond(type_: str, status: str = "True") -> Condition:
    return Condition(type_, status)


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ([], "Pending"),  # the operator has not seen the job
        ([cond("Created")], "Created"),
        ([cond("Created"), cond("Running")], "Running"),
        ([cond("Created"), cond("Running", "False"), cond("Succeeded")], "Succeeded"),
        ([cond("Created"), cond("Restarting"), cond("Failed")], "Failed"),
        ([cond("Created", "False")], "Unknown"),  # none holds
        ([cond("Created"), cond("Suspended")], "Suspended"),
    ],
)
def test_one_job_state_for_every_backend(conditions: list[Condition], state: str) -> None:
    assert job_state(conditions) == state


@pytest.mark.parametrize(
    ("cfg", "app_id"),
    [
        ({}, "ml:train"),
        ({"context": "gpu"}, "ml:train:gpu"),
        ({"context": "gpu", "kubeconfig": "/k/config"}, "ml:train:gpu:/k/config"),
        ({"kubeconfig": "/k/a:/k/b"}, "ml:train::/k/a:/k/b"),  # a KUBECONFIG list stays whole
    ],
)
def test_torchx_app_ids_carry_the_cluster(cfg: dict[str, str], app_id: str) -> None:
    assert make("ml", "train", cfg) == app_id
    namespace, name, where = parse_app_id(app_id)
    assert (namespace, name) == ("ml", "train")
    assert where == {"context": cfg.get("context"), "kubeconfig": cfg.get("kubeconfig")}


def view(state: str, *replicas: Replica) -> JobView:
    return JobView("fake", "j", "default", state, f"job is {state.lower()}", replicas=replicas)


@pytest.mark.parametrize(
    ("job", "replica", "previous"),
    [
        (view("Succeeded"), None, None),
        (
            view("Failed", Replica("j-master-0", "master-0", "Failed", exit_code=3)),
            "master-0",
            False,
        ),
        (
            view(
                "Failed",
                Replica("j-master-0", "master-0", "Running"),
                Replica("j-worker-0", "worker-0", "Running", restarts=2),  # failed, then restarted
            ),
            "worker-0",
            True,
        ),
        (view("Suspended", Replica("j-master-0", "master-0", "Failed", exit_code=143)), None, None),
        (view("Failed", Replica("j-master-0", "master-0", "Pending")), None, None),
    ],
)  # fmt: skip
def test_the_failure_report_reads_the_replica_that_failed(
    job: JobView, replica: str | None, previous: bool | None
) -> None:
    asked: list[tuple[str, bool, int]] = []

    def read_logs(*, replica: str, previous: bool, tail: int) -> Iterator[LogLine]:
        asked.append((replica, previous, tail))
        yield LogLine(replica, "last words")

    report = failure_report(job, read_logs)
    if job.succeeded:
        assert report is None
        return
    assert report is not None and report.state == job.state and report.message == job.message
    if replica is None:
        assert report.replica is None and asked == []
    else:
        assert report.replica is not None and report.replica.tag == replica
        assert asked == [(replica, previous, 20)] and report.lines == ["last words"]


@pytest.mark.parametrize(
    ("annotations", "location"),
    [
        ({}, None),
        ({"kctl-train.io/run-root": "file:///s/ns/j/"}, StorageLocation("file:///s/ns/j/")),
        (
            {
                "kctl-train.io/run-root": "s3://b/p/ns/j/",
                "kctl-train.io/storage-endpoint": "http://minio:9000",
                "kctl-train.io/storage-region": "eu-west-1",
            },
            StorageLocation("s3://b/p/ns/j/", "http://minio:9000", "eu-west-1"),
        ),
    ],
)
def test_the_run_is_found_through_the_annotations(
    annotations: dict[str, str], location: StorageLocation | None
) -> None:
    meta = {"name": "j", "namespace": "ns", "annotations": annotations}
    assert StorageLocation.of({"metadata": meta}) == location
    # The same annotations on another job's object are not followed (its root is not
    # <store>/<its namespace>/<its name>/).
    other = {"metadata": {**meta, "name": "other"}}
    assert StorageLocation.of(other) is None


QUICKSTART = ROOT / "examples" / "quickstart.yaml"


@pytest.mark.parametrize(
    "given",
    [
        str(QUICKSTART),
        QUICKSTART,
        QUICKSTART.read_text(),
        load_job_text(QUICKSTART.read_text()).job.model_dump(mode="json", by_alias=True),
        load_job_text(QUICKSTART.read_text()).job,
        JobText(QUICKSTART.read_text(), "<stdin>"),
        JobText(json.dumps(yaml.safe_load(QUICKSTART.read_text())), "<stdin>"),  # one line
    ],
    ids=["path-str", "path", "yaml-text", "dict", "TrainingJob", "JobText", "JobText-1-line"],
)
def test_the_client_takes_a_job_in_any_form(given: Any) -> None:
    loaded = load(given)
    assert loaded.job == load_job_text(QUICKSTART.read_text()).job
    if isinstance(given, JobText):  # its messages name it
        assert [w.source for w in loaded.warnings] == ["<stdin>"]


def test_job_text_reads_no_more_than_a_job_file_may_hold() -> None:
    huge = io.StringIO("#" * (MAX_BYTES * 4))
    text = JobText.read(huge)
    assert len(text.text) == MAX_BYTES + 1 and text.source == "<stdin>"
    with pytest.raises(SpecError, match="too large"):
        load(text)


def test_bad_job_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load(tmp_path / "missing.yaml")
    with pytest.raises(SpecError):
        load({"apiVersion": "kctl-train/v1alpha1", "kind": "TrainingJob"})
    with pytest.raises(BadInput, match="not int"):
        load(3)  # type: ignore[arg-type]
    named = load(job_yaml("j", "  command: [x]\n").replace("{name: j}", "{name: j, namespace: a}"))
    with pytest.raises(BadInput, match="-n says 'b'"):
        with_namespace(named, "b", force=False)
    assert with_namespace(named, "b", force=True).metadata.namespace == "b"
    assert with_namespace(named, None, force=False).metadata.namespace == "a"


def test_the_offline_calls_make_no_backend(tmp_path: Path) -> None:
    """render, validate and schema go through the Client (issue 32) without reading a
    kubeconfig: one that does not exist (or --runtime files that do not) is never read."""
    from operator_client import Client

    client = Client(kubeconfig=str(tmp_path / "missing"), runtimes=[tmp_path / "none.yaml"])
    files = [str(ROOT / "examples" / "quickstart.yaml"), str(ROOT / "examples" / "kind-cpu.yaml")]
    manifests, warnings = client.render_files(files)
    assert [m["metadata"]["name"] for m in manifests] == ["quickstart", "kind-cpu"]
    assert {w.source for w in warnings} <= set(files)
    found = client.validate_files(files)
    assert [j.job.metadata.name for j in found.jobs] == ["quickstart", "kind-cpu"]
    assert found.errors == [] and found.to_json()["valid"]
    assert found.lines()[0].endswith(
        "valid: default/quickstart, 2 nodes, CPU per node, as a PyTorchJob"
    )
    assert client.schema()["title"] == "TrainingJob"
    assert client.schema(helm=True)["title"] == "kctl-train chart values"
    assert "_backend" not in vars(client)  # never made
    with pytest.raises(BadInput, match="--runtime"):
        _ = client.info  # the first call that needs one reads the files, and says what is wrong


def test_render_files_reports_every_file_at_once(tmp_path: Path) -> None:
    """One SpecError for all the files, each problem with its file; the warnings of the
    files that loaded come first, marked as warnings."""
    from operator_client import Client

    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml("bad", "  nodes: zero\n"))
    also = tmp_path / "also.yaml"
    also.write_text(job_yaml("Not_A_Name", "  nodes: 1\n"))
    good = str(ROOT / "examples" / "quickstart.yaml")
    with pytest.raises(SpecError) as caught:
        Client().render_files([good, str(bad), str(also)])
    issues = caught.value.issues
    assert {i.source for i in issues if i.severity == "error"} == {str(bad), str(also)}
    severities = [i.severity for i in issues]
    assert severities == sorted(severities, reverse=True)  # warnings, then errors
    assert "warning" in severities


def test_every_command_of_the_grammar_has_its_handler() -> None:
    """Each command names its handler as "module.function" (grammar.py); main imports the
    module when the command runs: a misspelt one would fail only then."""
    import argparse

    from operator_client.cli.grammar import parser
    from operator_client.cli.main import handler

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        args = argparse.Namespace(handler=command.get_default("handler"))
        assert callable(handler(args)), name


@pytest.mark.parametrize(
    ("words", "lines", "live"),
    [
        (StoreWords(), [], ""),
        (
            StoreWords(goodput="goodput 41% so far", sigterm="SIGTERM at step 9: saved"),
            ["goodput 41% so far", "SIGTERM at step 9: saved"],
            "goodput 41% so far",
        ),
        (
            StoreWords(budget=SaveBudget(3, 1.5, 0.5, 2**20, 5.0), window=30),
            [SaveBudget(3, 1.5, 0.5, 2**20, 5.0).against(30)],
            "emergency save 5.0s of 30s",
        ),
        (
            StoreWords(goodput="goodput 9% so far", budget=SaveEstimate(share_mib=512)),
            ["goodput 9% so far", SaveEstimate(share_mib=512).against(None)],
            f"goodput 9% so far · emergency save "
            f"{SaveEstimate(share_mib=512).emergency_save_s:.1f}s by estimate",
        ),
    ],
)
def test_what_the_store_says_in_words(words: StoreWords, lines: list[str], live: str) -> None:
    """status prints lines(), the live view redraws live(): only what there is to say."""
    assert words.lines() == lines
    assert words.live() == live


def test_live_words_are_read_in_the_background_once_per_period() -> None:
    """The live view's redraw never waits on the store: poll() answers at once with what
    was read before, and starts a read only when one is due."""
    reads: list[float] = []
    started = threading.Event()

    class GoneJob:  # store_words reads the job first; a job that is gone says nothing
        def status(self) -> None:
            reads.append(time.monotonic())
            started.set()
            raise KctlTrainError("gone")

    words = LiveWords(cast(JobHandle, GoneJob()), every=60.0)
    assert words.poll() == ""
    assert started.wait(10)
    deadline = time.monotonic() + 10
    while words._reading and time.monotonic() < deadline:
        time.sleep(0.01)
    assert words.poll() == ""  # the next read is due in a minute
    time.sleep(0.1)
    assert len(reads) == 1
