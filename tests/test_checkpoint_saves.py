"""Checkpoints saved from a point-in-time snapshot while training goes on, written by every
rank, committed by rank 0 once every part is in the store (issue 21): never torn, never
half-visible, resumable by another world size. Real torchrun agents, gloo, Lightning."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from operator_client.collect.collect import collect
from operator_client.render import render
from operator_client.runstore import checkpoint_log, checkpoints
from operator_client.spec import load_job_text
from operator_client.storage import ObjectStore

from . import replicas as R
from .conftest import ROOT, job_yaml
from .test_runtime_e2e import job, logs, store_of

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")

from operator_client.runtime import checkpoint_format
from operator_client.runtime.rehearsal import UPLOAD_DELAY_ENV as UPLOAD_DELAY
from operator_client.runtime.rehearsal import WRITE_DELAY_ENV as WRITE_DELAY
from operator_client.runtime.rehearsal import save_delays

# tests/stamp.py: 256 samples over 2 ranks in batches of 16 are 8 steps an epoch.
EPOCH = 8


@pytest.mark.parametrize(
    ("env", "write", "upload"),
    [
        ({}, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),  # a production run: no wait
        ({WRITE_DELAY: "0,2"}, [0.0, 2.0, 2.0], [0.0, 0.0, 0.0]),  # the last one repeats
        ({UPLOAD_DELAY: "1.5"}, [0.0, 0.0, 0.0], [1.5, 1.5, 1.5]),
    ],
)
def test_a_rehearsal_gives_each_save_its_waits_in_turn(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], write: list[float], upload: list[float]
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("operator_client.runtime.rehearsal.time.sleep", slept.append)
    for delays, expected in zip(save_delays(env), (write, upload), strict=True):
        slept.clear()
        for _ in expected:
            delays.wait()
        assert slept == [s for s in expected if s], env


def stamp_job(name: str, storage: str, *, steps: int, every: int, extra: str = "") -> Any:
    text = job_yaml(
        name,
        f"""\
  train:
    model: tests.stamp:StampModel
    data: tests.stamp:StampData
    trainer: {{max_steps: {steps}, log_every_n_steps: 1}}
  nodes: 2
  checkpoint: {{every: {every} steps, keep: 20{extra}}}
  storage: {storage}
""",
    )
    return render(load_job_text(text).job)


def run(manifest: Any, workdir: Path, **env: str) -> list[R.Replica]:
    workdir.mkdir(parents=True, exist_ok=True)
    return R.start(manifest, workdir, extra_env={"PYTHONPATH": str(ROOT), **env})


def assert_whole(store: ObjectStore, manifest: checkpoints.Manifest, scratch: Path) -> None:
    """The checkpoint is one step's state: weights, optimizer state and loop all say so."""
    path = checkpoints.fetch(store, manifest, scratch / manifest.key)
    assert path is not None and manifest.format == checkpoints.DCP
    state = checkpoint_format.load(path)
    step = manifest.step
    assert state["global_step"] == step
    weights = state["state_dict"]["w"]
    assert weights.min().item() == weights.max().item() == step, f"torn at step {step}"
    stamp = state["optimizer_states"][0]["state"][0]["stamp"]  # keyed by an int, as saved
    assert stamp.min().item() == stamp.max().item() == step, f"torn optimizer at step {step}"


def losses(store: ObjectStore) -> dict[str, str]:
    rows = csv.DictReader(io.StringIO(store.get_bytes("metrics/metrics.csv").decode()))
    return {r["step"]: r["train_loss"] for r in rows if r.get("train_loss")}


def test_every_committed_checkpoint_is_one_steps_state_and_resumes_to_the_same_losses(
    tmp_path: Path,
) -> None:
    uri = (tmp_path / "store").as_uri()
    first = stamp_job("stamp", f"{{uri: '{uri}'}}", steps=5 * EPOCH, every=EPOCH,
                      extra=", whenBusy: skip")  # fmt: skip
    reps = run(first, tmp_path / "a", **{WRITE_DELAY: "2"})  # a slow writer; training goes on
    assert R.wait(reps) == [0, 0], logs(reps)
    store = store_of(first, uri)
    committed = checkpoints.committed(store)
    assert committed[0].step == 5 * EPOCH and committed[-1].step == EPOCH, committed
    for manifest in committed:
        assert_whole(store, manifest, tmp_path / "check")
    saves = checkpoint_log.read(store)
    assert sum(int(r["skipped_before"]) for r in saves) > 0, saves  # it did go on training
    assert "skipped: the previous one is still being written" in reps[0].text()

    # Resumed from the first epoch's checkpoint into another store: the same losses.
    resume = f"{uri}/default/stamp/{committed[-1].key}"
    second = stamp_job(
        "again", f"{{uri: '{uri}'}}", steps=5 * EPOCH, every=EPOCH, extra=f", resume: '{resume}'"
    )
    reps = run(second, tmp_path / "b")
    assert R.wait(reps) == [0, 0], logs(reps)
    assert f"resuming from {committed[-1].key} (step {EPOCH}" in reps[0].text()
    original, resumed = losses(store), losses(store_of(second, uri))
    later = {s: v for s, v in original.items() if int(s) >= EPOCH}
    assert later and {s: resumed.get(s) for s in later} == later


def test_a_writer_killed_mid_save_never_commits_it_and_the_previous_resumes(
    tmp_path: Path,
) -> None:
    uri = (tmp_path / "store").as_uri()
    manifest = stamp_job("killed", f"{{uri: '{uri}'}}", steps=3 * 4, every=4)
    store = store_of(manifest, uri)

    def slow_worker(replica: Any, env: dict[str, str], port: int) -> dict[str, str]:
        # The worker's second save waits a minute before uploading: rank 0's part is in
        # the store, the worker's is not, and the commit waits for it.
        return {**env, UPLOAD_DELAY: "0,60"} if replica.type == "Worker" else env

    (tmp_path / "a").mkdir()
    reps = R.start(manifest, tmp_path / "a", {"PYTHONPATH": str(ROOT)}, rewrite=slow_worker)
    deadline = time.monotonic() + 120
    while not store.exists(checkpoints.part_key(8, 0)):
        assert time.monotonic() < deadline and reps[0].process.poll() is None, logs(reps)
        time.sleep(0.1)
    assert not store.exists(f"{checkpoints.checkpoint_key(8)}/{checkpoints.MANIFEST}")
    os.killpg(reps[1].process.pid, signal.SIGKILL)  # the worker, mid-write
    time.sleep(2)
    os.killpg(reps[0].process.pid, signal.SIGKILL)  # the job fails; its pods restart
    R.wait(reps)
    # Nothing of step 8 is visible: collect takes step 4, the newest committed.
    result = collect(store, tmp_path / "got")
    assert result.summary["committedCheckpoints"] == [4]
    assert [c["step"] for c in result.summary["checkpoints"]] == [4]

    reps = run(manifest, tmp_path / "b")
    assert R.wait(reps) == [0, 0], logs(reps)
    assert "resuming from checkpoints/step-000000000004 (step 4" in reps[0].text()
    by_step = {m.step: m for m in checkpoints.committed(store)}
    assert sorted(by_step) == [4, 8, 12] and by_step[8].attempt == 2
    for manifest_ in by_step.values():
        assert_whole(store, manifest_, tmp_path / "check")


def test_resume_across_world_sizes_both_ways(tmp_path: Path) -> None:
    """Saved by 3 nodes, resumed by 2, and by 3 again: every rank reads every share."""
    uri = (tmp_path / "store").as_uri()
    for nodes, steps, saved_by in (("3", 20, None), ("2", 40, 3), ("3", 60, 2)):
        manifest = job("resize", f"{{uri: '{uri}'}}", nodes=nodes, steps=steps, every=20)
        reps = run(manifest, tmp_path / f"n{nodes}-{steps}")
        assert R.wait(reps) == [0] * int(nodes), logs(reps)
        if saved_by:
            line = f"(step {steps - 20}, saved by a world of {saved_by})"
            assert line in reps[0].text(), logs(reps)
        store = store_of(manifest, uri)
        newest = checkpoints.committed(store)[0]
        assert (newest.step, newest.world_size) == (steps, int(nodes))
        shards = {m.name for m in newest.members}
        assert shards == {".metadata", *(f"__{r}_0.distcp" for r in range(int(nodes)))}
    assert json.loads(store.get_bytes("_SUCCESS"))["step"] == 60


def test_a_save_that_failed_is_outlived_by_later_ones_and_the_run_ends_well(
    tmp_path: Path,
) -> None:
    """One save fails on every rank (here a file stands where its directory goes, as a
    store outage would fail it); the later saves commit and the run ends 0, without a
    restart: an old failure does not fail the final checkpoint on any rank."""
    uri = (tmp_path / "store").as_uri()
    manifest = stamp_job("outlived", f"{{uri: '{uri}'}}", steps=12, every=4)
    store = store_of(manifest, uri)
    blocked = store.local_path(checkpoints.checkpoint_key(4))
    assert blocked is not None
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a directory")
    reps = run(manifest, tmp_path / "a")
    assert R.wait(reps) == [0, 0], logs(reps)
    assert "checkpoint step 4 failed" in logs(reps)
    assert "resuming" not in logs(reps)
    assert sorted(m.step for m in checkpoints.committed(store)) == [8, 12]


def test_staging_the_pods_memory_limit_cannot_hold_is_refused_at_the_first_save(
    tmp_path: Path,
) -> None:
    """One rank whose share of the state is 1 GiB (a step-stamped model's weights and
    optimizer state), in a real memory cgroup of 3 GiB holding about 2.3 GiB already: the
    first save refuses to make its staging buffers, saying what to do, and nothing is
    killed for memory."""
    from operator_client.backends.local.sandbox import cgroups

    if cgroups.why_not("memory"):
        pytest.skip(f"{cgroups.why_not('memory')}: a pod's limit needs root here")
    uri = (tmp_path / "store").as_uri()
    text = job_yaml(
        "staging",
        f"""\
  train:
    model: tests.stamp:StampModel
    modelArgs: {{size: {2**27}}}
    data: tests.stamp:StampData
    trainer: {{max_steps: 20, log_every_n_steps: 1}}
  checkpoint: {{every: 10 steps}}
  fault: {{maxRestarts: 0}}
  storage: {{uri: '{uri}'}}
""",
    )
    group = cgroups.create(f"staging-test-{os.getpid()}", memory=3 * 2**30)
    try:
        reps = run(render(load_job_text(text).job), tmp_path / "a")
        for replica in reps:  # before the agent has started its workers
            group.add(replica.process.pid)
        assert R.wait(reps) != [0], logs(reps)
        assert not group.oom_killed(), logs(reps)
    finally:
        group.remove()
    text = logs(reps)
    assert re.search(
        r"checkpoints refused: a checkpoint needs 1\.00 GiB of staging buffers on this pod "
        r"\(1 rank\(s\) x 1\.00 GiB, each rank's share of the state\), and the pod's memory "
        r"limit of 3\.00 GiB leaves [\d.]+ GiB",
        text,
    ), text
    assert "raise spec.resources.memory" in text and "staging buffers for a" not in text
