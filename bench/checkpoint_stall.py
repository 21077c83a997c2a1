"""What a checkpoint costs training, side by side in one run (issue 21): a ~100M-parameter
model (heavy_model.py: 6 x Linear(4096), Adam, fp32: 1.2 GB of state) on CPU, 2 ranks
(one kctl-train-runtime agent, 2 gloo workers), trained with a checkpoint every EVERY
steps and with none. Prints:
- each save's training-thread stall: its step's time less the median step's;
- each save's wall time to commit (metrics/checkpoints.csv, where the code writes it);
- the step-time ratio: mean step with checkpoints / without (goal <= 1.05 at every 100);
- copying the state into memory, timed alone here (all of it, and one rank's half):
  the stall goal is <= 2x that copy;
- resume: launch to the first step of a run resuming from the last checkpoint, and of a
  fresh start;
- each rank's staging buffers: what they made its resident memory grow by, over its
  share of the state (goal <= 1.1x; the runtime logs both when it makes them).
Runs whichever operator_client is importable: PYTHONPATH=<another checkout> measures that
one (the "before" of a change). Asserts nothing.
Usage: python bench/checkpoint_stall.py [STEPS] [EVERY]
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# The runtime's line when a rank has made its staging buffers (runtime/snapshot.py).
STAGING = re.compile(
    r"rank (\d+): staging buffers for a ([\d.]+) GiB share made in [\d.]+s: "
    r"resident memory \+?(-?[\d.]+) GiB"
)
BIN = Path(sys.executable).parent
JOB = """
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata: {{name: stall}}
spec:
  image: local
  train:
    model: heavy_model:HeavyModel
    modelArgs: {{timings: "{timings}"}}
    data: heavy_model:HeavyData
    trainer: {{max_steps: {steps}, log_every_n_steps: 50, num_sanity_val_steps: 0{trainer}}}
  processesPerNode: {nproc}
  checkpoint: {{every: {every} steps, keep: 2}}
  storage: {{uri: "file://{store}"}}
{extra}"""


def run(
    tmp: Path, tag: str, store: str, steps: int, every: int, gpu: bool = False
) -> dict[str, object]:
    """One fit through kctl-train-runtime; its per-step times, launch to first step. On a
    GPU: one process, bf16-mixed; on CPU: two processes."""
    from operator_client.spec import load_job_text
    from operator_client.spec.document import canonical_json, spec_document

    timings = tmp / f"timings-{tag}"
    text = JOB.format(
        timings=timings, steps=steps, every=every, store=tmp / store,
        trainer=", precision: bf16-mixed" if gpu else "", nproc=1 if gpu else 2,
        extra="  resources: {gpus: 1}\n" if gpu else "",
    )  # fmt: skip
    job = load_job_text(text).job
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "KCTL_"))}
    env |= {
        "KCTL_TRAIN_SPEC": canonical_json(spec_document(job)),
        "KCTL_TRAIN_SCRATCH": str(tmp / f"scratch-{tag}"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(BENCH), env.get("PYTHONPATH")) if p),
        "MASTER_PORT": "29641",
    }
    launched = time.time()
    done = subprocess.run([str(BIN / "kctl-train-runtime")], env=env, capture_output=True,
                          text=True, timeout=3600)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tag} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    rank0 = json.loads((timings / "rank-0.json").read_text())
    starts = rank0["starts"]
    return {
        "durations": [b - a for a, b in itertools.pairwise(starts)],
        "first_step": rank0["first_step"],
        "to_first_step": rank0["first_wall"] - launched,
        "log": done.stdout + done.stderr,
    }


def copy_seconds() -> tuple[float, float, int]:
    """Seconds to copy the model's and Adam's state into memory (all, and one rank's
    half: the largest tensors alternate between 2 writers), and its bytes."""
    import torch

    sys.path.insert(0, str(BENCH))
    from heavy_model import HeavyModel

    model = HeavyModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-6)
    model.net(torch.randn(2, 4096)).pow(2).mean().backward()
    optimizer.step()
    tensors = [*model.state_dict().values()]
    tensors += [t for s in optimizer.state.values() for t in s.values() if t.dim()]
    best_all = best_half = float("inf")
    half = sorted(tensors, key=lambda t: -t.numel())[::2]
    for _ in range(3):
        start = time.perf_counter()
        copies = [t.clone() for t in tensors]
        best_all = min(best_all, time.perf_counter() - start)
        del copies
        start = time.perf_counter()
        copies = [t.clone() for t in half]
        best_half = min(best_half, time.perf_counter() - start)
        del copies
    return best_all, best_half, sum(t.numel() * t.element_size() for t in tensors)


def saves_of(tmp: Path, store: str = "store-ckpt") -> list[dict[str, str]]:
    found = list(tmp.glob(f"{store}/default/stall/metrics/checkpoints.csv"))
    if not found:
        return []
    with found[0].open() as fh:
        return list(csv.DictReader(fh))


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 210
    every = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    import operator_client

    print(f"operator_client from {Path(operator_client.__file__).parent}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        quiet = run(tmp, "none", "store-none", steps, 10**9)
        ckpt = run(tmp, "ckpt", "store-ckpt", steps, every)
        resumed = run(tmp, "resumed", "store-ckpt", steps + 10, every)
        saves = saves_of(tmp)
    copy_all, copy_half, nbytes = copy_seconds()
    q, c = quiet["durations"], ckpt["durations"]
    assert isinstance(q, list) and isinstance(c, list)
    median = statistics.median(q)
    save_steps = [s for s in range(every, steps, every)]
    print(f"state: {nbytes / 2**30:.2f} GiB (model + Adam); copy into memory: all "
          f"{copy_all:.3f} s, one rank's half {copy_half:.3f} s")  # fmt: skip
    print(f"median step without checkpoints: {median:.3f} s over {len(q)} steps")
    stalls = []
    for step in save_steps:
        stall = c[step - 1] - statistics.median(c)
        stalls.append(stall)
        row = next((r for r in saves if r["step"] == str(step)), None)
        wall = f"{float(row['write_s']) + float(row['commit_s']):.2f} s" if row else "n/a"
        reported = f", reported stall {float(row['stall_s']):.3f} s" if row else ""
        times = stall / copy_half
        print(f"save at step {step}: training stalled {stall:.3f} s ({times:.2f}x the copy of "
              f"one rank's half){reported}; written and committed in {wall}")  # fmt: skip
    ratio = statistics.mean(c) / statistics.mean(q)
    # Each run's mean over its own median: what the saves add, whatever speed the shared
    # machine gave that run (two runs of the same job differ by several percent here).
    own = (statistics.mean(c) / statistics.median(c)) / (statistics.mean(q) / median)
    print(f"step-time ratio, a checkpoint every {every} steps vs none: {ratio:.3f} raw, "
          f"{own:.3f} against each run's own median step (goal <= 1.05)")  # fmt: skip
    print(f"launch to first step: fresh {quiet['to_first_step']:.1f} s, resuming from step "
          f"{resumed['first_step']} {resumed['to_first_step']:.1f} s")  # fmt: skip
    log = ckpt["log"]
    assert isinstance(log, str)
    for rank, share, grew in STAGING.findall(log):
        print(f"rank {rank}: staging buffers grew its resident memory {float(grew):.2f} GiB "
              f"for a {float(share):.2f} GiB share: {float(grew) / float(share):.3f}x "
              "(goal <= 1.1x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
