"""Where a checkpoint share goes: the present path (DCP's FileSystemWriter into the rank's
scratch, then boto3 uploads it: storage/s3.py) against AWS's s3torchconnector (DCP's
S3StorageWriter/S3StorageReader straight to S3), side by side in one run against a moto S3
server in its own process on loopback (issue 21, item 3). Prints seconds and MB/s to write
and to read back a share of SIZE MiB, each the best of 3. s3torchconnector is not a
dependency: install it to measure it (pip install s3torchconnector); without it, or when
its client cannot talk to the server, the line says why.
Usage: python bench/checkpoint_store.py [SIZE_MIB]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from operator_client.storage import open_store
from operator_client.storage.transfer import download_many

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ beside bench/
from tests.moto_process import moto_bucket

BUCKET = "ckpt"


def share(size_mib: int) -> dict[str, torch.Tensor]:
    per = size_mib * 2**20 // 4 // 8
    return {f"layer.{i}.weight": torch.randn(per) for i in range(8)}


def best(runs: int, once: Callable[[int], None]) -> float:
    times = []
    for i in range(runs):
        start = time.perf_counter()
        once(i)
        times.append(time.perf_counter() - start)
    return min(times)


def ours(endpoint: str, items: dict[str, torch.Tensor], tmp: Path) -> tuple[float, float]:
    store = open_store(f"s3://{BUCKET}/ours/", endpoint=endpoint, concurrency=16)

    def write(i: int) -> None:
        local = tmp / f"w{i}"
        dcp.save(items, storage_writer=dcp.FileSystemWriter(str(local), sync_files=False),
                 no_dist=True)  # fmt: skip
        for path in local.iterdir():
            store.put_file(f"step-{i}/{path.name}", path)
        shutil.rmtree(local)

    def read(i: int) -> None:
        local = tmp / f"r{i}"
        keys = [o.key for o in store.list(f"step-{i}/")]
        download_many(store, [(k, local / k.rsplit("/", 1)[1]) for k in keys], concurrency=16)
        target = {k: torch.empty_like(v) for k, v in items.items()}
        dcp.load(target, storage_reader=dcp.FileSystemReader(str(local)), no_dist=True)
        shutil.rmtree(local)

    return best(3, write), best(3, read)


def connector(endpoint: str, items: dict[str, torch.Tensor]) -> tuple[float, float] | str:
    try:
        from s3torchconnector import S3ClientConfig
        from s3torchconnector._s3client import S3Client
        from s3torchconnector.dcp import S3FileSystem, S3StorageReader, S3StorageWriter
    except ImportError as exc:
        return f"not measured: s3torchconnector is not installed ({exc})"
    config = S3ClientConfig(force_path_style=True)
    client = S3Client("us-east-1", endpoint=endpoint, s3client_config=config)

    def direct(cls: type, path: str) -> object:
        io = cls("us-east-1", path, s3client_config=config)
        io.fs = S3FileSystem("us-east-1", s3_client=client)  # the loopback endpoint
        return io

    def write(i: int) -> None:
        dcp.save(items, storage_writer=direct(S3StorageWriter, f"s3://{BUCKET}/conn/step-{i}"),
                 no_dist=True)  # fmt: skip

    def read(i: int) -> None:
        target = {k: torch.empty_like(v) for k, v in items.items()}
        reader = direct(S3StorageReader, f"s3://{BUCKET}/conn/step-{i}")
        dcp.load(target, storage_reader=reader, no_dist=True)

    try:
        return best(3, write), best(3, read)
    except Exception as exc:  # the client's own errors: what it said is the answer
        return f"not measured: s3torchconnector failed against this server: {exc}"[:300]


def main() -> int:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    items = share(size)
    with moto_bucket(BUCKET) as endpoint, tempfile.TemporaryDirectory() as tmp:
        write, read = ours(endpoint, items, Path(tmp))
        other = connector(endpoint, items)
    print(f"a checkpoint share of {size} MiB, moto S3 on loopback, best of 3:")
    print(f"  present (DCP to scratch, then boto3): write {write:.2f} s ({size / write:.0f} MB/s)"
          f", read {read:.2f} s ({size / read:.0f} MB/s)")  # fmt: skip
    if isinstance(other, str):
        print(f"  s3torchconnector: {other}")
    else:
        w, r = other
        print(f"  s3torchconnector (DCP S3StorageWriter/Reader): write {w:.2f} s "
              f"({size / w:.0f} MB/s, {write / w:.2f}x), read {r:.2f} s ({size / r:.0f} MB/s, "
              f"{read / r:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
