"""The agent (runtime/main.py): what the forked workers find imported, and how it joins
the Master's next rendezvous when the store of the last one went."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from torch.distributed.elastic.rendezvous.api import (
    RendezvousConnectionError,
    RendezvousTimeoutError,
)

from operator_client.runtime import agent_clock, main
from operator_client.runtime.rankenv import LaunchPlan
from operator_client.spec import load_job_text
from operator_client.spec.model import TrainingJob


def test_preload_imports_what_a_worker_needs_and_leaves_a_missing_one_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(main, "WORKER_PRELOAD", ("json", "kctl_train_no_such_module"))
    monkeypatch.delitem(sys.modules, "json")
    main.preload_worker()  # no ImportError: the worker reports it with its own message
    assert "json" in sys.modules and "kctl_train_no_such_module" not in sys.modules
    assert "agent_preloaded" in agent_clock.MARKS


def test_lightning_workers_are_forked_from_the_agent() -> None:
    plan = LaunchPlan("test", "1", 1, "localhost:29500", "job", 0)
    assert "--start-method=fork" in main.torchrun_argv(plan, None)
    assert "--start-method=fork" not in main.torchrun_argv(plan, ["python", "train.py"])


def _job(max_restarts: int) -> TrainingJob:
    text = (
        "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: rejoin}\n"
        "spec:\n  image: local\n  train: {model: m:M}\n  nodes: 2\n"
        f"  fault: {{maxRestarts: {max_restarts}}}\n"
    )
    return load_job_text(text).job


LOST = RendezvousConnectionError("The connection to the C10d store has failed.")


@pytest.mark.parametrize(
    ("failures", "max_restarts", "finished", "code", "launches"),
    [
        ([], 3, False, 0, 1),
        ([LOST], 3, False, 0, 2),  # the Master's store went: joined its next one
        ([LOST, LOST, LOST], 3, False, 0, 4),
        ([LOST, LOST], 1, False, 1, 2),  # more than maxRestarts: the pod's restart joins
        ([LOST], 0, False, 1, 1),
        ([RendezvousTimeoutError("timed out")], 3, False, 1, 1),  # not a lost store
        ([LOST], 3, True, 0, 1),  # the run finished meanwhile: nothing to join
    ],
)
def test_an_agent_whose_rendezvous_store_went_joins_the_next_one_in_process(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failures: list[Exception],
    max_restarts: int,
    finished: bool,
    code: int,
    launches: int,
) -> None:
    pending, launched = list(failures), []
    awaited: list[tuple[Any, ...]] = []

    def launch(args: list[str], lightning: bool) -> None:
        launched.append(args)
        if pending:
            raise pending.pop(0)

    monkeypatch.setattr(main, "launch", launch)
    monkeypatch.setattr(main, "already_finished", lambda job: finished)

    def await_port(*args: Any) -> bool:
        awaited.append(args)
        return True

    monkeypatch.setattr(main, "await_port", await_port)
    monkeypatch.setattr(agent_clock, "MARKS", {"agent_start": 1.0, "agent_preloaded": 5.0})
    caplog.set_level(logging.INFO, "kctl_train.runtime")
    assert main.run_agent(_job(max_restarts), ["--x"], "master-0:23456", 0.1) == code
    assert len(launched) == launches
    # A next rendezvous is a new attempt: its workers record its own start, not the
    # pod's first imports.
    rejoined = bool(failures) and (launches > 1 or finished)
    assert ("agent_preloaded" in agent_clock.MARKS) is not rejoined
    assert (agent_clock.MARKS["agent_start"] > 1.0) is rejoined
    # Before each new launch the agent waits for the Master's store at the rendezvous pace.
    assert awaited == [("master-0", 23456, 0.1)] * (launches - 1)
    if failures:
        said = "joining the next one (1 of" if rejoined else "exiting"
        assert f"the rendezvous failed: {failures[0]}" in caplog.text and said in caplog.text
