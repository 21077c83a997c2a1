"""Nothing lost, nothing doubled: a second writer is fenced off, retention never lets a
corrupt checkpoint displace a good one, collect falls back and leaves nothing of a
rejected unit, malformed manifests are skipped, S3 failures are retried, and errors name
what failed. Each test here is the regression test of one finding of the fault probe."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from operator_client.collect.collect import CollectError, collect
from operator_client.runstore import checkpoints, runinfo
from operator_client.runstore.aggregate import committed_units
from operator_client.runstore.outputs import RankOutputs, commit_epoch
from operator_client.storage import ObjectStore, StoreError, open_store
from operator_client.storage.file import FileStore

from .fault_proxy import FaultProxy
from .test_collect import make_run


@pytest.mark.parametrize(
    ("marker", "finished"),
    [
        (None, None),  # not finished
        ({"specHash": "other", "step": 80, "attempt": 1}, None),  # another spec finished
        ({"step": 80, "attempt": 1}, None),  # written before markers named their spec
        ("not json", None),
        ({"specHash": "this", "step": "80", "attempt": 1}, None),  # not kctl-train's
        ({"specHash": "this", "step": 80, "attempt": 2}, runinfo.Finished(80, 2)),
    ],
)
def test_a_run_is_finished_only_by_a_marker_of_its_own_spec(
    tmp_path: Path, marker: Any, finished: runinfo.Finished | None
) -> None:
    store = open_store(tmp_path.as_uri())
    if marker is not None:
        body = marker if isinstance(marker, str) else json.dumps(marker)
        store.put_bytes(runinfo.SUCCESS, body.encode())
    assert runinfo.finished(store, "this") == finished


def publish(store: ObjectStore, tmp: Path, step: int, keep: int, **kw: Any) -> None:
    model = tmp / f"model-{step}.ckpt"
    model.write_bytes(os.urandom(4096))
    checkpoints.publish(
        store,
        {checkpoints.MODEL_FILE: model},
        step=step,
        epoch=0,
        attempt=kw.pop("attempt", 1),
        world_size=1,
        keep=keep,
        **kw,
    )


def corrupt(store: FileStore, step: int) -> None:
    path = store.root / checkpoints.checkpoint_key(step) / checkpoints.MODEL_FILE
    path.write_bytes(b"not what the manifest says" + path.read_bytes()[26:])


# 1. A second writer: an older attempt stops committing once a newer one exists.


def test_an_older_attempt_cannot_commit_a_checkpoint(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    old = runinfo.claim_attempt(store, {})
    publish(store, tmp_path, 10, keep=1, attempt=old, fence=lambda: runinfo.fence(store, old))
    new = runinfo.claim_attempt(store, {})
    assert new == old + 1
    with pytest.raises(runinfo.Superseded, match=f"superseded by attempt {new}"):
        publish(store, tmp_path, 20, keep=1, attempt=old, fence=lambda: runinfo.fence(store, old))
    assert [m.step for m in checkpoints.committed(store)] == [10]  # and 10 was not retained away
    runinfo.fence(store, new)  # the newest attempt writes on


def test_an_older_attempt_cannot_commit_an_epoch(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    runinfo.claim_attempt(store, {})
    runinfo.claim_attempt(store, {})
    outputs = RankOutputs(tmp_path / "rank0", 0)
    outputs.record("val", 0, [{"sample": 1}])
    with pytest.raises(runinfo.Superseded):
        commit_epoch(
            store,
            outputs,
            0,
            rank=0,
            world_size=1,
            attempt=1,
            gather=lambda obj: [obj],
            barrier=lambda: None,
            fence=lambda: runinfo.fence(store, 1),
        )
    assert store.list("outputs/") == []


# 3. Retention keeps the newest `keep` checkpoints that verify.


def test_a_corrupt_newest_checkpoint_never_displaces_a_good_one(tmp_path: Path) -> None:
    """The probe's case: the newest checkpoint (step 20) is corrupt, the run resumes from
    step 10 and commits step 15 with keep: 1. Counting by step alone kept only the corrupt
    one and deleted every new checkpoint right after its commit."""
    store = FileStore(tmp_path / "store")
    publish(store, tmp_path, 10, keep=2)
    publish(store, tmp_path, 20, keep=2)
    corrupt(store, 20)
    found = checkpoints.newest_verified(store, tmp_path / "resume")
    assert found is not None and found[0].step == 10
    publish(store, tmp_path, 15, keep=1)
    # 20 is newer but does not verify: kept, not counted; 15 is the one good one; 10 goes.
    assert [m.step for m in checkpoints.committed(store)] == [20, 15]
    found = checkpoints.newest_verified(store, tmp_path / "resume2")
    assert found is not None and found[0].step == 15
    for step in (16, 17):
        publish(store, tmp_path, step, keep=1)
    assert [m.step for m in checkpoints.committed(store)] == [20, 17]


def test_retention_keeps_good_checkpoints_behind_a_corrupt_one(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    for step in (10, 20):
        publish(store, tmp_path, step, keep=2)
    corrupt(store, 20)
    verified = checkpoints.Verified(store)
    checkpoints.retain(store, 1, verified)
    # 20 does not count: 10 is the one good checkpoint and stays.
    assert [m.step for m in checkpoints.committed(store)] == [20, 10]
    assert not verified.check(checkpoints.committed(store)[0])


def test_verification_remembers_only_definite_answers(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    publish(store, tmp_path, 10, keep=1)
    (manifest,) = checkpoints.committed(store)
    verified = checkpoints.Verified(store)
    (store.root / manifest.key / checkpoints.MODEL_FILE).unlink()
    assert verified.check(manifest) is False
    assert verified.check(manifest) is False  # remembered: missing is definite


# 4. collect falls back when a committed checkpoint's file is missing.


def test_collect_falls_back_past_a_checkpoint_with_a_missing_file(
    run: FileStore, tmp_path: Path
) -> None:
    (run.root / "checkpoints/step-000000000040/model.ckpt").unlink()
    dest = tmp_path / "out"
    result = collect(run, dest)
    summary = json.loads((dest / "summary.json").read_text())
    assert [c["step"] for c in summary["checkpoints"]] == [20]
    assert any("step-000000000040" in p and "no such object" in p for p in result.problems)
    assert not (dest / "checkpoints/step-000000000040").exists()  # nothing of it left
    assert (dest / "checkpoints/step-000000000020/MANIFEST.json").is_file()
    assert summary["problems"] == result.problems


def test_collect_leaves_nothing_of_a_corrupt_checkpoint(run: FileStore, tmp_path: Path) -> None:
    corrupt(run, 40)
    dest = tmp_path / "out"
    collect(run, dest)
    assert not (dest / "checkpoints/step-000000000040").exists()


# 5. Malformed output manifests are skipped with a warning naming the key.


@pytest.mark.parametrize(
    "body", [b"{garbage", b'{"epoch": 0}', b"[]", b'{"split": "../x", "epoch": 0}']
)
def test_malformed_output_manifests_are_skipped(
    run: FileStore, tmp_path: Path, body: bytes
) -> None:
    run.put_bytes("outputs/val/epoch-00007/MANIFEST.json", body)
    problems: list[str] = []
    units = committed_units(run, problems)
    assert [m["epoch"] for m in units["val"]] == [0, 1]
    assert problems and "outputs/val/epoch-00007/MANIFEST.json" in problems[0]
    result = collect(run, tmp_path / "out")
    assert any("epoch-00007" in p for p in result.problems)
    assert result.summary["outputs"]["val"]["rows"] > 0


# 6 and 11. S3: a body that breaks off is fetched again; outages are waited out.


@pytest.fixture
def s3_store(moto_endpoint: str, bucket: str) -> ObjectStore:
    return open_store(f"s3://{bucket}/runs/default/j/", endpoint=moto_endpoint)


def test_a_response_body_that_breaks_off_is_retried(
    s3_store: ObjectStore, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    data = os.urandom(256 << 10)
    s3_store.put_bytes("big.bin", data)
    with FaultProxy(moto_endpoint, seed=1) as proxy:
        proxy.reset_fraction = 0.5
        flaky = open_store(f"s3://{bucket}/runs/default/j/", endpoint=proxy.endpoint)
        for i in range(6):
            flaky.get_file("big.bin", tmp_path / f"copy{i}")
            assert (tmp_path / f"copy{i}").read_bytes() == data
        assert flaky.get_bytes("big.bin") == data
        assert proxy.resets > 0


def test_an_error_answer_that_breaks_off_is_retried(moto_endpoint: str, bucket: str) -> None:
    # botocore reads the body of an error answer to a streaming request (a GET of a
    # missing key: 404 with an XML body) outside its own error wrapping, so a reset there
    # surfaces as urllib3's ProtocolError; it must be retried like any broken answer.
    with FaultProxy(moto_endpoint, seed=3) as proxy:
        proxy.reset_fraction = 0.5
        flaky = open_store(f"s3://{bucket}/runs/default/j/", endpoint=proxy.endpoint)
        for _ in range(8):
            with pytest.raises(StoreError, match="NoSuchKey"):
                flaky.get_bytes("outputs/val/missing.json")
        assert proxy.resets > 0


def test_an_s3_outage_is_waited_out_within_patience(moto_endpoint: str, bucket: str) -> None:
    import threading

    with FaultProxy(moto_endpoint) as proxy:
        store = open_store(f"s3://{bucket}/j/", endpoint=proxy.endpoint, patience=30)
        proxy.mode = "503"
        timer = threading.Timer(4.0, lambda: setattr(proxy, "mode", "pass"))
        timer.start()
        store.put_bytes("after-outage", b"x")  # botocore alone gives up after ~3 tries
        timer.join()
        assert store.get_bytes("after-outage") == b"x"
        proxy.mode = "reset"
        impatient = open_store(f"s3://{bucket}/j/", endpoint=proxy.endpoint, patience=1)
        with pytest.raises(StoreError, match=r"s3://.*/j/gone"):
            impatient.get_bytes("gone")


def test_an_s3_delete_failure_names_the_key_once(moto_endpoint: str) -> None:
    store = open_store("s3://no-such-bucket-here/runs/x/", endpoint=moto_endpoint)
    with pytest.raises(StoreError) as info:
        store.delete(["checkpoints/step-1/MANIFEST.json"])
    message = str(info.value)
    assert message.startswith("s3://no-such-bucket-here/runs/x/checkpoints/step-1/MANIFEST.json")
    assert "runs/x/runs/x" not in message


# 12. Every key of the run root is checked before anything is written.


@pytest.mark.parametrize("planted", ["../../etc/x", "a/../../b", "/abs"])
def test_unsafe_keys_anywhere_in_the_run_root_are_refused(
    tmp_path: Path, moto_endpoint: str, bucket: str, planted: str
) -> None:
    import boto3

    store = open_store(f"s3://{bucket}/runs/default/j/", endpoint=moto_endpoint)
    make_run(store, tmp_path)
    key = f"runs/default/j/{planted}".replace("j//", "j/") if planted != "/abs" else None
    boto3.client("s3", endpoint_url=moto_endpoint).put_object(
        Bucket=bucket, Key=key or "runs/default/j//abs", Body=b"x"
    )
    dest = tmp_path / "out"
    with pytest.raises(CollectError, match="refusing to collect"):
        collect(store, dest)
    assert not dest.exists()


@pytest.fixture
def run(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store")
    make_run(store, tmp_path)
    return store
