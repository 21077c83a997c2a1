"""Per-rank outputs: commit protocol and aggregation, with 3+ ranks and planted leftovers."""

from __future__ import annotations

import csv
import io
import json
import threading
from pathlib import Path
from typing import Any

from operator_client.runstore import checkpoints
from operator_client.runstore.aggregate import aggregate_all
from operator_client.runstore.outputs import RankOutputs, commit_epoch, epoch_key
from operator_client.storage import open_store


def run_ranks(world: int, fn: Any) -> None:
    """Run fn(rank, gather, barrier) on `world` threads with real collective semantics."""
    barrier = threading.Barrier(world)
    slots: list[Any] = [None] * world
    lock = threading.Lock()

    def gather_for(rank: int) -> Any:
        def gather(obj: Any) -> list[Any]:
            with lock:
                slots[rank] = obj
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out

        return gather

    errors: list[BaseException] = []

    def target(rank: int) -> None:
        try:
            fn(rank, gather_for(rank), barrier.wait)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def commit_ranks(
    store: Any, scratch: Path, world: int, split: str, rows: Any, epochs: tuple[int, ...] = (0,)
) -> None:
    """Every rank records rows(rank, epoch) (None: no rows) and commits each epoch."""

    def rank_fn(rank: int, gather: Any, barrier: Any) -> None:
        outputs = RankOutputs(scratch / f"rank{rank}", rank)
        for epoch in epochs:
            mine = rows(rank, epoch)
            if mine is not None:
                outputs.record(split, epoch, mine)
            commit_epoch(
                store,
                outputs,
                epoch,
                rank=rank,
                world_size=world,
                attempt=1,
                gather=gather,
                barrier=barrier,
            )

    run_ranks(world, rank_fn)


def test_three_ranks_every_row_once_in_rank_order(tmp_path: Path) -> None:
    store = open_store(tmp_path.joinpath("store").as_uri())
    world = 12  # rank 10 and 11 must sort after 2, numerically

    # the last field of each row has a comma and a quote, and no rank writes a trailing
    # newline by hand: rows must never glue together
    commit_ranks(
        store,
        tmp_path,
        world,
        "val",
        lambda rank, epoch: [{"id": f"{rank}-{i}", "note": 'a,"b"'} for i in range(3)],
        epochs=(0, 1),
    )
    assert aggregate_all(store, tmp_path / "agg") == {"val": 2 * world * 3}
    rows = rows_of(store.get_bytes("outputs/val/all.csv").decode())
    assert rows[0] == ["epoch", "rank", "id", "note"]
    body = rows[1:]
    assert [r[2] for r in body] == [
        f"{rk}-{i}" for _ in (0, 1) for rk in range(world) for i in range(3)
    ]
    assert [int(r[1]) for r in body[: 3 * world : 3]] == list(range(world))
    assert all(r[3] == 'a,"b"' for r in body)
    assert sum(1 for r in rows if r[0] == "epoch") == 1


def test_stale_files_of_a_larger_world_are_never_aggregated(tmp_path: Path) -> None:
    store = open_store(tmp_path.joinpath("store").as_uri())

    def commit(world: int, tag: str) -> None:
        commit_ranks(
            store, tmp_path / tag, world, "val", lambda rank, epoch: [{"id": f"{tag}{rank}"}]
        )

    commit(4, "old")  # epoch 0 with 4 ranks, then a restart with 2 ranks re-runs epoch 0
    commit(2, "new")
    assert store.exists("outputs/val/epoch-00000/rank-00003.csv")  # leftover is still there
    manifest = json.loads(store.get_bytes(epoch_key("val", 0) + "/MANIFEST.json"))
    assert manifest["worldSize"] == 2
    aggregate_all(store, tmp_path / "agg")
    rows = rows_of(store.get_bytes("outputs/val/all.csv").decode())
    assert [r[2] for r in rows[1:]] == ["new0", "new1"]


def test_a_rank_without_rows_contributes_an_empty_member(tmp_path: Path) -> None:
    store = open_store(tmp_path.joinpath("store").as_uri())

    commit_ranks(
        store, tmp_path, 3, "test", lambda rank, epoch: None if rank == 1 else [{"id": rank}]
    )
    aggregate_all(store, tmp_path / "agg")
    rows = rows_of(store.get_bytes("outputs/test/all.csv").decode())
    assert rows == [["epoch", "rank", "id"], ["0", "0", "0"], ["0", "2", "2"]]


def test_checkpoint_retention_and_corrupt_resume(tmp_path: Path) -> None:
    store = open_store(tmp_path.joinpath("store").as_uri())
    for step in (10, 20, 30):
        f = tmp_path / f"ck{step}"
        f.write_bytes(f"weights {step}".encode())
        checkpoints.publish(
            store, {checkpoints.MODEL_FILE: f}, step=step, epoch=0, attempt=1, world_size=2, keep=2
        )
    assert [m.step for m in checkpoints.committed(store)] == [30, 20]
    assert not store.list("checkpoints/step-000000000010")
    assert store.get_bytes(checkpoints.LATEST) == b"checkpoints/step-000000000030"
    # An upload that crashed before its manifest is invisible to readers.
    store.put_bytes("checkpoints/step-000000000040/model.ckpt", b"partial")
    store.put_bytes("checkpoints/step-000000000030/model.ckpt", b"bit rot")
    found = checkpoints.newest_verified(store, tmp_path / "dl")
    assert found is not None
    assert found[0].step == 20
    assert found[1].read_bytes() == b"weights 20"
