"""collect and report against real stores (a directory, and moto's S3 server): verified
downloads, resumption, rebuilt aggregates, and keys that must never become local paths."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from operator_client.collect.collect import CollectError, collect
from operator_client.collect.report import build, text, write
from operator_client.errors import NothingStored
from operator_client.runstore import checkpoints
from operator_client.runstore.aggregate import aggregate_all
from operator_client.storage import ObjectStore, StoreError, open_store
from operator_client.storage.base import Progress
from operator_client.storage.file import FileStore

from .test_outputs import commit_ranks

WORLD, ROWS = 3, 4
METRICS = "epoch,step,train_loss,val_loss\n0,9,1.0,\n0,19,0.5,\n0,19,,0.6\n1,29,0.2,\n1,39,,0.3\n"


def make_run(store: ObjectStore, scratch: Path, epochs: tuple[int, ...] = (0, 1)) -> None:
    """A finished run: 2 committed checkpoints, per-rank outputs of 3 ranks, metrics."""
    for step in (20, 40):
        model = scratch / f"model-{step}.ckpt"
        model.write_bytes(os.urandom(64 << 10))
        checkpoints.publish(
            store,
            {checkpoints.MODEL_FILE: model},
            step=step,
            epoch=step // 20 - 1,
            attempt=1,
            world_size=WORLD,
            keep=3,
        )
    commit_ranks(
        store,
        scratch,
        WORLD,
        "val",
        lambda rank, epoch: [{"sample": f"{rank}-{i}", "p": i / 10} for i in range(ROWS)],
        epochs=epochs,
    )
    aggregate_all(store, scratch / "agg")
    store.put_bytes("metrics/metrics.csv", METRICS.encode())
    store.put_bytes("run.json", b'{"attempt": 1}')
    store.put_bytes("attempts/1.json", b'{"attempt": 1, "claimed": 1000.0}')
    store.put_bytes("_SUCCESS", json.dumps({"step": 40, "finished": 1090.0}).encode())


@pytest.fixture
def run(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store")
    make_run(store, tmp_path)
    return store


def aggregate_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_collects_the_newest_checkpoint_outputs_and_metrics(run: FileStore, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    result = collect(run, dest, describe={"job": {"name": "j"}})
    assert result.problems == []
    s = json.loads((dest / "summary.json").read_text())
    assert [c["step"] for c in s["checkpoints"]] == [40]
    assert s["committedCheckpoints"] == [40, 20]
    assert s["outputs"]["val"] == {
        "path": "outputs/val/all.csv",
        "epochs": [0, 1],
        "rows": 2 * WORLD * ROWS,
        "rebuilt": False,
    }
    assert s["complete"] and s["attempts"] == 1 and s["restarts"] == 0
    assert (dest / "checkpoints/step-000000000040/model.ckpt").read_bytes() == run.get_bytes(
        "checkpoints/step-000000000040/model.ckpt"
    )
    assert not (dest / "checkpoints/step-000000000020").exists()
    assert (dest / "outputs/val/all.csv").read_bytes() == run.get_bytes("outputs/val/all.csv")
    assert {p.name for p in dest.rglob(".*")} == set()  # no temp or partial files left

    everything = collect(run, tmp_path / "all", all_checkpoints=True)
    assert [c["step"] for c in everything.summary["checkpoints"]] == [40, 20]


def test_a_second_collect_skips_verified_files(run: FileStore, tmp_path: Path) -> None:
    collect(run, tmp_path / "out")
    again = collect(run, tmp_path / "out")
    assert again.summary["files"]["skipped"] == 2  # model.ckpt and all.csv: checksums known
    assert again.problems == []


class Interrupted(FileStore):
    """Writes half of one object, then fails: a connection lost mid-download."""

    def __init__(self, root: Path, victim: str) -> None:
        super().__init__(root)
        self.victim = victim

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        if key.endswith(self.victim):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.get_bytes(key)[:100])
            raise StoreError(f"{key}: connection reset")
        super().get_file(key, path, progress)


def test_an_interrupted_collect_resumes_and_never_leaves_a_partial_file(
    run: FileStore, tmp_path: Path
) -> None:
    dest = tmp_path / "out"
    # An object that cannot be read (after the store's own retries) is a problem in the
    # summary, not the end of the collect.
    failed = collect(Interrupted(run.root, "1.json"), dest)
    assert any("connection reset" in p for p in failed.problems)
    assert json.loads((dest / "summary.json").read_text())["problems"] == failed.problems
    assert not (dest / "attempts/1.json").exists()
    assert not list(dest.rglob(".*partial"))
    # Files finished before the failure, even in the same batch, are kept.
    assert (dest / "checkpoints/step-000000000040/model.ckpt").is_file()
    assert (dest / "metrics/metrics.csv").is_file()
    result = collect(run, dest)
    assert result.problems == [] and result.summary["files"]["skipped"] == 2
    assert (dest / "outputs/val/all.csv").read_bytes() == run.get_bytes("outputs/val/all.csv")


def test_a_checksum_mismatch_is_reported_and_the_previous_checkpoint_collected(
    run: FileStore, tmp_path: Path
) -> None:
    key = "checkpoints/step-000000000040/model.ckpt"
    corrupt = bytearray(run.get_bytes(key))
    corrupt[0] ^= 0xFF  # same size: only the sha256 can tell
    run.put_bytes(key, bytes(corrupt))
    dest = tmp_path / "out"
    result = collect(run, dest)
    assert any("sha256 does not match" in p and key in p for p in result.problems)
    assert any("step-000000000040 failed verification" in p for p in result.problems)
    assert [c["step"] for c in result.summary["checkpoints"]] == [20]
    assert not (dest / key).exists()


def test_a_missing_or_stale_aggregate_is_rebuilt_from_committed_rank_files(
    run: FileStore, tmp_path: Path
) -> None:
    expected = aggregate_rows_of(run)
    run.delete(["outputs/val/all.json"])  # rank 0 died before committing the aggregate
    result = collect(run, tmp_path / "a")
    assert result.summary["outputs"]["val"]["rebuilt"] is True
    assert aggregate_rows(tmp_path / "a/outputs/val/all.csv") == expected
    assert json.loads((tmp_path / "a/outputs/val/all.json").read_text())["rows"] == len(expected)

    aggregate_all(run, tmp_path / "agg")
    commit_ranks(
        run, tmp_path, WORLD, "val", lambda rank, epoch: [{"sample": "late", "p": 1}], epochs=(2,)
    )  # an epoch committed after the aggregate was written
    result = collect(run, tmp_path / "b")
    assert result.summary["outputs"]["val"]["rebuilt"] is True
    assert result.summary["outputs"]["val"]["rows"] == len(expected) + WORLD


def aggregate_rows_of(store: ObjectStore) -> list[dict[str, str]]:
    return list(csv.DictReader(store.get_bytes("outputs/val/all.csv").decode().splitlines()))


def test_report_has_curves_final_metrics_and_the_best_checkpoint(
    run: FileStore, tmp_path: Path
) -> None:
    collect(run, tmp_path / "out", describe={"job": {"name": "j"}})
    report, png, txt = write(tmp_path / "out")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.final == {"train_loss": 0.2, "val_loss": 0.3}
    assert report.best == {"step": 40, "metric": "val_loss", "value": 0.3}
    assert report.train_seconds == 90.0 and report.restarts == 0
    summary = txt.read_text()
    assert summary.startswith("j: finished at step 40")
    assert "best checkpoint" in summary and "outputs/val" in summary
    assert text(build(tmp_path / "out")) == summary


def test_only_the_files_kctl_train_writes_are_taken_each_within_its_size(
    run: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import operator_client.collect.collect as collect_module

    run.put_bytes("monitor/blob.bin", b"y" * 4096)  # a pod's own file: never collected
    run.put_bytes("monitor/node-0.csv", b"time,gpu,utilization_pct\n1,0,50\n")
    run.put_bytes("attempts/notes.txt", b"x")
    run.put_bytes("_SUCCESS", b"[1]")
    monkeypatch.setattr(collect_module, "MAX_CSV", 64)
    run.put_bytes("metrics/checkpoints.csv", b"step,stall_s\n" + b"1,0.1\n" * 20)
    result = collect(run, tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "monitor" / "node-0.csv").is_file()
    assert not (out / "monitor" / "blob.bin").exists()
    assert not (out / "attempts" / "notes.txt").exists()
    assert not (out / "metrics" / "checkpoints.csv").exists()
    assert any("metrics/checkpoints.csv: 133 bytes, larger than" in p for p in result.problems), (
        result.problems
    )
    assert "_SUCCESS: not a marker kctl-train writes (not a JSON object)" in result.problems
    assert result.summary["complete"] is False


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    with pytest.raises(NothingStored, match="nothing is stored at"):
        collect(FileStore(tmp_path / "empty"), tmp_path / "out")


@pytest.fixture
def s3_run(tmp_path: Path, moto_endpoint: str, bucket: str) -> tuple[ObjectStore, Any]:
    store = open_store(f"s3://{bucket}/runs/default/j/", endpoint=moto_endpoint)
    make_run(store, tmp_path)
    return store, boto3.client("s3", endpoint_url=moto_endpoint)


@pytest.mark.parametrize(
    ("planted", "why"),
    [
        ("monitor/../../../../evil.csv", "'..' segment"),
        ("attempts/..\\..\\evil.json", "backslash"),
        ("monitor//evil.csv", "empty"),
        ("monitor/evil\x00.csv", "NUL"),
    ],
)
def test_unsafe_keys_in_the_bucket_are_refused_before_anything_is_written(
    tmp_path: Path, s3_run: tuple[ObjectStore, Any], bucket: str, planted: str, why: str
) -> None:
    store, client = s3_run
    client.put_object(Bucket=bucket, Key=f"runs/default/j/{planted}", Body=b"pwned")
    dest = tmp_path / "deep" / "a" / "b" / "out"
    with pytest.raises(CollectError, match="refusing to collect") as info:
        collect(store, dest)
    assert why in str(info.value)
    assert not dest.exists()
    assert not [p for p in tmp_path.rglob("evil*")]


def test_a_manifest_naming_a_path_outside_is_refused(
    tmp_path: Path, s3_run: tuple[ObjectStore, Any]
) -> None:
    """Such a manifest is not one kctl-train writes: the checkpoint is skipped, named."""
    store, _ = s3_run
    manifest = json.loads(store.get_bytes("checkpoints/step-000000000040/MANIFEST.json"))
    manifest["members"][0]["name"] = "../../../../evil.ckpt"
    store.put_bytes("checkpoints/step-000000000040/MANIFEST.json", json.dumps(manifest).encode())
    result = collect(store, tmp_path / "out")
    assert any("step-000000000040" in p and "evil.ckpt" in p for p in result.problems)
    assert [c["step"] for c in result.summary["checkpoints"]] == [20]
    assert not [p for p in tmp_path.rglob("evil*")]


@pytest.mark.parametrize(
    "keys", [("monitor/Node.csv", "monitor/node.csv"), ("monitor/x", "monitor/x/y.csv")]
)
def test_colliding_keys_are_refused(
    tmp_path: Path, s3_run: tuple[ObjectStore, Any], bucket: str, keys: tuple[str, str]
) -> None:
    store, client = s3_run
    for key in keys:
        client.put_object(Bucket=bucket, Key=f"runs/default/j/{key}", Body=b"x")
    with pytest.raises(CollectError, match="refusing to collect"):
        collect(store, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_symlink_out_of_the_destination_is_refused(run: FileStore, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    (dest / "outputs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (dest / "outputs" / "val").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CollectError, match="leaves"):
        collect(run, dest)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_cli_collects_from_an_s3_uri_and_reports(
    tmp_path: Path, s3_run: tuple[ObjectStore, Any], bucket: str, moto_endpoint: str
) -> None:
    kctl = str(Path(sys.executable).parent / "kctl-train")
    env = {**os.environ, "NO_COLOR": "1"}
    args = ["collect", "j", "--from", f"s3://{bucket}/runs", "--endpoint", moto_endpoint]
    out = subprocess.run(
        [kctl, *args, "--to", "got"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "collected into got/" in out.stdout and "final val_loss" in out.stdout
    assert "collecting j:" in out.stderr  # plain progress lines without a terminal
    again = subprocess.run(
        [kctl, "report", "got"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert again.returncode == 0 and "curves: got/report.png" in again.stdout
