"""A checkpoint is what a pod wrote: reading one (resume, `collect --consolidate`) never runs
code it holds. Each case plants a pickle that would create a canary file when unpickled
and checks it is refused by name with the canary absent (runtime/checkpoint_format.py)."""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path

import pytest

from operator_client.collect.collect import CollectError

torch = pytest.importorskip("torch", reason="the runtime extra (torch) is not installed")
import torch.distributed.checkpoint as dcp  # noqa: E402 - needs torch

from operator_client.client.collecting import consolidate_with_torch  # noqa: E402
from operator_client.collect.results import consolidate_all  # noqa: E402
from operator_client.runtime import checkpoint_format as cf  # noqa: E402
from operator_client.runtime.snapshot import Snapshotter  # noqa: E402

from .test_checkpoint_commit import lightning_like  # noqa: E402


class Exploit:
    """Unpickled, it creates the file at `path` (as a forged checkpoint would run code)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


def save(directory: Path, state: dict[str, object]) -> Path:
    """`state` saved as kctl-train saves it: one writer's share, skeleton and RNG included."""
    share = Snapshotter(0, 1).take(state, 7, 0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        dcp.save(
            dict(share.items), storage_writer=dcp.FileSystemWriter(str(directory)), no_dist=True
        )
    return directory


def test_a_checkpoint_kctl_train_wrote_loads_with_its_rng_states(tmp_path: Path) -> None:
    import random

    random.seed(3)
    expected = random.random()
    random.seed(3)
    directory = save(tmp_path / "ckpt", lightning_like())
    loaded = cf.load(directory)
    assert loaded["global_step"] == 7
    assert list(loaded["optimizer_states"][0]["state"]) == [0, 1]
    cf.restore_rng(loaded[cf.RNG_KEY][0])
    assert random.random() == expected


def forge(directory: Path, part: str, canary: Path) -> None:
    """Replace one part of a real checkpoint with a pickle that runs code."""
    if part == "metadata":
        (directory / cf.METADATA).write_bytes(pickle.dumps(Exploit(canary)))
        return
    # The skeleton or the RNG states: a real DCP checkpoint whose bytes item is hostile.
    buffer = io.BytesIO()
    torch.save({"x": Exploit(canary)}, buffer)
    item = cf.SKELETON if part == "skeleton" else cf.rng_item(0)
    share = Snapshotter(0, 1).take(lightning_like(), 7, 0)
    items = dict(share.items)
    items[item] = io.BytesIO(buffer.getvalue())
    for old in directory.iterdir():
        old.unlink()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        dcp.save(items, storage_writer=dcp.FileSystemWriter(str(directory)), no_dist=True)


@pytest.mark.parametrize("part", ["metadata", "skeleton", "rng"])
def test_a_forged_checkpoint_is_refused_and_runs_nothing(tmp_path: Path, part: str) -> None:
    canary = tmp_path / "pwned"
    directory = save(tmp_path / "ckpt", lightning_like())
    forge(directory, part, canary)
    with pytest.raises(cf.UnsafeCheckpoint):
        cf.load(directory)
    assert not canary.exists()


def test_a_forged_single_file_checkpoint_is_refused(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}, "hook": Exploit(canary)}, path)
    with pytest.raises(cf.UnsafeCheckpoint, match=r"refused to load it"):
        cf.load(path)
    assert not canary.exists()


def test_collect_consolidate_names_the_forged_checkpoint(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    directory = save(tmp_path / "checkpoints" / "step-7", lightning_like())
    forge(directory, "metadata", canary)
    summary = {"checkpoints": [{"path": "checkpoints/step-7", "format": "dcp"}]}
    with pytest.raises(CollectError, match=r"--consolidate: .*step-7: its .metadata names "):
        consolidate_all(tmp_path, summary, consolidate_with_torch)
    assert not canary.exists()
    assert not (directory / "model.ckpt").exists()


class EnumByName:
    """Pickles as newer Pythons pickle an enum member: getattr(its class, its name)."""

    def __init__(self, cls: object, name: str) -> None:
        self.cls, self.name = cls, name

    def __reduce__(self) -> tuple[object, tuple[object, str]]:
        return (getattr, (self.cls, self.name))


def test_dcp_enums_pickled_by_name_load_and_nothing_else_does(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING, Metadata

    directory = save(tmp_path / "ckpt", lightning_like())
    metadata = cf._reader(directory).read_metadata()
    metadata.planner_data = EnumByName(_MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT")
    (directory / cf.METADATA).write_bytes(pickle.dumps(metadata))
    loaded = cf._reader(directory).read_metadata()
    assert loaded.planner_data is _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    for cls, name in ((Metadata, "__init__"), (_MEM_FORMAT_ENCODING, "__class__")):
        metadata.planner_data = EnumByName(cls, name)
        (directory / cf.METADATA).write_bytes(pickle.dumps(metadata))
        with pytest.raises(cf.UnsafeCheckpoint, match="asks for getattr"):
            cf._reader(directory).read_metadata()
