"""The three places the runtime reaches into Lightning's private API, kept together, each
with why no public one serves. check() runs them by name when the Trainer is built, so a
Lightning without them stops the run at its start, naming the seam and the version,
instead of at the first save hours in (tests/test_lightning_seams.py runs them on the
installed Lightning; pyproject pins the range they were read from).

- checkpoint_dict: the checkpoint Lightning would save (model, optimizers, schedulers,
  loops, the callbacks' and the module's on_save_checkpoint), on *every* rank. The public
  Trainer.save_checkpoint builds the same dict but hands it to the strategy, which writes
  on global rank 0 alone, behind a barrier; the every-rank save needs each rank's dict,
  with no collective on the training thread.
- validation_follows: the fit loop's own predicate for "a validation runs after this
  batch". Only it knows every val_check_interval form (a fraction, a batch count, a time,
  per epoch or across epochs, an endless loader); a copy would drift from it.
- without_signal_handlers: Lightning's SIGTERM handler broadcasts from inside the signal
  handler, which breaks gloo when ranks are signalled mid-collective; the Trainer has no
  switch for it. The runtime's own handler only sets a flag that the ranks agree on at a
  batch boundary (runtime/agreement.py).
"""

from __future__ import annotations

from typing import Any

from .context import RuntimeConfigError

# (the seam, the private attribute path on a Trainer)
SEAMS = (
    ("checkpoint_dict", "_checkpoint_connector.dump_checkpoint"),
    ("validation_follows", "fit_loop.epoch_loop._should_check_val_fx"),
    ("validation_follows", "fit_loop._data_fetcher"),
    ("without_signal_handlers", "_signal_connector.register_signal_handlers"),
)


def check(trainer: Any) -> None:
    """RuntimeConfigError naming what is missing when this Lightning lacks a seam."""
    import lightning

    missing = [f"{seam} (Trainer.{path})" for seam, path in SEAMS if not _has(trainer, path)]
    if missing:
        raise RuntimeConfigError(
            f"Lightning {lightning.__version__} lacks what kctl-train's runtime uses from "
            f"its private API: {', '.join(missing)}; install the range pyproject.toml pins "
            "(lightning>=2.6,<3) in the image"
        )


def checkpoint_dict(trainer: Any) -> dict[str, Any]:
    """The full checkpoint Lightning would save now, on this rank."""
    checkpoint: dict[str, Any] = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
    return checkpoint


def validation_follows(trainer: Any) -> bool:
    """Whether Lightning validates after the training batch that just ended."""
    loop = trainer.fit_loop.epoch_loop
    return bool(loop._should_check_val_fx(trainer.fit_loop._data_fetcher))


def without_signal_handlers(trainer: Any) -> None:
    """Keep Lightning from installing its own signal handlers on fit."""
    trainer._signal_connector.register_signal_handlers = lambda: None


def _has(obj: Any, path: str) -> bool:
    for name in path.split("."):
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True
