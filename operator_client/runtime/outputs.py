"""Per-sample outputs from user code: `record(self, "val", rows)` in a LightningModule.

    from operator_client.runtime.outputs import record

The rows go to this rank's files (runstore/outputs.py), committed per epoch by the runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..runstore.outputs import RankOutputs

log = logging.getLogger("kctl_train.outputs")

# The recorder of the worker process, set by the runtime; None outside kctl-train.
_ACTIVE: RankOutputs | None = None
_WARNED = False


def activate(outputs: RankOutputs | None) -> None:
    global _ACTIVE
    _ACTIVE = outputs


def record(module: Any, split: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Record per-sample rows for `split` at the module's current epoch. Sanity-check
    validation is ignored; outside kctl-train's runtime this does nothing (with a warning)."""
    global _WARNED
    trainer = getattr(module, "_trainer", None)
    if trainer is not None and trainer.sanity_checking:
        return
    if _ACTIVE is None:
        if not _WARNED:
            log.warning("record(): not running under kctl-train-runtime; rows are dropped")
            _WARNED = True
        return
    epoch = trainer.current_epoch if trainer is not None else 0
    _ACTIVE.record(split, epoch, rows)
