"""The agent's preload (runtime/main.py): what the forked workers find imported."""

from __future__ import annotations

import sys

import pytest

from operator_client.runtime import main
from operator_client.runtime.rankenv import LaunchPlan


def test_preload_imports_what_a_worker_needs_and_leaves_a_missing_one_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(main, "WORKER_PRELOAD", ("json", "kctl_train_no_such_module"))
    monkeypatch.delitem(sys.modules, "json")
    main.preload_worker()  # no ImportError: the worker reports it with its own message
    assert "json" in sys.modules and "kctl_train_no_such_module" not in sys.modules


def test_lightning_workers_are_forked_from_the_agent() -> None:
    plan = LaunchPlan("test", "1", 1, "localhost:29500", "job", 0)
    assert "--start-method=fork" in main.torchrun_argv(plan, None)
    assert "--start-method=fork" not in main.torchrun_argv(plan, ["python", "train.py"])
