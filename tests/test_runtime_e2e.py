"""The runtime for real: torchrun agents on loopback with the operator's environment,
gloo, Lightning fits, a moto S3 server or a directory as the store."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from operator_client.client.grace import grace_warning, measured_budget
from operator_client.render import render
from operator_client.runstore import checkpoint_log, checkpoints
from operator_client.runstore.location import run_root
from operator_client.spec import load_job_text
from operator_client.spec.units import Duration
from operator_client.storage import ObjectStore, open_store

from . import replicas as R
from .conftest import job_yaml

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")

VAL = 240  # validation samples of the example data module


def job(
    name: str,
    storage: str,
    *,
    nodes: str = "2",
    steps: int = 80,
    every: int = 20,
    delay: float = 0.0,
    keep: int = 3,
    extra: str = "",
    trainer: str = "",
) -> dict[str, Any]:
    text = job_yaml(
        name,
        f"""\
  train:
    model: operator_client.examples.regression:RegressionModel
    modelArgs: {{step_delay: {delay}}}
    data: operator_client.examples.regression:RegressionData
    trainer: {{max_steps: {steps}, log_every_n_steps: 10{trainer}}}
  nodes: {nodes}
  checkpoint: {{every: {every} steps, keep: {keep}}}
  storage: {storage}
{extra}""",
    )
    return render(load_job_text(text).job)


def store_of(manifest: dict[str, Any], uri: str, endpoint: str | None = None) -> ObjectStore:
    return open_store(run_root(uri, "default", manifest["metadata"]["name"]), endpoint=endpoint)


def val_rows(store: ObjectStore) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(store.get_bytes("outputs/val/all.csv").decode())))


def assert_each_sample_once_per_epoch(store: ObjectStore) -> None:
    rows = val_rows(store)
    per_epoch = Counter((r["epoch"], r["sample"]) for r in rows)
    assert set(per_epoch.values()) == {1}, [k for k, v in per_epoch.items() if v > 1][:5]
    epochs = {r["epoch"] for r in rows}
    assert len(rows) == VAL * len(epochs)


def logs(replicas: list[R.Replica]) -> str:
    return "\n".join(f"--- {r.name}\n{r.text()[-4000:]}" for r in replicas)


def test_master_and_worker_fit_to_s3(tmp_path: Path, moto_endpoint: str, bucket: str) -> None:
    storage = f"{{uri: 's3://{bucket}/runs', endpoint: '{moto_endpoint}', credentialsSecret: s3}}"
    manifest = job("fixed", storage)
    # The Secret's keys come from the environment (the moto fixture sets them).
    reps = R.start(manifest, tmp_path)
    assert R.wait(reps) == [0, 0], logs(reps)
    store = store_of(manifest, f"s3://{bucket}/runs", moto_endpoint)
    success = json.loads(store.get_bytes("_SUCCESS"))
    assert success["step"] == 80
    assert [m.step for m in checkpoints.committed(store)] == [80, 60, 40]
    run = json.loads(store.get_bytes("run.json"))
    assert run["world"] == {"worldSize": 2, "nodes": 2, "processesPerNode": 1}
    assert {r["rank"] for r in val_rows(store)} == {"0", "1"}
    assert_each_sample_once_per_epoch(store)
    assert store.exists("metrics/metrics.csv")
    assert "PyTorchJob (Master/Worker)" in reps[0].text()
    assert "\r" not in reps[0].text()  # plain lines for kubectl logs

    # The Master restarted after its Worker exited (killed in the job's last moments): the
    # spec already finished, so it exits 0 instead of waiting for a Worker that never comes.
    master = R.launches(manifest, tmp_path / "again")[0]
    again = R.Replica(master.name, master.popen(), master.log)
    assert R.wait([again], timeout=60) == [0], again.text()
    assert "this spec already finished at step 80 (attempt 1): nothing to run" in again.text()
    assert len(store.list("attempts/")) == 1


def kill_a_worker_after_the_first_checkpoint(reps: list[R.Replica], store: ObjectStore) -> None:
    """SIGKILL one worker process of the second replica once a checkpoint is committed."""
    deadline = time.monotonic() + 120
    while not checkpoints.committed(store):
        assert time.monotonic() < deadline and all(r.process.poll() is None for r in reps), logs(
            reps
        )
        time.sleep(0.2)
    pids = R.worker_pids(reps[1])
    assert pids, logs(reps)
    os.kill(pids[0], signal.SIGKILL)


def test_elastic_worker_killed_mid_fit_resumes_from_the_checkpoint(
    tmp_path: Path, moto_endpoint: str, bucket: str
) -> None:
    uri = f"s3://{bucket}/runs"
    manifest = job(
        "elastic",
        f"{{uri: '{uri}', endpoint: '{moto_endpoint}'}}",
        nodes="{min: 2, max: 2}",
        steps=160,
        every=20,
        delay=0.03,
    )
    store = store_of(manifest, uri, moto_endpoint)
    reps = R.start(manifest, tmp_path)
    kill_a_worker_after_the_first_checkpoint(reps, store)
    assert R.wait(reps) == [0, 0], logs(reps)
    resumed = [line for r in reps for line in r.text().splitlines() if "resuming from" in line]
    assert resumed, logs(reps)
    step = int(resumed[0].split("(step ")[1].split(",")[0])
    assert step > 0  # continued, not restarted from 0
    # The agent says which rank failed and how, without the traceback of its own wait.
    assert "failed (exitcode: -9) local_rank: 0" in reps[1].text(), logs(reps)
    assert "ProcessExitedException" not in reps[1].text(), logs(reps)
    attempts = store.list("attempts/")
    assert len(attempts) == 2
    assert json.loads(store.get_bytes("_SUCCESS"))["step"] == 160
    assert_each_sample_once_per_epoch(store)


def as_trainjob(replica: Any, env: dict[str, str], port: int) -> dict[str, str]:
    """A replica's environment as Kubeflow Trainer v2 would give its node pod: the
    training-operator's variables out, the torch plugin's in (node rank = pod index)."""
    kept = {
        k: v
        for k, v in env.items()
        if not k.startswith("PET_")
        and k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
    }
    rank = 0 if replica.type == "Master" else replica.index + 1
    return {
        **kept,
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
    }


def test_a_trainjob_node_killed_mid_fit_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    """Under Trainer v2's environment: the same fit, checkpoints, resume and outputs."""
    uri = f"file://{tmp_path}/store"
    manifest = job("v2", f"{{uri: '{uri}'}}", steps=160, every=20, delay=0.03)
    store = store_of(manifest, uri)
    reps = R.start(manifest, tmp_path, rewrite=as_trainjob)
    kill_a_worker_after_the_first_checkpoint(reps, store)
    assert R.wait(reps) == [0, 0], logs(reps)
    assert "TrainJob (Kubeflow Trainer v2)" in reps[0].text()
    assert any("resuming from" in r.text() for r in reps), logs(reps)
    assert json.loads(store.get_bytes("_SUCCESS"))["step"] == 160
    assert_each_sample_once_per_epoch(store)


def sigterm_once(
    tmp_path: Path, name: str, *, seen: str, every: int, extra: str, trainer: str = ""
) -> tuple[list[R.Replica], ObjectStore]:
    """A 1-node job of endless steps, SIGTERMed (what the kubelet sends PID 1) once its
    log shows `seen`; its replicas, ended non-zero, and its store."""
    uri = (tmp_path / "store").as_uri()
    manifest = job(
        name,
        f"{{uri: '{uri}'}}",
        nodes="1",
        steps=100000,
        every=every,
        delay=0.01,
        extra=extra,
        trainer=trainer,
    )
    store = store_of(manifest, uri)
    reps = R.start(manifest, tmp_path)
    deadline = time.monotonic() + 120
    while seen not in reps[0].text():
        assert time.monotonic() < deadline and reps[0].process.poll() is None, logs(reps)
        time.sleep(0.2)
    os.kill(reps[0].process.pid, signal.SIGTERM)
    (code,) = R.wait(reps)
    assert code != 0, logs(reps)
    return reps, store


def test_sigterm_commits_an_emergency_checkpoint_and_exits_non_zero(tmp_path: Path) -> None:
    reps, store = sigterm_once(
        tmp_path, "preempt", seen='"step":30,', every=100000, extra="  processesPerNode: 3\n"
    )
    uri = (tmp_path / "store").as_uri()
    committed = checkpoints.committed(store)
    assert committed and committed[0].step >= 30, logs(reps)
    assert committed[0].world_size == 3
    assert not store.exists("_SUCCESS")
    # The same path as every save, every rank writing a share; its commit time reported.
    assert {m.name for m in committed[0].members} == {
        ".metadata",
        *(f"__{r}_0.distcp" for r in range(3)),
    }
    # Each phase with its time: the stop, the snapshot, the commit.
    assert re.search(
        r"SIGTERM: training stopped at step \d+, [\d.]+s after the signal", reps[0].text()
    )
    assert re.search(r"SIGTERM: snapshot of step \d+ taken in [\d.]+s", reps[0].text())
    assert re.search(
        r"emergency checkpoint checkpoints/step-\d+ committed [\d.]+s after the stop "
        r"\([\d.]+s after the signal\)",
        reps[0].text(),
    )
    (saved,) = [r for r in checkpoint_log.read(store) if r["emergency"] == "1"]
    assert int(saved["step"]) == committed[0].step
    # A grace period shorter than that save is a warning at apply.
    slow = {**saved, "write_s": "45"}
    checkpoint_log.write(store, [slow])
    spec = load_job_text(job_yaml("preempt", f"  command: [x]\n  storage: {{uri: '{uri}'}}\n"
                                  "  fault: {terminationGracePeriod: 30s}\n")).job  # fmt: skip
    measured = measured_budget(spec)
    assert measured is not None
    warning = grace_warning(spec, measured, "job.yaml")
    assert warning is not None
    assert "the 30s grace period is shorter than an emergency save needs" in warning.message
    patient = spec.spec.fault.model_copy(
        update={"termination_grace_period": Duration.parse("120s")}
    )
    patient_job = spec.model_copy(update={"spec": spec.spec.model_copy(update={"fault": patient})})
    assert grace_warning(patient_job, measured, "job.yaml") is None


def test_sigterm_before_a_validation_lets_it_run_then_saves(tmp_path: Path) -> None:
    """Epochs of one batch: every step is an agreement point and is followed by a
    validation. A checkpoint of that batch's end would be resumed past the validation, so
    on SIGTERM the validation runs first (its last time and the save fit the grace period),
    then the emergency save, which carries that epoch's val_loss; its outputs committed."""
    reps, store = sigterm_once(
        tmp_path,
        "validate-first",
        seen='"step":20,',
        every=100000,
        extra="  processesPerNode: 2\n",
        trainer=", limit_train_batches: 1",
    )
    text = reps[0].text()
    stopped = re.search(r"SIGTERM: training stopped at step (\d+); epoch (\d+)'s validation "
                        r"runs first \(([\d.]+)s last time\)", text)  # fmt: skip
    assert stopped, logs(reps)
    step, epoch = int(stopped[1]), int(stopped[2])
    assert epoch == step - 1 and float(stopped[3]) > 0
    assert "emergency checkpoint" in text and "saving first" not in text, logs(reps)
    (newest, *_) = checkpoints.committed(store)
    assert (newest.step, newest.epoch) == (step, epoch), newest
    assert "val_loss" in newest.scores
    assert store.exists(f"outputs/val/epoch-{epoch:05d}/MANIFEST.json")


def test_sigterm_starts_no_save_that_the_grace_period_cannot_hold(tmp_path: Path) -> None:
    """A 1 s grace period, and saves measured on this job: an emergency save (a save in
    flight, then this one, then the exit: at least the 3 s margin) cannot commit before
    SIGKILL, so none is started, saying so; the newest committed checkpoint stands whole."""
    reps, store = sigterm_once(
        tmp_path,
        "short-grace",
        seen="checkpoint step 30 committed",
        every=10,
        extra="  processesPerNode: 2\n  fault: {terminationGracePeriod: 1s}\n",
    )
    text = reps[0].text()
    assert "an emergency save needs about" in text and "not started" in text, logs(reps)
    assert "emergency checkpoint" not in text
    rows = checkpoint_log.read(store)
    assert rows and not any(r["emergency"] == "1" for r in rows)
    committed = checkpoints.committed(store)
    assert committed and committed[0].step == max(int(r["step"]) for r in rows)
    budget = json.loads(store.get_bytes(checkpoint_log.BUDGET_KEY))
    assert budget["saves"] == len(rows) and budget["emergency_save_s"] > 3


def test_corrupt_newest_checkpoint_resumes_from_the_previous(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    first = job("corrupt", f"{{uri: '{uri}'}}", nodes="1", steps=40, every=20)
    (tmp_path / "a").mkdir()
    assert R.wait(R.start(first, tmp_path / "a")) == [0]
    store = store_of(first, uri)
    assert [m.step for m in checkpoints.committed(store)] == [40, 20]
    store.put_bytes("checkpoints/step-000000000040/__0_0.distcp", b"not a checkpoint")
    second = job("corrupt", f"{{uri: '{uri}'}}", nodes="1", steps=60, every=20)
    (tmp_path / "b").mkdir()
    reps = R.start(second, tmp_path / "b")
    assert R.wait(reps) == [0], logs(reps)
    text = reps[0].text()
    assert "step-000000000040: __0_0.distcp does not match its manifest" in text
    assert "resuming from checkpoints/step-000000000020 (step 20" in text
    assert json.loads(store.get_bytes("_SUCCESS"))["step"] == 60
