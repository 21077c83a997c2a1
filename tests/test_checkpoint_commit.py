"""The pieces of a checkpoint save, one at a time: the state split into tensors and a
skeleton and back (every key keeps its type), the writers' plan, the part records and the
commit that waits for all of them (runstore/checkpoints.py, runtime/checkpoint_format.py)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest

from operator_client.runstore import checkpoints
from operator_client.storage.file import FileStore

torch = pytest.importorskip("torch", reason="the runtime extra (torch) is not installed")
from operator_client.runtime import checkpoint_format as cf  # noqa: E402 - needs torch
from operator_client.runtime.snapshot import Snapshotter  # noqa: E402


def lightning_like() -> dict[str, object]:
    weights = OrderedDict([("layer.weight", torch.ones(3, 2)), ("layer.bias", torch.zeros(3))])
    return {
        "global_step": 7,
        "state_dict": weights,
        "optimizer_states": [{"state": {0: {"step": torch.tensor(7.0), "exp_avg": torch.ones(3, 2)},
                                        1: {"step": torch.tensor(7.0), "exp_avg": torch.ones(3)}},
                              "param_groups": [{"lr": 0.1, "params": [0, 1]}]}],
        "loops": {"fit_loop": {"epoch_progress": {"total": {"completed": 2}}}},
        "pair": (torch.arange(2), "x"),
    }  # fmt: skip


def test_flatten_and_rebuild_keep_every_key_and_container_type() -> None:
    state = lightning_like()
    skeleton, tensors = cf.flatten(state)
    assert set(tensors) == {
        "state_dict.layer.weight", "state_dict.layer.bias", "optimizer_states.0.state.0.step",
        "optimizer_states.0.state.0.exp_avg", "optimizer_states.0.state.1.step",
        "optimizer_states.0.state.1.exp_avg", "pair.0",
    }  # fmt: skip
    back = cf.rebuild(skeleton, tensors)
    assert isinstance(back["state_dict"], OrderedDict)
    assert list(back["optimizer_states"][0]["state"]) == [0, 1]  # ints, not "0" and "1"
    assert isinstance(back["pair"], tuple) and back["pair"][1] == "x"
    assert back["loops"] == state["loops"]
    assert back["state_dict"]["layer.weight"] is tensors["state_dict.layer.weight"]


@pytest.mark.parametrize(
    ("sizes", "writers", "plan"),
    [
        ({"a": 8, "b": 4, "c": 4}, 2, {"a": 0, "b": 1, "c": 1}),
        ({"a": 8, "b": 8, "c": 8, "d": 1}, 3, {"a": 0, "b": 1, "c": 2, "d": 0}),
        ({"a": 5, "b": 5}, 1, {"a": 0, "b": 0}),
        ({"z": 1, "y": 1}, 2, {"y": 0, "z": 1}),  # ties: by name, then the lower rank
    ],
)
def test_the_writers_plan_balances_bytes_and_is_the_same_everywhere(
    sizes: dict[str, int], writers: int, plan: dict[str, int]
) -> None:
    assert cf.assign(sizes, writers) == plan
    assert cf.assign(dict(reversed(list(sizes.items()))), writers) == plan


def test_a_snapshot_is_a_copy_and_shares_cover_the_state_once() -> None:
    state = lightning_like()
    shares = [Snapshotter(rank, 2).take(state, 7, 0) for rank in range(2)]
    names = [set(s.items) - {cf.SKELETON, cf.rng_item(r)} for r, s in enumerate(shares)]
    assert not names[0] & names[1]
    assert names[0] | names[1] == set(cf.flatten(state)[1])
    assert cf.SKELETON in shares[0].items and cf.SKELETON not in shares[1].items
    weight = state["state_dict"]["layer.weight"]  # type: ignore[index]
    owner = shares[0] if "state_dict.layer.weight" in shares[0].items else shares[1]
    weight.add_(1)  # training goes on: the snapshot does not
    assert torch.equal(owner.items["state_dict.layer.weight"], torch.ones(3, 2))


def part(store: FileStore, tmp: Path, rank: int, attempt: int = 1) -> checkpoints.Part:
    data = tmp / f"__{rank}_0.distcp"
    data.write_bytes(bytes([rank]) * 10)
    return checkpoints.publish_part(store, {data.name: data}, step=5, rank=rank, attempt=attempt)


def test_the_commit_waits_for_every_part_of_this_attempt(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "run")
    part(store, tmp_path, 0)
    part(store, tmp_path, 1, attempt=0)  # an earlier attempt's leftover: does not count
    with pytest.raises(checkpoints.CommitTimeout, match=r"no part of rank\(s\) \[1\]"):
        checkpoints.gather_parts(store, 5, 1, [0, 1], timeout=0.3)
    store.put_bytes("checkpoints/step-000000000005/__2_0.distcp", b"stale, a larger world")
    parts = [part(store, tmp_path, 0), part(store, tmp_path, 1)]
    assert checkpoints.gather_parts(store, 5, 1, [0, 1], timeout=1) == parts
    manifest = checkpoints.commit(
        store, parts, step=5, epoch=0, attempt=1, world_size=2, keep=2, fmt=checkpoints.DCP,
        timings={"stall": 0.1},
    )  # fmt: skip
    again = checkpoints.Manifest.from_json(store.get_bytes(f"{manifest.key}/MANIFEST.json"))
    assert again == manifest and again.format == "dcp" and again.timings == {"stall": 0.1}
    assert [m.name for m in again.members] == ["__0_0.distcp", "__1_0.distcp"]
    assert not store.exists("checkpoints/step-000000000005/__2_0.distcp")
    assert checkpoints.committed(store) == [manifest]


def test_manifests_of_earlier_versions_still_read_as_one_model_file(tmp_path: Path) -> None:
    old = {"step": 40, "epoch": 1, "attempt": 1, "world_size": 2, "created": 1.0,
           "members": [{"name": "model.ckpt", "size": 3, "sha256": "a" * 64}]}  # fmt: skip
    manifest = checkpoints.Manifest.from_json(json.dumps(old).encode())
    assert manifest.format == checkpoints.LIGHTNING and manifest.timings == {}
    with pytest.raises(ValueError, match="not a checkpoint format"):
        checkpoints.Manifest.from_json(json.dumps({**old, "format": "zip"}).encode())


def test_rank_0_stops_waiting_for_the_part_of_a_writer_that_failed(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "run")
    part(store, tmp_path, 0)
    with pytest.raises(checkpoints.CommitTimeout, match=r"\[1\] \(a writer failed\)"):
        checkpoints.gather_parts(store, 5, 1, [0, 1], timeout=600, abandoned=lambda: True)


def test_apply_predicts_a_resume_from_a_listing_without_reading_the_checkpoint(
    tmp_path: Path,
) -> None:
    """What a pod declares is not downloaded to tell which checkpoint a run resumes from:
    a member missing or of another size than its manifest says rules a checkpoint out."""
    store = FileStore(tmp_path / "run")
    for step in (10, 20, 30):
        model = tmp_path / f"m{step}.ckpt"
        model.write_bytes(bytes(64))
        checkpoints.publish(
            store, {checkpoints.MODEL_FILE: model}, step=step, epoch=0, attempt=1,
            world_size=1, keep=3,
        )  # fmt: skip
    newest = checkpoints.checkpoint_key(30) + "/" + checkpoints.MODEL_FILE
    (store.root / newest).write_bytes(bytes(2))  # declared 64 bytes
    (store.root / checkpoints.checkpoint_key(20) / checkpoints.MODEL_FILE).unlink()
    reads: list[str] = []
    original = store.get_bytes

    def counting(key: str, limit: int | None = None) -> bytes:
        reads.append(key)
        return original(key) if limit is None else original(key, limit)

    store.get_bytes = counting  # type: ignore[method-assign]
    found = checkpoints.first_complete(store, checkpoints.committed(store))
    assert found is not None and found.step == 10
    assert all(key.endswith("MANIFEST.json") for key in reads), reads
