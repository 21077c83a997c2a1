"""GPU checks, for a machine with an NVIDIA GPU (the device machine some sessions are lent):

(a) the quickstart's model on 1 GPU, through kctl-train-runtime (torchrun, NCCL, the
    runtime's callbacks) and through plain Lightning; samples/s of both and the ratio
    (goal >= 0.98);
(b) the pynvml monitor for real during (a): its per-GPU summary;
(c) the checkpoint publish overhead: runtime samples/s with a checkpoint every 100 steps
    against one never (publishing runs in the background; goal >= 0.98);
(d) the heavy model (bench/heavy_model.py: 100M parameters, bf16-mixed, Adam; 1.2 GB of
    state a checkpoint) through the runtime, a checkpoint every 100 steps vs none: mean
    and median step, the step-time ratio, and each save's training-thread stall and write
    time from metrics/checkpoints.csv (issue 21: the stall that was ~3 s per save).

One prepared run, about 5 minutes on an H200. Prints figures; asserts nothing. Without a
GPU it says so and exits 0.  Usage: python bench/gpu.py [STEPS]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
# The model both sides fit: the quickstart's regression, wider, with a timer that prints
# samples/s over the steps after the warm-up (so start-up is not in the figure).
MODEL = """
import time
import lightning as L
from operator_client.examples.regression import RegressionModel

WARMUP = 50


class TimedRegression(RegressionModel):
    def on_train_batch_end(self, outputs, batch, batch_idx):
        step = self.trainer.global_step
        if step == WARMUP:
            self._t0 = time.perf_counter()
            self._samples = 0
        elif step > WARMUP:
            self._samples += batch[0].shape[0]
        if step == self.trainer.max_steps and self.trainer.global_rank == 0:
            rate = self._samples / (time.perf_counter() - self._t0)
            print(f"SAMPLES_PER_S {rate:.1f}", flush=True)
"""
PLAIN = """
import sys
import lightning as L
from timed_model import TimedRegression
from operator_client.examples.regression import RegressionData

L.seed_everything(7)
steps = int(sys.argv[1])
L.Trainer(accelerator="gpu", devices=1, max_steps=steps, logger=False,
          enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
          limit_val_batches=0).fit(
    TimedRegression(features=1024),
    datamodule=RegressionData(samples=65536, features=1024, batch_size=512),
)
"""
JOB = """
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata: {{name: bench-gpu}}
spec:
  image: local
  train:
    model: timed_model:TimedRegression
    modelArgs: {{features: 1024}}
    data: operator_client.examples.regression:RegressionData
    dataArgs: {{samples: 65536, features: 1024, batch_size: 512}}
    trainer: {{max_steps: {steps}, limit_val_batches: 0, num_sanity_val_steps: 0}}
    seed: 7
  processesPerNode: 1
  resources: {{gpus: 1}}
  checkpoint: {{every: {every} steps, keep: 2}}
  monitoring: {{gpuIntervalSeconds: 1}}
  storage: {{uri: "file://{store}"}}
"""
RATE = re.compile(r"SAMPLES_PER_S ([0-9.]+)")


def gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return bool(pynvml.nvmlDeviceGetCount())
    except Exception:
        return False


def rate_of(argv: list[str], env: dict[str, str]) -> float:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    found = RATE.findall(done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"{argv[0]} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return float(found[-1])


def runtime_rate(tmp: Path, steps: int, every: int, env: dict[str, str], tag: str) -> float:
    from operator_client.spec import load_job_text
    from operator_client.spec.document import canonical_json, spec_document

    store = tmp / f"store-{tag}"
    job = load_job_text(JOB.format(steps=steps, every=every, store=store)).job
    run_env = {
        **env,
        "KCTL_TRAIN_SPEC": canonical_json(spec_document(job)),
        "KCTL_TRAIN_SCRATCH": str(tmp / f"scratch-{tag}"),
        "MASTER_PORT": "29631",
    }
    return rate_of([str(BIN / "kctl-train-runtime")], run_env)


def monitor_summary(tmp: Path) -> list[dict[str, object]]:
    from operator_client.runstore.monitor import parse_node_file, summarize

    # Each node's files (one per attempt), as the run store's write_summary reads them.
    csvs: dict[int, list[str]] = {}
    for path in (tmp / "store-ckpt").rglob("monitor/node-*.csv"):
        found = parse_node_file(path.name)
        if found is not None:
            csvs.setdefault(found[0], []).append(path.read_text())
    return summarize(csvs)


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1050
    if not gpu_present():
        print("bench/gpu.py: skipped: no NVIDIA GPU (NVML finds none)")
        return 0
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "timed_model.py").write_text(MODEL)
        (tmp / "plain.py").write_text(PLAIN)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "KCTL_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(tmp), env.get("PYTHONPATH", "")])
        start = time.monotonic()
        plain = rate_of([sys.executable, str(tmp / "plain.py"), str(steps)], env)
        ours = runtime_rate(tmp, steps, 100, env, "ckpt")
        quiet = runtime_rate(tmp, steps, 10**9, env, "none")
        gpus = monitor_summary(tmp)
        took = time.monotonic() - start
    print(f"(a) samples/s on 1 GPU over {steps - 50} steps after warm-up:")
    print(f"    plain Lightning            {plain:12.1f}")
    print(f"    kctl-train-runtime (NCCL)  {ours:12.1f}   ratio {ours / plain:.3f} (goal >= 0.98)")
    print("(b) pynvml monitor summary (node, gpu, samples, utilisation/memory/power/temp):")
    for row in gpus:
        print("    " + json.dumps(row))
    if not gpus:
        print("    no monitor samples were written")
    print("(c) checkpoint publish overhead (every 100 steps vs never):")
    print(f"    runtime, no checkpoints    {quiet:12.1f}")
    print(f"    runtime, every 100 steps   {ours:12.1f}   ratio {ours / quiet:.3f} (goal >= 0.98)")
    print("(d) the 100M-parameter model, bf16-mixed, a checkpoint every 100 steps vs none:")
    for line in heavy(steps):
        print("    " + line)
    print(f"total {time.monotonic() - start:.0f} s (a-c: {took:.0f} s)")
    return 0


def heavy(steps: int) -> list[str]:
    """(d): the heavy model's step times with and without checkpoints, and its saves."""
    import statistics

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from checkpoint_stall import run, saves_of

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        quiet = run(tmp, "none", "store-none", steps, 10**9, gpu=True)
        ckpt = run(tmp, "ckpt", "store-ckpt", steps, 100, gpu=True)
        saves = saves_of(tmp)
    q, c = quiet["durations"], ckpt["durations"]
    assert isinstance(q, list) and isinstance(c, list)
    lines = [
        f"no checkpoints: mean step {statistics.mean(q) * 1e3:.1f} ms, median "
        f"{statistics.median(q) * 1e3:.1f} ms",
        f"every 100:      mean step {statistics.mean(c) * 1e3:.1f} ms, median "
        f"{statistics.median(c) * 1e3:.1f} ms, slowest {max(c):.2f} s; ratio "
        f"{statistics.mean(c) / statistics.mean(q):.3f} (goal <= 1.05)",
    ]
    for row in saves:
        lines.append(
            f"save at step {row['step']}: {int(row['bytes']) / 2**30:.2f} GiB, training stalled "
            f"{float(row['stall_s']):.3f} s, written {float(row['write_s']):.2f} s, committed "
            f"{float(row['commit_s']):.2f} s after"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
