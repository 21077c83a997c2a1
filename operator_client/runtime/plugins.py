"""What the job names by import path, built on every rank: the model, the data, and the
user's Lightning loggers and callbacks (spec.train.loggers, spec.train.callbacks) beside
the runtime's own; the goodput account logged to those loggers, and TensorBoard's files
uploaded to the run store.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.loggers import Logger, TensorBoardLogger

from ..runstore import events, goodput, tensorboard
from ..runstore.goodput import Account
from ..spec.model import LightningPlugin
from ..storage import ObjectStore
from .context import RuntimeConfigError
from .event_log import EventLog

log = logging.getLogger("kctl_train.runtime")


def import_object(path: str, field: str) -> Any:
    """`package.module:Name` -> the object, with an error naming the spec field."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeConfigError(
            f"{field}: cannot import {module_name!r} ({exc}); is the "
            "package installed in the image?"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise RuntimeConfigError(f"{field}: {module_name!r} has no {attr!r}") from None


def _class(plugin: LightningPlugin, field: str, kind: type) -> type:
    """The entry's class, imported once and checked to be a Lightning `kind`."""
    cls = import_object(plugin.class_, f"{field}.class")
    if not (isinstance(cls, type) and issubclass(cls, kind)):
        raise RuntimeConfigError(
            f"{field}.class: {plugin.class_} is not a Lightning {kind.__name__}"
        )
    if issubclass(cls, Checkpoint):
        raise RuntimeConfigError(
            f"{field}.class: {plugin.class_} saves Lightning's own checkpoints, which the "
            "runtime turns off: its checkpoints are spec.checkpoint; remove this callback"
        )
    return cls


def _build(cls: type, plugin: LightningPlugin, field: str, args: dict[str, Any]) -> Any:
    try:
        return cls(**args)
    except Exception as exc:  # the user's class: any error is the job's, said with its field
        raise RuntimeConfigError(
            f"{field}.args: {plugin.class_}(...) failed: {type(exc).__name__}: {exc}"
        ) from None


def tensorboard_dir(scratch: Path) -> Path:
    """Where TensorBoardLoggers write unless told otherwise (uploaded by rank 0)."""
    return scratch / tensorboard.PREFIX


def build_loggers(plugins: Sequence[LightningPlugin], scratch: Path, attempt: int) -> list[Logger]:
    """spec.train.loggers. A TensorBoardLogger without `save_dir` writes into the run
    store's tensorboard/ (one version per attempt, so attempts never overwrite each
    other)."""
    built = []
    for i, plugin in enumerate(plugins):
        field, args = f"spec.train.loggers[{i}]", dict(plugin.args)
        cls = _class(plugin, field, Logger)
        if issubclass(cls, TensorBoardLogger) and "save_dir" not in args:
            args["save_dir"] = str(tensorboard_dir(scratch))
            args.setdefault("name", "")
            args.setdefault("version", f"attempt-{attempt:05d}")
        built.append(_build(cls, plugin, field, args))
    return built


def build_callbacks(plugins: Sequence[LightningPlugin]) -> list[Callback]:
    """spec.train.callbacks."""
    built = []
    for i, plugin in enumerate(plugins):
        field = f"spec.train.callbacks[{i}]"
        built.append(_build(_class(plugin, field, Callback), plugin, field, dict(plugin.args)))
    return built


def goodput_metrics(found: Account) -> dict[str, float]:
    """The goodput account as logger metrics: its fraction and each category's
    rank-seconds, under `goodput/`."""
    return {
        "goodput/goodput": found.goodput,
        "goodput/total_s": found.total,
        **{f"goodput/{name}_s": seconds for name, seconds in found.categories.items()},
    }


class GoodputToLoggers(Callback):  # type: ignore[misc]
    """Logs the goodput account so far to the user's loggers when training ends (rank 0,
    from every rank's events, each flushed first: collective), before Lightning closes
    the loggers. A logger that fails here (its service is down) is said, not fatal."""

    def __init__(
        self,
        loggers: Sequence[Logger],
        events: EventLog,
        store: ObjectStore,
        rank: int,
        barrier: Callable[[], None],
    ) -> None:
        self.loggers, self.events, self.store = loggers, events, store
        self.rank, self.barrier = rank, barrier

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.events.flush()
        self.barrier()
        if self.rank != 0:
            return
        found = goodput.account(events.read_store(self.store))
        if found is None:
            return
        for logger in self.loggers:
            try:
                logger.log_metrics(goodput_metrics(found), step=trainer.global_step)
            except Exception as exc:  # the user's logger; the run does not depend on it
                log.warning("logger %s: %s: %s", type(logger).__name__, type(exc).__name__, exc)


def upload_tensorboard(store: ObjectStore, scratch: Path) -> None:
    """Rank 0 at the end of an attempt (finished, preempted or crashed): the TensorBoard
    files into the run store's tensorboard/."""
    uploaded = tensorboard.upload(store, tensorboard_dir(scratch))
    if uploaded:
        log.info("uploaded %d TensorBoard files to %s/", uploaded, tensorboard.PREFIX)
