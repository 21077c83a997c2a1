"""Step time while a checkpoint uploads in the background vs without (target <= 1.05x).

A CPU training loop (a small MLP, real forward/backward/optimizer steps) runs on the main
thread; in the "upload" phase the runtime's BackgroundPublisher publishes a checkpoint of
SIZE MiB (hash + upload + manifest + retention) to a moto S3 server on loopback. The server
runs in its own process, as a remote store would: in-process it would hold our GIL.
Phases alternate; the median step time of each is compared. Prints; asserts nothing.
Usage: python bench/checkpoint_upload.py [SIZE_MIB] [STEPS_PER_PHASE]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from moto_process import moto_bucket

from operator_client.runstore import checkpoints
from operator_client.storage import open_store


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with moto_bucket("bench") as endpoint:
        run(endpoint, size, steps)


def run(endpoint: str, size: int, steps: int) -> None:
    store = open_store("s3://bench/run/", endpoint=endpoint)

    torch.set_num_threads(1)  # leave the other core to the uploader, as a node would
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 512)

    def step() -> float:
        start = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        blob = Path(tmp) / "model.ckpt"
        blob.write_bytes(os.urandom(size << 20))
        counter = [0]

        def publish(files: dict[str, Path], s: int, epoch: int) -> checkpoints.Manifest:
            return checkpoints.publish(
                store, files, step=s, epoch=epoch, attempt=1, world_size=1, keep=2
            )

        publisher = checkpoints.BackgroundPublisher(publish)
        idle: list[float] = []
        busy: list[float] = []
        uploads = 0
        for _ in range(3):
            idle += [step() for _ in range(steps)]
            publisher.submit({checkpoints.MODEL_FILE: blob}, counter[0], 0)
            counter[0] += 1
            uploads += 1
            phase = []
            while len(phase) < steps or publisher.pending:
                phase.append(step())
            busy += phase
        publisher.close()
    i, b = statistics.median(idle), statistics.median(busy)
    print(
        f"{uploads} uploads of {size} MiB to moto; median step {i * 1e3:.2f} ms idle, "
        f"{b * 1e3:.2f} ms while uploading"
    )
    print(f"ratio {b / i:.3f}x (target <= 1.05x): {'met' if b / i <= 1.05 else 'NOT met'}")


if __name__ == "__main__":
    main()
