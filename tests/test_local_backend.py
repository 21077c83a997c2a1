"""The local backend for real: `kctl-train apply --local` runs the rendered PyTorchJob as
processes (torchrun agents, gloo, Lightning) under the detached supervisor, then collects.
Every command runs as a user would run it, in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from operator_client.backends.local.sandbox.support import MODE_ENV, PROCESS
from operator_client.runstore import checkpoint_log, checkpoints, events, goodput
from operator_client.storage import open_store

from .conftest import ROOT, job_yaml

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")

KCTL = str(Path(sys.executable).parent / "kctl-train")
VAL = 240  # validation samples of the example data module


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    return {**os.environ, "KCTL_TRAIN_HOME": str(home), "NO_COLOR": "1"}


def kctl(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KCTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def job_file(directory: Path, name: str, body: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(job_yaml(name, body))
    return path


def lightning_job(
    directory: Path,
    name: str,
    extra: str = "",
    steps: int = 160,
    *,
    train: str = "",
    checkpoint: str = "{every: 20 steps, keep: 2}",
) -> Path:
    """The example model on 2 nodes; `train` adds lines under spec.train."""
    return job_file(
        directory,
        name,
        f"""\
  train:
    model: operator_client.examples.regression:RegressionModel
    modelArgs: {{step_delay: 0.03}}
    data: operator_client.examples.regression:RegressionData
    trainer: {{max_steps: {steps}, log_every_n_steps: 10}}
{train}  nodes: 2
  checkpoint: {checkpoint}
{extra}""",
    )


def status_of(name: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    out = kctl("status", name, "--local", "-o", "json", env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    body: dict[str, Any] = json.loads(out.stdout)
    return body


def assert_each_sample_once_per_epoch(all_csv: Path) -> None:
    with all_csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    per_epoch = Counter((r["epoch"], r["sample"]) for r in rows)
    assert rows and set(per_epoch.values()) == {1}
    assert len(rows) == VAL * len({r["epoch"] for r in rows})


def assert_every_second_accounted(goodput: dict[str, Any], ranks: int) -> None:
    """The goodput account (runstore/goodput.py) covers wall time x ranks, within 1 %."""
    assert len(goodput["ranks"]) == ranks
    assert goodput["total_s"] == pytest.approx(goodput["wall_s"] * ranks, rel=1e-3)
    assert sum(goodput["categories"].values()) == pytest.approx(goodput["total_s"], rel=0.01)
    assert goodput["categories"]["productive"] > 0 and 0 < goodput["goodput"] < 1


def test_quickstart_end_to_end_on_the_file_store(tmp_path: Path, env: dict[str, str]) -> None:
    out = kctl(
        "apply", str(ROOT / "examples/quickstart.yaml"), "--local", "--wait", env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Succeeded: PyTorchJob quickstart is successfully completed." in out.stderr
    assert f"storage: {(tmp_path / 'home' / 'store').as_uri()}" in out.stderr
    results = tmp_path / "results" / "quickstart"
    summary = json.loads((results / "summary.json").read_text())
    assert summary["complete"] and summary["success"]["step"] == 300
    assert summary["checkpoints"][0]["step"] == 300 and not summary["problems"]
    assert summary["outputs"]["val"]["rebuilt"] is False
    assert_every_second_accounted(summary["goodput"], ranks=2)
    assert summary["goodput"]["categories"]["other"] < 0.02 * summary["goodput"]["total_s"]
    # The time before each rank's process: its replica made, then started (no scheduler
    # here: nothing queued).
    assert summary["goodput"]["categories"]["container_start"] > 0
    assert summary["goodput"]["categories"]["queued"] == 0
    # Each worker was forked by its pod's agent, and records when that agent began and
    # when it began its rendezvous: importing torch and Lightning is start-up, not the
    # container's start (a process spawned on this machine).
    store = open_store((tmp_path / "home/store/default/quickstart").as_uri() + "/")
    for ranked in events.read_store(store):
        names = [x["event"] for x in ranked.events]
        assert names[:3] == ["agent_start", "agent_preloaded", "agent_rendezvous_start"], names
        assert names[3] == "process_start", names
    categories = summary["goodput"]["categories"]
    assert categories["startup"] > 2 * categories["container_start"], categories
    # The same account from the store, without collecting, for machines and in status.
    live = kctl("goodput", "quickstart", "--local", "-o", "json", env=env, cwd=tmp_path)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["goodput"] == pytest.approx(summary["goodput"]["goodput"])
    table = kctl("goodput", "quickstart", "--local", env=env, cwd=tmp_path).stdout
    assert "productive" in table and "container start" in table
    shown = kctl("status", "quickstart", "--local", env=env, cwd=tmp_path).stdout
    assert "so far" in shown and "kctl-train goodput quickstart --local" in shown
    # What an emergency save needs, beside the time a preempted pod has (the default 120s).
    assert re.search(
        r"an emergency save needs [\d.]+s \(.*\); a preempted pod has 120s: it fits", shown
    )
    # Sharded: DCP's metadata and one share per rank (a world of 2), all verified.
    shards = sorted(p.name for p in (results / "checkpoints/step-000000000300").iterdir())
    assert shards == [".metadata", "MANIFEST.json", "__0_0.distcp", "__1_0.distcp"], shards
    # ... and as one file any Lightning loads, on request.
    out = kctl("collect", "quickstart", "--local", "--consolidate", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import torch

    whole = torch.load(results / "checkpoints/step-000000000300/model.ckpt", weights_only=False)
    assert whole["global_step"] == 300 and set(whole["state_dict"]) == {
        "layer.weight",
        "layer.bias",
    }
    assert whole["optimizer_states"][0]["param_groups"][0]["params"] == [0, 1]
    assert (results / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "final val_loss" in out.stdout and "best checkpoint" in out.stdout
    assert "checkpoint stall" in out.stdout and "over 3 saves" in out.stdout
    assert_each_sample_once_per_epoch(results / "outputs/val/all.csv")

    body = status_of("quickstart", env, tmp_path)
    assert body["local"]["state"] == "Succeeded"
    assert body["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1
    logs = kctl("logs", "quickstart", "--local", env=env, cwd=tmp_path)
    assert "[master-0]" in logs.stdout and "[worker-0]" in logs.stdout
    assert "Fontconfig error" not in logs.stdout  # a pod sees this machine's /etc/fonts
    one = kctl("logs", "quickstart", "--local", "--replica", "worker-0", env=env, cwd=tmp_path)
    assert "[rank 1]" in one.stdout and "[master-0]" not in one.stdout
    listing = kctl("status", "--local", env=env, cwd=tmp_path)
    assert "quickstart" in listing.stdout and "Succeeded" in listing.stdout
    # The supervisor said nothing Python would (runpy warned of its module in every log).
    supervised = (tmp_path / "home/local/default/quickstart/supervisor.log").read_text()
    assert "Warning" not in supervised and "Traceback" not in supervised, supervised

    deleted = kctl("delete", "quickstart", "--local", env=env, cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    gone = kctl("status", "quickstart", "--local", env=env, cwd=tmp_path)
    assert gone.returncode == 1 and "no local job default/quickstart" in gone.stderr
    assert (tmp_path / "home/store/default/quickstart/_SUCCESS").is_file()  # data stays


def test_quickstart_on_an_s3_server(
    tmp_path: Path, env: dict[str, str], moto_endpoint: str, bucket: str
) -> None:
    text = (ROOT / "examples/quickstart.yaml").read_text()
    text += f"  storage: {{uri: 's3://{bucket}/runs', endpoint: '{moto_endpoint}'}}\n"
    path = tmp_path / "quickstart.yaml"
    path.write_text(text)
    out = kctl("apply", str(path), "--local", "--wait", "--to", "got", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"storage: s3://{bucket}/runs" in out.stderr
    store = open_store(f"s3://{bucket}/runs/default/quickstart/", endpoint=moto_endpoint)
    assert store.exists("_SUCCESS") and store.exists("outputs/val/all.json")
    assert json.loads((tmp_path / "got/summary.json").read_text())["store"] == store.url
    assert_each_sample_once_per_epoch(tmp_path / "got/outputs/val/all.csv")


def test_unreachable_s3_falls_back_to_the_local_store(tmp_path: Path, env: dict[str, str]) -> None:
    path = job_file(
        tmp_path,
        "offline",
        "  command: [python, -c, 'print(1)']\n"
        "  storage: {uri: 's3://bucket/runs', endpoint: 'http://127.0.0.1:9'}\n",
    )
    out = kctl("apply", str(path), "--local", "--dry-run=client", env=env, cwd=tmp_path)
    assert out.returncode == 0
    assert "is not reachable" in out.stderr and (tmp_path / "home/store").as_uri() in out.stderr
    assert (tmp_path / "home/store").as_uri() in out.stdout  # the manifest that would run


def apply_and_kill_after_the_first_checkpoint(
    args: list[str], name: str, pod: str, env: dict[str, str], cwd: Path
) -> tuple[dict[str, Any], str, str]:
    """`kctl-train apply ARGS --local --wait`; once the first checkpoint is committed,
    SIGKILL the pod's whole container (agent and workers). The job's status at the kill,
    and the apply's stdout and stderr once it has succeeded."""
    apply = subprocess.Popen(
        [KCTL, "apply", *args, "--local", "--wait"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    store = open_store((cwd / f"home/store/default/{name}").as_uri() + "/")
    deadline = time.monotonic() + 150
    while not checkpoints.committed(store):
        assert time.monotonic() < deadline and apply.poll() is None, apply.communicate()
        time.sleep(0.2)
    body = status_of(name, env, cwd)
    victim = next(r for r in body["local"]["replicas"] if r["name"] == pod)
    os.killpg(victim["pid"], signal.SIGKILL)
    stdout, stderr = apply.communicate(timeout=240)
    assert apply.returncode == 0, stdout + stderr
    return body, stdout, stderr


@pytest.mark.parametrize(
    "replica",
    [
        "worker-0",
        # The Master hosts the rendezvous store: the Worker's workers fail with it, and its
        # agent joins the Master's next rendezvous in the same process (no restart).
        "master-0",
    ],
)
def test_a_killed_replica_restarts_and_the_job_resumes(
    tmp_path: Path, env: dict[str, str], replica: str
) -> None:
    path = lightning_job(tmp_path, "killed")
    _, _, stderr = apply_and_kill_after_the_first_checkpoint(
        [str(path)], "killed", f"killed-{replica}", env, tmp_path
    )
    # The kubelet restarts a container the first time at once (crash_loop.py): the job
    # never shows Restarting; the replica's line says why it restarted.
    assert f"killed-{replica}: last run exited with code 137" in stderr
    assert "Restarting:" not in stderr
    body = status_of("killed", env, tmp_path)
    restarts = {r["name"]: r["restarts"] for r in body["local"]["replicas"]}
    assert (
        restarts == {f"killed-{r}": int(r == replica) for r in ("master-0", "worker-0")}
        and body["local"]["state"] == "Succeeded"
    )
    logs = kctl("logs", "killed", "--local", env=env, cwd=tmp_path).stdout
    assert "exited with code 137; restart 1 now" in logs
    assert "resuming from checkpoints/step-" in logs
    # The Worker's agent, left without the Master's store, says so in a line.
    assert "Traceback" not in logs
    if replica == "master-0":
        assert "the rendezvous failed: " in logs and "joining the next one (1 of " in logs
    summary = json.loads((tmp_path / "results/killed/summary.json").read_text())
    assert summary["attempts"] >= 2 and summary["success"]["step"] == 160
    # The kill is in the account: a gap before the next attempt's processes, every second
    # of both ranks counted.
    assert_every_second_accounted(summary["goodput"], ranks=2)
    assert summary["goodput"]["categories"]["recovery"] > 0
    assert_each_sample_once_per_epoch(tmp_path / "results/killed/outputs/val/all.csv")
    # The metrics log spans the restart: rows from before and after it.
    with (tmp_path / "results/killed/metrics/metrics.csv").open() as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert min(steps) < 20 and max(steps) >= 150


def tensorboard_scalars(directory: Path) -> dict[str, float]:
    """The last value of each scalar tag in the TensorBoard event files under directory
    (TFRecords: length, its CRC, an Event, its CRC)."""
    from tensorboardX.proto import event_pb2

    found: dict[str, float] = {}
    for path in sorted(directory.rglob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at + 12 <= len(data):
            (size,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + size])
            at += 12 + size + 4
            found.update((v.tag, v.simple_value) for v in event.summary.value)
    return found


def test_a_crash_at_a_known_step_then_early_stopping_with_tensorboard(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The user's loggers and callbacks beside the runtime's: every rank crashes at step
    25 (examples/faults.py), the job restarts from the newest committed checkpoint C, and
    the account finds 25 - C steps wasted; EarlyStopping then ends the run at its first
    validation, finished, with a final checkpoint; TensorBoard has both attempts, the
    goodput logged at the end."""
    plugins = """\
    loggers:
      - class: lightning.pytorch.loggers:TensorBoardLogger
    callbacks:
      - {class: operator_client.examples.faults:CrashAtStep, args: {step: 25}}
      - class: lightning.pytorch.callbacks:EarlyStopping
        args: {monitor: val_loss, stopping_threshold: 1000000000}
"""
    path = lightning_job(
        tmp_path, "plugins", train=plugins, checkpoint="{every: 10 steps, keep: 3}"
    )
    out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    logs = kctl("logs", "plugins", "--local", env=env, cwd=tmp_path).stdout
    assert "CrashAtStep: a crash at step 25, as asked" in logs
    resumed = re.search(r"resuming from checkpoints/step-(\d+)", logs)
    assert resumed, logs
    committed = int(resumed.group(1))
    summary = json.loads((tmp_path / "results/plugins/summary.json").read_text())
    goodput = summary["goodput"]
    assert_every_second_accounted(goodput, ranks=2)
    first, second = goodput["attempts"]
    assert (first["resumed_from"], first["reached"]) == (0, 25)
    assert second["resumed_from"] == committed and first["wasted_steps"] == 25 - committed
    assert goodput["categories"]["recovery"] > 0
    assert (goodput["categories"]["wasted_progress"] > 0) == (committed < 25)
    # EarlyStopping stopped it at its first validation (the end of epoch 0: 2048 samples,
    # batches of 32, 2 ranks), finished, its last step checkpointed.
    assert summary["complete"] and summary["success"]["step"] == 32
    assert [c["step"] for c in summary["checkpoints"]] == [32]
    runs = sorted(p.name for p in (tmp_path / "results/plugins/tensorboard").iterdir())
    assert runs == ["attempt-00001", "attempt-00002"], runs
    scalars = tensorboard_scalars(tmp_path / "results/plugins/tensorboard/attempt-00002")
    assert {"train_loss", "val_loss", "goodput/goodput", "goodput/productive_s"} <= set(scalars)
    assert 0 < scalars["goodput/goodput"] < 1
    assert summary["tensorboard"] == "tensorboard"


def test_the_best_checkpoint_by_a_monitor_is_kept_and_collected(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """checkpoint.monitor: each save records the metrics Lightning holds; retention keeps
    the newest (keep: 1) and the best by val_loss, here the largest (mode: max, so that
    the best is not simply the newest); `collect --checkpoint best` takes it."""
    path = lightning_job(
        tmp_path, "best", checkpoint="{every: 20 steps, keep: 1, monitor: val_loss, mode: max}"
    )
    out = kctl("apply", str(path), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    got = kctl("collect", "best", "--local", "--checkpoint", "best", env=env, cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    summary = json.loads((tmp_path / "results/best/summary.json").read_text())
    best = summary["best"]
    assert best["metric"] == "val_loss" and best["step"] < 160
    assert summary["committedCheckpoints"] == [160, best["step"]]
    (collected,) = summary["checkpoints"]
    assert collected["step"] == best["step"] and collected["scores"]["val_loss"] == best["value"]
    assert re.search(rf"best checkpoint +step {best['step']} \(val_loss", got.stdout)
    wrong = kctl("collect", "best", "--local", "--checkpoint", "7", env=env, cwd=tmp_path)
    assert wrong.returncode != 0 and "no committed checkpoint at that step" in wrong.stderr


def test_a_save_due_at_an_epochs_end_waits_for_its_validation(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A checkpoint of the batch before a validation would be resumed past that validation
    (Lightning fast-forwards it): the save waits for on_validation_end, so the checkpoint
    at the end of epoch 0 (step 32) carries epoch 0's val_loss, the one the metrics log has
    for that epoch (before: none, and each later save the previous epoch's)."""
    path = lightning_job(tmp_path, "epochs", checkpoint="{every: 32 steps, keep: 5}")
    out = kctl("apply", str(path), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    got = kctl("collect", "epochs", "--local", "--checkpoint", "64", env=env, cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    with (tmp_path / "results/epochs/metrics/metrics.csv").open() as fh:
        logged = {
            int(r["epoch"]): float(r["val_loss"]) for r in csv.DictReader(fh) if r["val_loss"]
        }
    summary = json.loads((tmp_path / "results/epochs/summary.json").read_text())
    assert summary["committedCheckpoints"] == [160, 128, 96, 64, 32]
    (collected,) = summary["checkpoints"]
    assert collected["step"] == 64 and collected["scores"]["val_loss"] == logged[1], logged


def test_resume_best_begins_a_line_from_the_best_and_the_same_spec_continues_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """checkpoint.resume: best, applied after a finished run: the new run starts from the
    best checkpoint (not the newest), its own checkpoints become the newest, retention
    drops the left line's; the same spec applied again finds itself finished (no second
    line begins: a choice is taken once per spec), and a step that is not there is
    refused."""
    policy = "every: 20 steps, keep: 1, monitor: val_loss, mode: max"
    first = lightning_job(tmp_path, "line", checkpoint=f"{{{policy}}}")
    out = kctl("apply", str(first), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert kctl("collect", "line", "--local", env=env, cwd=tmp_path).returncode == 0
    summary = json.loads((tmp_path / "results/line/summary.json").read_text())
    best = summary["best"]["step"]
    assert best < 160 and summary["committedCheckpoints"] == [160, best]

    branch = lightning_job(tmp_path, "line", steps=200, checkpoint=f"{{{policy}, resume: best}}")
    out = kctl("apply", str(branch), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"checkpoint at step {best}" in out.stdout + out.stderr
    logs = kctl("logs", "line", "--local", env=env, cwd=tmp_path).stdout
    assert f"begins the run's line from step {best} (checkpoint.resume: best)" in logs
    assert f"(step {best}, saved by" in logs
    assert kctl("collect", "line", "--local", env=env, cwd=tmp_path).returncode == 0
    summary = json.loads((tmp_path / "results/line/summary.json").read_text())
    assert summary["success"]["step"] == 200
    assert 160 not in summary["committedCheckpoints"]  # the left line's, retired
    assert summary["committedCheckpoints"][0] == 200

    again = kctl("apply", str(branch), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    logs = kctl("logs", "line", "--local", env=env, cwd=tmp_path).stdout
    assert "begins the run's line" not in logs
    assert "this spec already finished at step 200 (attempt 2): nothing to run" in logs

    missing = lightning_job(tmp_path, "line", checkpoint=f"{{{policy}, resume: 7}}")
    out = kctl("apply", str(missing), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode != 0
    logs = kctl("logs", "line", "--local", env=env, cwd=tmp_path).stdout
    assert "spec.checkpoint.resume: no committed checkpoint at step 7" in logs


def test_the_quickstart_as_a_trainjob_resumes_after_a_kill_and_collects_every_row_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Kubeflow Trainer v2's shape end to end: pods <job>-node-0-<i> with only the torch
    plugin's PET_* variables, a node killed after the first checkpoint restarts in place
    (OnFailure), the fit resumes from the checkpoint, Complete when every node exits 0."""
    args = [str(ROOT / "examples/quickstart.yaml"), "--operator", "trainjob"]
    body, stdout, stderr = apply_and_kill_after_the_first_checkpoint(
        args, "quickstart", "quickstart-node-0-1", env, tmp_path
    )
    assert body["kind"] == "TrainJob" and body["status"]["conditions"] == []
    assert "trainjob.trainer.kubeflow.org/quickstart created" in stdout
    assert "Complete: jobset completed successfully" in stderr
    body = status_of("quickstart", env, tmp_path)
    assert [c["type"] for c in body["status"]["conditions"]] == ["Complete"]
    assert body["status"]["jobsStatus"][0]["succeeded"] == 1
    node = next(r for r in body["local"]["replicas"] if r["name"] == "quickstart-node-0-1")
    assert node["restarts"] == 1 and body["local"]["state"] == "Succeeded"
    logs = kctl("logs", "quickstart", "--local", env=env, cwd=tmp_path).stdout
    assert "TrainJob (Kubeflow Trainer v2)" in logs and "[node-0-0]" in logs
    assert "exited with code 137; restart 1 now" in logs
    assert "resuming from checkpoints/step-" in logs
    summary = json.loads((tmp_path / "results/quickstart/summary.json").read_text())
    assert summary["attempts"] >= 2 and summary["success"]["step"] == 300
    assert_each_sample_once_per_epoch(tmp_path / "results/quickstart/outputs/val/all.csv")


FAILING = "  command: [python, -c, 'import sys; print(\"boom: bad config\"); sys.exit(3)']\n"


@pytest.mark.parametrize(
    ("fault", "reason", "restarts"),
    [
        ("{restartPolicy: Never, maxRestarts: 0}", "PyTorchJobFailed", 0),
        ("{restartPolicy: ExitCode, maxRestarts: 0}", "PyTorchJobFailed", 0),
        ("{restartPolicy: OnFailure, maxRestarts: 0, backoffLimit: 2}", "BackoffLimitExceeded", 1),
    ],
)
def test_failing_code_fails_the_job_as_the_operator_would(
    tmp_path: Path, env: dict[str, str], fault: str, reason: str, restarts: int
) -> None:
    path = job_file(tmp_path, "boom", FAILING + f"  fault: {fault}\n")
    out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: Failed:" in out.stderr
    assert "last lines of boom-master-0 (exit code 1)" in out.stderr
    assert "boom: bad config" in out.stderr
    body = status_of("boom", env, tmp_path)
    assert body["status"]["conditions"][-1]["reason"] == reason
    assert body["local"]["replicas"][0]["restarts"] == restarts
    assert not (tmp_path / "results").exists()  # nothing collected from a failed job


def test_active_deadline_fails_a_job_that_runs_too_long(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = job_file(tmp_path, "slow", "  command: [sleep, '60']\n  fault: {activeDeadline: 2s}\n")
    started = time.monotonic()
    out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
    assert out.returncode == 1 and time.monotonic() - started < 45, out.stderr
    assert "active longer than the specified deadline" in out.stderr
    body = status_of("slow", env, tmp_path)
    assert body["local"]["replicas"][0]["pid"] is None  # cleaned up (cleanPodPolicy Running)


def as_from_a_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """kctl-train started as from a terminal, for a Ctrl-C (SIGINT) to stop: a suite
    started in the background (`cmd &`) passes SIGINT on ignored, and Python then installs
    no KeyboardInterrupt handler."""
    return subprocess.Popen(
        [KCTL, *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_stops_the_job_with_an_emergency_checkpoint(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = lightning_job(
        tmp_path, "stopme", extra="  fault: {terminationGracePeriod: 60s}\n", steps=100000
    )
    apply = as_from_a_terminal(["apply", str(path), "--local", "--wait", "--follow"], env, tmp_path)
    assert apply.stdout is not None
    deadline = time.monotonic() + 150
    for line in apply.stdout:  # --follow streams the replicas' lines, prefixed
        if "[master-0]" in line and '"step":30,' in line:
            break
        assert time.monotonic() < deadline
    apply.send_signal(signal.SIGINT)
    _, stderr = apply.communicate(timeout=120)
    assert apply.returncode == 130, stderr
    assert "stopping the job" in stderr and "resumes" in stderr
    body = status_of("stopme", env, tmp_path)
    assert body["local"]["state"] == "Suspended"
    assert all(r["pid"] is None for r in body["local"]["replicas"])
    store = open_store((tmp_path / "home/store/default/stopme").as_uri() + "/")
    assert checkpoints.committed(store)[0].step >= 30


def running_with_grace(name: str, grace: str, tmp_path: Path, env: dict[str, str]) -> Any:
    """The store of an endless local job with this grace period, applied in the
    background, once 3 checkpoints are in its save log (what an emergency save needs is
    measured then)."""
    path = lightning_job(
        tmp_path,
        name,
        extra=f"  fault: {{terminationGracePeriod: {grace}}}\n",
        steps=100000,
        checkpoint="{every: 10 steps, keep: 3}",
    )
    assert kctl("apply", str(path), "--local", env=env, cwd=tmp_path).returncode == 0
    store = open_store((tmp_path / f"home/store/default/{name}").as_uri() + "/")
    deadline = time.monotonic() + 150
    while len(checkpoint_log.read(store)) < 3:
        assert time.monotonic() < deadline, "no saves in 150s"
        time.sleep(0.5)
    return store


def sigterm_of(store: Any) -> tuple[goodput.Preemption, int | None]:
    """What the SIGTERM did, as the job's rank 0 recorded it, and the last step trained."""
    found = goodput.account(events.read_store(store))
    assert found is not None
    (stopped,) = [a for a in found.attempts if a.preemption is not None]
    assert stopped.preemption is not None
    return stopped.preemption, stopped.reached


def test_a_delete_within_a_grace_period_that_holds_the_save_loses_no_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A 30 s grace period (Kubernetes' default), longer than the save measured here: the
    delete's SIGTERM stops training at the next step boundary and that very step is
    committed, so nothing trained is lost."""
    store = running_with_grace("grace30", "30s", tmp_path, env)
    out = kctl("delete", "grace30", "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    preemption, reached = sigterm_of(store)
    assert preemption.saving and preemption.grace_s == 30
    assert preemption.needed_s is not None and preemption.needed_s < preemption.left_s
    newest = checkpoints.committed(store)[0]
    assert newest.step == preemption.committed == preemption.step
    assert reached is not None and reached <= newest.step
    (row,) = [r for r in checkpoint_log.read(store) if r["emergency"] == "1"]
    assert int(row["step"]) == newest.step
    assert "its emergency checkpoint committed, nothing lost" in preemption.words()


def test_a_grace_period_too_short_for_the_save_keeps_the_last_checkpoint_and_says_so(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A 1 s grace period is shorter than what an emergency save needs (its measured
    saves and the 3 s to exit): on the stop no save is started, the newest committed
    checkpoint stays whole and is what a restart takes, and `status` says what happened."""
    store = running_with_grace("grace1", "1s", tmp_path, env)
    waiter = as_from_a_terminal(["wait", "grace1", "--local"], env, tmp_path)
    time.sleep(2)  # following
    waiter.send_signal(signal.SIGINT)
    _, stderr = waiter.communicate(timeout=60)
    assert waiter.returncode == 130, stderr
    preemption, _ = sigterm_of(store)
    assert not preemption.saving and preemption.committed is None
    assert preemption.needed_s is not None and preemption.needed_s > 1
    rows = checkpoint_log.read(store)
    assert rows and not any(r["emergency"] == "1" for r in rows)
    newest = checkpoints.committed(store)[0]
    assert newest.step == max(int(r["step"]) for r in rows) < preemption.step
    assert checkpoints.fetch(store, newest, tmp_path / "newest") is not None  # whole
    text = kctl("status", "grace1", "--local", env=env, cwd=tmp_path).stdout
    assert f"SIGTERM at step {preemption.step}: no emergency save started" in text, text
    assert "the newest committed checkpoint stands whole" in text
    assert "a preempted pod has 1s: it does NOT fit" in text
    assert kctl("delete", "grace1", "--local", env=env, cwd=tmp_path).returncode == 0


def test_commands_explain_what_is_wrong(tmp_path: Path, env: dict[str, str]) -> None:
    quickstart = str(ROOT / "examples/quickstart.yaml")
    no_cluster = {**env, "KUBECONFIG": str(tmp_path / "none")}
    out = kctl("apply", quickstart, env=no_cluster, cwd=tmp_path)
    assert out.returncode == 1 and "no usable Kubernetes configuration" in out.stderr
    assert "--local" in out.stderr
    out = kctl("logs", "nope", "--local", env=env, cwd=tmp_path)
    assert out.returncode == 1 and "no local job default/nope" in out.stderr
    assert (
        kctl("delete", "nope", "--local", "--ignore-not-found", env=env, cwd=tmp_path).returncode
        == 0
    )
    out = kctl("collect", "nope", env=no_cluster, cwd=tmp_path)
    assert out.returncode == 1 and "no usable Kubernetes configuration" in out.stderr
    out = kctl("report", "nope", env=env, cwd=tmp_path)
    assert out.returncode == 1 and "kctl-train collect" in out.stderr
    assert "Traceback" not in out.stderr
    elsewhere = job_file(tmp_path, "ns", "  command: [sleep, '1']\n").read_text()
    (tmp_path / "ns.yaml").write_text(elsewhere.replace("{name: ns}", "{name: ns, namespace: a}"))
    out = kctl("apply", "ns.yaml", "-n", "b", "--local", "--dry-run=client", env=env, cwd=tmp_path)
    assert out.returncode == 2 and "metadata.namespace is 'a' but -n says 'b'" in out.stderr
    forced = ["apply", "ns.yaml", "-n", "b", "--force-namespace", "--local", "--dry-run=client"]
    out = kctl(*forced, env=env, cwd=tmp_path)
    assert out.returncode == 0 and "namespace: b" in out.stdout
    # A rendered object keeps its namespace (its pods' spec names it too), as kubectl does.
    rendered = kctl("render", "ns.yaml", "--operator", "trainjob", env=env, cwd=tmp_path)
    (tmp_path / "ns-trainjob.yaml").write_text(rendered.stdout)
    moved = ["apply", "ns-trainjob.yaml", "-n", "b", "--local", "--dry-run=client"]
    out = kctl(*moved, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "TrainJob ns: metadata.namespace is 'a' but -n says 'b'" in out.stderr
    out = kctl(*moved[:2], "-n", "a", *moved[4:], env=env, cwd=tmp_path)
    assert out.returncode == 0 and "namespace: a" in out.stdout, out.stderr


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; only its parent has not collected it


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_status_and_delete_after_the_supervisor_died(tmp_path: Path, env: dict[str, str]) -> None:
    path = job_file(tmp_path, "orphan", "  command: [sleep, '120']\n")
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)  # no --wait: detached
    assert out.returncode == 0 and "created (local, " in out.stdout, out.stderr
    body = status_of("orphan", env, tmp_path)
    replica = body["local"]["replicas"][0]["pid"]
    assert replica and running(replica)
    os.kill(body["local"]["supervisorPid"], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while (state := kctl("status", "orphan", "--local", env=env, cwd=tmp_path)).returncode == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert "Unknown" in state.stdout
    assert kctl("delete", "orphan", "--local", env=env, cwd=tmp_path).returncode == 0
    deadline = time.monotonic() + 20
    while running(replica):
        assert time.monotonic() < deadline, "the orphaned replica still runs"
        time.sleep(0.2)


# A replica that leaves a process in a session of its own (as torchrun does with its
# workers), and records that process's PID.
ESCAPES = (
    "  command: [python, -c, 'import os, subprocess, sys, time; "
    'p = subprocess.Popen(["sleep", "300"], start_new_session=True); '
    'open(sys.argv[1] + "/" + str(p.pid), "w").close(); time.sleep(300)\', \'{pids}\']\n'
)


def apply_escaping_job(tmp_path: Path, env: dict[str, str], name: str) -> tuple[Path, Path]:
    """Apply (detached) a job whose replica leaves an escaped process; returns the
    directory its PIDs are recorded in, and the job file. As processes: the marker
    sweep is what these tests prove (in a pod sandbox, PID 1's end ends them all, and
    test_pod_sandbox.py proves that)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    path = job_file(tmp_path, name, ESCAPES.format(pids=pids))
    env[MODE_ENV] = PROCESS
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return pids, path


def escaped_pids(directory: Path, count: int, timeout: float = 30) -> set[int]:
    deadline = time.monotonic() + timeout
    while len(found := {int(p.name) for p in directory.iterdir()}) < count:
        assert time.monotonic() < deadline, f"only {found} started"
        time.sleep(0.1)
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_killed_replica_takes_every_process_it_started_with_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    pids, _ = apply_escaping_job(tmp_path, env, "escape")
    (first,) = escaped_pids(pids, 1)
    replica = status_of("escape", env, tmp_path)["local"]["replicas"][0]["pid"]
    os.killpg(replica, signal.SIGKILL)  # the container's group: not the escaped process
    deadline = time.monotonic() + 30
    while running(first):
        assert time.monotonic() < deadline, "the replica's escaped process survived it"
        time.sleep(0.1)
    escaped_pids(pids, 2)  # restarted: a new one, alone
    assert kctl("delete", "escape", "--local", env=env, cwd=tmp_path).returncode == 0
    assert not any(running(pid) for pid in escaped_pids(pids, 2))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_reapply_after_the_supervisor_died_takes_the_replicas_over_or_ends_them(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """As processes too, each replica's keeper records its exit, so re-applying the same
    spec after the supervisor died follows the running replica (same process, same
    rendezvous port); a changed spec ends the old run first, escaped processes included."""
    pids, path = apply_escaping_job(tmp_path, env, "twice")
    (old,) = escaped_pids(pids, 1)
    body = status_of("twice", env, tmp_path)
    old_replica = body["local"]["replicas"][0]["pid"]
    os.kill(body["local"]["supervisorPid"], signal.SIGKILL)
    time.sleep(0.5)
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "pytorchjob.kubeflow.org/twice unchanged" in out.stdout, out.stdout
    assert "a new one took over twice-master-0" in out.stdout + out.stderr
    again = status_of("twice", env, tmp_path)["local"]
    assert again["replicas"][0]["pid"] == old_replica and again["port"] == body["local"]["port"]
    assert running(old) and running(old_replica)

    os.kill(again["supervisorPid"], signal.SIGKILL)
    time.sleep(0.5)
    path.write_text(path.read_text().replace("time.sleep(300)", "time.sleep(299)"))
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0 and "twice replaced" in out.stdout, out.stdout + out.stderr
    assert not running(old) and not running(old_replica)
    new = escaped_pids(pids, 2) - {old}
    assert new and all(running(pid) for pid in new)
    assert kctl("delete", "twice", "--local", env=env, cwd=tmp_path).returncode == 0


def test_a_supervisor_that_cannot_start_a_replica_fails_the_job(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A replica that cannot even be started (here a NUL byte in its env, which the spec
    refuses but a hand-made manifest can carry) fails the job with the reason."""
    from operator_client.backends.local import LocalBackend
    from operator_client.render import render
    from operator_client.spec.loader import load_job

    path = job_file(tmp_path, "nul", "  command: [sleep, '1']\n  env: {A: x}\n")
    manifest = render(load_job(path).job)
    container = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    for item in container["containers"][0]["env"]:
        if item["name"] == "A":
            item["value"] = "x\x00y"
    os.environ["KCTL_TRAIN_HOME"] = env["KCTL_TRAIN_HOME"]
    try:
        LocalBackend(Path(env["KCTL_TRAIN_HOME"])).submit(manifest)
    finally:
        del os.environ["KCTL_TRAIN_HOME"]
    deadline = time.monotonic() + 30
    while (body := status_of("nul", env, tmp_path))["local"]["state"] not in ("Failed",):
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    assert "null byte" in body["status"]["conditions"][-1]["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as a full disk (root only)")
def test_a_full_disk_names_its_cause_in_the_status(tmp_path: Path, env: dict[str, str]) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        # Room for the run's first objects, not for its checkpoints: the disk fills mid-run.
        (disk / "filler").write_bytes(b"\0" * ((1 << 20) - (24 << 10)))
        store = disk / "store"  # a store kctl-train makes on the nearly full disk
        path = job_file(
            tmp_path,
            "full",
            "  train:\n"
            "    model: operator_client.examples.regression:RegressionModel\n"
            "    data: operator_client.examples.regression:RegressionData\n"
            "    trainer: {max_steps: 40}\n"
            f"  storage: {{uri: '{store.as_uri()}'}}\n"
            "  checkpoint: {every: 10 steps}\n"
            "  fault: {backoffLimit: 0}\n",
        )
        out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
        assert out.returncode == 1, out.stderr
        message = status_of("full", env, tmp_path)["status"]["conditions"][-1]["message"]
        assert "No space left on device" in message, message
        assert "No space left on device" in out.stderr
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def test_apply_names_the_checkpoint_the_run_will_resume_from(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The newest committed checkpoint is corrupt: the run resumes from the one before,
    and apply says so. (The store of an earlier run as processes: it belongs to this user.)"""
    from operator_client.backends.local.file_store import MARKER
    from operator_client.storage.file import FileStore

    env = {**env, "KCTL_TRAIN_LOCAL_PODS": "process"}
    store = FileStore(tmp_path / "store" / "default" / "resumer")
    for step in (10, 20):
        model = tmp_path / f"m{step}.ckpt"
        model.write_bytes(os.urandom(1024))
        checkpoints.publish(
            store, {checkpoints.MODEL_FILE: model}, step=step, epoch=0, attempt=1,
            world_size=1, keep=2,
        )  # fmt: skip
    (store.root / checkpoints.checkpoint_key(20) / checkpoints.MODEL_FILE).write_bytes(b"bad")
    (tmp_path / "store" / MARKER).touch()
    path = job_file(
        tmp_path,
        "resumer",
        f"  command: [sleep, '0']\n  storage: {{uri: '{(tmp_path / 'store').as_uri()}'}}\n",
    )
    out = kctl("apply", str(path), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the store holds a checkpoint at step 10;" in out.stderr, out.stderr


def test_a_command_job_that_stored_nothing_has_nothing_to_collect(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """apply --wait and wait: a command job that succeeded and wrote no checkpoint exits 0,
    saying there is nothing to collect (not "nothing is stored", exit 1)."""
    path = job_file(tmp_path, "plain", "  command: [sleep, '0']\n")
    out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "nothing to collect: nothing is stored at" in out.stderr, out.stderr
    out = kctl(  # the spelling wait had before --to: a hidden alias for a release
        "wait", "plain", "--local", "--collect-to", str(tmp_path / "r"), env=env, cwd=tmp_path
    )
    assert out.returncode == 0 and "nothing to collect" in out.stderr, out.stderr
