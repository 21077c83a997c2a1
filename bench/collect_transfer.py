"""Download throughput for collect: collect's downloader (parallel GETs, each file verified
and renamed into place) vs a sequential boto3 `download_file` loop, with a raw
concurrent-GET ceiling, all against one moto S3 server (in its own process) in the same run.
Targets: >= 4x for many small files, >= 1.5x for one large object. Prints; asserts nothing.
Usage: python bench/collect_transfer.py [SMALL_FILES] [LARGE_MIB]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from operator_client.collect.collect import Downloader, Item
from operator_client.storage import ObjectStore, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ beside bench/
from tests.moto_process import moto_bucket

CONCURRENCY = 16


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    client: Any, store: ObjectStore, keys: list[str], d: Path, large_mib: int
) -> tuple[float, float, float]:
    """(sequential download_file loop, ours, raw concurrent GET) seconds for keys."""
    (d / "seq").mkdir(parents=True)
    seq = timed(
        lambda: [client.download_file("bench", k, str(d / "seq" / Path(k).name)) for k in keys]
    )
    sizes = {k: client.head_object(Bucket="bench", Key=k)["ContentLength"] for k in keys}
    downloader = Downloader(store, d / "ours", CONCURRENCY, None)
    ours = timed(lambda: downloader.fetch([Item(k.removeprefix("run/"), sizes[k]) for k in keys]))

    def get(key: str, byte_range: str | None = None) -> bytes:
        extra = {"Range": byte_range} if byte_range else {}
        body: bytes = client.get_object(Bucket="bench", Key=key, **extra)["Body"].read()
        return body

    def raw() -> None:
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            if len(keys) > 1:
                list(pool.map(get, keys))
                return
            size = large_mib << 20
            part = size // CONCURRENCY
            ends = [(i + 1) * part - 1 for i in range(CONCURRENCY - 1)] + [size - 1]
            list(
                pool.map(lambda i: get(keys[0], f"bytes={i * part}-{ends[i]}"), range(CONCURRENCY))
            )

    return seq, ours, timed(raw)


def main() -> None:
    small = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    large_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with moto_bucket("bench") as endpoint:
        run(endpoint, small, large_mib)


def run(endpoint: str, small: int, large_mib: int) -> None:
    client = boto3.client(
        "s3", endpoint_url=endpoint, config=Config(max_pool_connections=CONCURRENCY * 2)
    )
    small_keys = [f"run/outputs/val/epoch-00000/rank-{i:05d}.csv" for i in range(small)]
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(
            pool.map(
                lambda k: client.put_object(Bucket="bench", Key=k, Body=os.urandom(4096)),
                small_keys,
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        big.write_bytes(os.urandom(large_mib << 20))
        client.upload_file(str(big), "bench", "run/checkpoints/step-1/model.ckpt")
        big.unlink()
        store = open_store("s3://bench/run/", endpoint=endpoint, concurrency=CONCURRENCY)
        results = {
            "small": measure(client, store, small_keys, Path(tmp) / "small", large_mib),
            "large": measure(
                client, store, ["run/checkpoints/step-1/model.ckpt"], Path(tmp) / "large", large_mib
            ),
        }
    targets = {"small": 4.0, "large": 1.5}
    for name, (seq, ours, ceiling) in results.items():
        label = f"{small} x 4 KiB files" if name == "small" else f"1 x {large_mib} MiB object"
        speedup = seq / ours
        print(
            f"{label:22} sequential {seq:6.2f} s  kctl-train {ours:6.2f} s  raw concurrent "
            f"GET {ceiling:6.2f} s  speed-up {speedup:.2f}x (target >= {targets[name]}x: "
            f"{'met' if speedup >= targets[name] else 'NOT met'}), "
            f"{ceiling / ours:.2f} of the ceiling"
        )


if __name__ == "__main__":
    main()
