"""Time to the first training step: kctl-train-runtime vs a bare torchrun of the same module.

Both start from nothing on one node with 2 processes (gloo, CPU), fit the example
regression model, and are timed from process start to the first finished optimizer
step as printed on stdout/stderr. Runs are interleaved; medians compared (target <= 1.15x).
Also timed: from the last line each printed to its exit, the time a pod's replacement
waits for after the work is done (the interpreter's teardown of torch, unless skipped).
Prints the ratios; asserts nothing.  Usage: python bench/first_step.py [RUNS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from operator_client.spec import load_job_text
from operator_client.spec.document import canonical_json, spec_document

BIN = Path(sys.executable).parent
JOB = """\
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata: {name: bench-first-step}
spec:
  image: local
  train:
    model: operator_client.examples.regression:RegressionModel
    data: operator_client.examples.regression:RegressionData
    trainer: {max_steps: 5, log_every_n_steps: 1, num_sanity_val_steps: 0}
  processesPerNode: 2
  checkpoint: {every: 1000 steps}
  storage: {uri: "file://STORE"}
"""

BARE = """
import lightning as L
from operator_client.examples.regression import RegressionData, RegressionModel

class First(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 1 and trainer.global_rank == 0:
            print("FIRST STEP", flush=True)

L.seed_everything(0)
L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=5, logger=False,
          enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
          callbacks=[First()]).fit(RegressionModel(), datamodule=RegressionData())
"""


def time_to(marker: str, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from the start to the marker's line, and from the last line to the exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    found = last = None
    for line in proc.stdout:
        last = time.perf_counter()
        if found is None and marker in line:
            found = last - start
    proc.wait()
    assert found is not None and last is not None, f"{argv[0]} did not reach a step"
    assert proc.returncode == 0, f"{argv[0]} exited with {proc.returncode}"
    return found, time.perf_counter() - last


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ours, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bare.py"
        script.write_text(BARE)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "KCTL_"))}
        for i in range(runs):
            job = load_job_text(JOB.replace("STORE", f"{tmp}/store{i}")).job
            env = {
                **base,
                "KCTL_TRAIN_SPEC": canonical_json(spec_document(job)),
                "KCTL_TRAIN_SCRATCH": f"{tmp}/scratch{i}",
                "MASTER_PORT": "29611",
            }
            ours.append(time_to('"step":1,', [str(BIN / "kctl-train-runtime")], env))
            bare.append(
                time_to(
                    "FIRST STEP",
                    [
                        str(BIN / "torchrun"),
                        "--nproc-per-node=2",
                        "--rdzv-endpoint=127.0.0.1:29612",
                        str(script),
                    ],
                    base,
                )
            )
    o, b = (statistics.median(t[0] for t in side) for side in (ours, bare))
    print(f"first step, median of {runs}: kctl-train-runtime {o:.2f} s, bare torchrun {b:.2f} s")
    print(f"ratio {o / b:.2f}x (target <= 1.15x): {'met' if o / b <= 1.15 else 'NOT met'}")
    o, b = (statistics.median(t[1] for t in side) for side in (ours, bare))
    print(
        f"last line to exit, median of {runs}: kctl-train-runtime {o:.2f} s, "
        f"bare torchrun {b:.2f} s"
    )


if __name__ == "__main__":
    main()
