"""The runtime's seams into Lightning's private API (runtime/lightning_seams.py), run on
the installed Lightning: each does what the runtime takes it for, and a Lightning without
one is refused at the Trainer's build, by name."""

from __future__ import annotations

import signal
import types
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from operator_client.runtime import lightning_seams
from operator_client.runtime.context import RuntimeConfigError


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class Seen(L.Callback):
    """What the seams say at each training batch's end."""

    def __init__(self) -> None:
        self.follows: list[tuple[int, bool]] = []
        self.checkpoint: dict[str, Any] = {}
        self.sigterm: Any = None

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.follows.append((trainer.global_step, lightning_seams.validation_follows(trainer)))
        self.checkpoint = lightning_seams.checkpoint_dict(trainer)
        self.sigterm = signal.getsignal(signal.SIGTERM)  # as the loop runs


def fitted(tmp_path: Any, seams: bool = True, **trainer: Any) -> Seen:
    data = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=1)
    seen = Seen()
    fit = L.Trainer(
        accelerator="cpu",
        max_steps=6,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=[seen],
        **trainer,
    )
    if seams:
        lightning_seams.check(fit)
        lightning_seams.without_signal_handlers(fit)
    fit.fit(Tiny(), data, data)
    return seen


@pytest.mark.parametrize(
    ("trainer", "before_validation"),
    [
        ({"val_check_interval": 2}, [2, 4, 6]),
        ({"val_check_interval": 3}, [3, 6]),
        ({"val_check_interval": 1.0}, [6]),  # once an epoch: after its last batch
    ],
)
def test_validation_follows_is_true_on_the_batches_lightning_validates_after(
    tmp_path: Any, trainer: dict[str, Any], before_validation: list[int]
) -> None:
    seen = fitted(tmp_path, **trainer)
    assert [step for step, follows in seen.follows if follows] == before_validation


def test_checkpoint_dict_is_the_whole_checkpoint_on_this_rank(tmp_path: Any) -> None:
    checkpoint = fitted(tmp_path).checkpoint
    assert checkpoint["global_step"] == 6
    assert set(checkpoint["state_dict"]) == {"layer.weight", "layer.bias"}
    (optimizer,) = checkpoint["optimizer_states"]
    assert optimizer["state"], "Adam's moments are in it"
    assert "fit_loop" in checkpoint["loops"]


def test_without_signal_handlers_leaves_sigterm_to_the_runtime(tmp_path: Any) -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert fitted(tmp_path).sigterm is before
    assert fitted(tmp_path, seams=False).sigterm is not before  # Lightning's own, otherwise


def test_a_lightning_without_a_seam_is_refused_naming_it() -> None:
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    lightning_seams.check(trainer)  # the installed Lightning has them all
    lacking = types.SimpleNamespace(fit_loop=trainer.fit_loop)
    with pytest.raises(RuntimeConfigError) as caught:
        lightning_seams.check(lacking)
    message = str(caught.value)
    assert f"Lightning {L.__version__} lacks" in message
    assert "checkpoint_dict (Trainer._checkpoint_connector.dump_checkpoint)" in message
    assert "without_signal_handlers" in message and "validation_follows" not in message
    assert "lightning>=2.6,<3" in message
