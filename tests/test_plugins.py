"""The user's Lightning loggers and callbacks as the runtime builds them
(runtime/plugins.py), and the TensorBoard files it uploads (runstore/tensorboard.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operator_client.runstore import tensorboard
from operator_client.spec.model import LightningPlugin
from operator_client.storage import open_store

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")

from operator_client.runtime.context import RuntimeConfigError
from operator_client.runtime.plugins import build_callbacks, build_loggers


def plugin(cls: str, **args: Any) -> LightningPlugin:
    return LightningPlugin.model_validate({"class": cls, "args": args})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            plugin("lightning.pytorch.callbacks:ModelCheckpoint"),
            "spec.train.callbacks[0].class: lightning.pytorch.callbacks:ModelCheckpoint saves "
            "Lightning's own checkpoints",
        ),
        (
            plugin("collections:OrderedDict"),
            "spec.train.callbacks[0].class: collections:OrderedDict is not a Lightning Callback",
        ),
        (
            plugin("lightning.pytorch.callbacks:EarlyStopping", monitr="val_loss"),
            "spec.train.callbacks[0].args: lightning.pytorch.callbacks:EarlyStopping(...) "
            "failed: TypeError",
        ),
        (plugin("no_such_module:Thing"), "spec.train.callbacks[0].class: cannot import"),
        (plugin("lightning.pytorch.callbacks:Nothing"), "has no 'Nothing'"),
    ],
)
def test_a_callback_that_cannot_be_built_names_its_field(given: LightningPlugin, said: str) -> None:
    with pytest.raises(RuntimeConfigError) as caught:
        build_callbacks([given])
    assert said in str(caught.value)


def test_callbacks_are_built_with_their_args() -> None:
    (stopping,) = build_callbacks(
        [plugin("lightning.pytorch.callbacks:EarlyStopping", monitor="val_loss", patience=4)]
    )
    assert stopping.monitor == "val_loss" and stopping.patience == 4


def test_tensorboard_writes_into_the_run_store_unless_told_where(tmp_path: Path) -> None:
    ours, theirs = build_loggers(
        [
            plugin("lightning.pytorch.loggers:TensorBoardLogger"),
            plugin("lightning.pytorch.loggers:TensorBoardLogger", save_dir=str(tmp_path / "x")),
        ],
        tmp_path / "scratch",
        3,
    )
    assert Path(ours.log_dir) == tmp_path / "scratch/tensorboard/attempt-00003"
    assert Path(theirs.root_dir).parent == tmp_path / "x"
    with pytest.raises(
        RuntimeConfigError, match=r"loggers\[0\].class: .* is not a Lightning Logger"
    ):
        build_loggers([plugin("lightning.pytorch.callbacks:EarlyStopping")], tmp_path, 1)


@pytest.mark.parametrize(
    ("key", "taken"),
    [
        ("tensorboard/attempt-00001/events.out.tfevents.1796528326.host-0", True),
        ("tensorboard/attempt-00001/hparams.yaml", True),
        ("tensorboard/mine/attempt-00001/events.out.tfevents.1.h.2.3", True),
        ("tensorboard/events.out.tfevents.1.h", True),
        ("tensorboard/attempt-00001/notes.txt", False),
        ("tensorboard/../run.json", False),
        ("tensorboard/a/../events.out.tfevents.1", False),
        ("tensorboard/a/b/c/d/e/events.out.tfevents.1", False),
        ("other/events.out.tfevents.1", False),
    ],
)
def test_only_tensorboards_files_are_taken(key: str, taken: bool) -> None:
    assert tensorboard.is_key(key) is taken


def test_upload_takes_tensorboards_files_only(tmp_path: Path) -> None:
    run = tmp_path / "tb/attempt-00002"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.17.h").write_bytes(b"x")
    (run / "hparams.yaml").write_text("{}\n")
    (run / "core").write_bytes(b"not tensorboard's")
    store = open_store((tmp_path / "store").as_uri())
    assert tensorboard.upload(store, tmp_path / "tb") == 2
    assert [o.key for o in store.list()] == [
        "tensorboard/attempt-00002/events.out.tfevents.17.h",
        "tensorboard/attempt-00002/hparams.yaml",
    ]
    assert tensorboard.upload(store, tmp_path / "absent") == 0
