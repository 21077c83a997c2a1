"""The goodput account (runstore/goodput.py) on event histories whose answer is known, and
the runtime's recording of them (runtime/event_log.py, step_profiler.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operator_client.runstore import events
from operator_client.runstore.events import RankEvents
from operator_client.runstore.goodput import (
    CATEGORIES,
    PodTimes,
    Preemption,
    account,
    pod_of,
    preemption_line,
)
from operator_client.storage import open_store


def e(t: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "event": event, **fields}


def window(start: float, end: float, first: int, last: int, **spent: float) -> dict[str, Any]:
    """A `steps` event: batches first..last, with the seconds spent in each part."""
    fields = {f"{k}_s": spent.get(k, 0.0) for k in ("train", "data", "stall", "eval")}
    return e(end, "steps", start=start, count=last - first, **{"from": first, "to": last}, **fields)


def attempt(
    offset: float, resume: int | None, windows: list[dict[str, Any]], end: str
) -> list[dict[str, Any]]:
    """One attempt of a rank: start-up 2 s (1 s imports, 1 s rendezvous), a restore of 1 s
    when resuming, training from `offset + 3` (or + 4), then the windows and the exit."""
    out = [
        e(offset, "process_start"),
        e(offset + 1, "rendezvous_start"),
        e(offset + 2, "rendezvous_end"),
    ]
    begin = offset + 2
    if resume is not None:
        out += [
            e(offset + 2, "restore_start", step=resume),
            e(offset + 3, "restore_end", step=resume),
        ]
        begin = offset + 3
    out.append(e(begin + 1, "first_step", step=resume or 0))
    out += windows
    if end:
        out.append(e(windows[-1]["t"] + 1, "exit", reason=end))
    return out


def test_one_attempt_two_ranks_every_second_accounted() -> None:
    """Rank 0: start 0..3 (imports 1, rendezvous 1, set-up 1), a window 3..13 of which 1 s
    waits for data and 0.5 s is held by checkpoint saves (the other 8.5 s are its steps),
    finish 1 s. Rank 1 starts 1 s later and finishes with rank 0: 1 s pending."""
    r0 = attempt(0, None, [window(3, 13, 0, 100, train=8, data=1, stall=0.5)], "finished")
    r1 = attempt(1, None, [window(4, 13, 0, 100, train=8, data=0.5)], "finished")
    result = account([RankEvents(1, 0, r0), RankEvents(1, 1, r1)])
    assert result is not None and result.wall == 14 and result.total == 28
    zero, one = (r.categories for r in result.ranks)
    assert zero["startup"] == 2 and zero["rendezvous"] == 1 and zero["productive"] == 8.5
    assert zero["data_loading"] == 1 and zero["checkpoint_stall"] == 0.5
    assert zero["other"] == pytest.approx(0) and zero["finish"] == 1
    assert zero["pending"] == 0 and zero["idle_at_end"] == 0
    assert one["pending"] == 1 and one["finish"] == 1 and one["productive"] == 8.5
    for r in result.ranks:
        assert sum(r.categories.values()) == pytest.approx(result.wall)
    assert result.goodput == pytest.approx(17 / 28)
    assert set(result.to_json()["categories"]) == set(CATEGORIES)


def test_a_kill_after_a_checkpoint_costs_the_steps_redone_and_the_gap() -> None:
    """Killed at step 50 (its last recorded window), the checkpoint at step 30: 20 steps
    of 0.1 s are wasted; from the last event (t=8) to the next process (t=20) is recovery."""
    killed = attempt(0, None, [window(3, 8, 0, 50, train=5)], end="")
    resumed = attempt(20, 30, [window(24, 31, 30, 100, train=7)], "finished")
    result = account([RankEvents(1, 0, killed), RankEvents(2, 0, resumed)])
    assert result is not None
    c = result.ranks[0].categories
    assert c["wasted_progress"] == pytest.approx(2.0)
    assert c["productive"] == pytest.approx(5 - 2 + 7)
    assert c["recovery"] == pytest.approx(12)
    assert c["restore"] == 1 and c["startup"] == pytest.approx(2 + 2)
    assert sum(c.values()) == pytest.approx(result.wall)
    # Per attempt: where each began and got to, the steps redone, and its own time (the
    # 12 s between them are the job's recovery, in neither).
    first, second = result.attempts
    assert (first.resumed_from, first.reached, first.wasted_steps) == (0, 50, 20)
    assert (second.resumed_from, second.reached, second.wasted_steps) == (30, 100, 0)
    assert (first.start, first.end, second.start, second.end) == (0, 8, 20, 32)
    assert first.categories["wasted_progress"] == pytest.approx(2.0)
    assert sum(first.categories.values()) == pytest.approx(8)
    assert sum(second.categories.values()) == pytest.approx(12)
    attempts = result.to_json()["attempts"]
    assert [(a["attempt"], a["start_s"], a["end_s"]) for a in attempts] == [(1, 0, 8), (2, 20, 32)]


SIGTERM = {"step": 50, "after_s": 0.1, "needed_s": 4.2, "left_s": 0.9, "grace_s": 1}


@pytest.mark.parametrize(
    ("stop", "commit", "words"),
    [
        ({"saving": True}, 50, "SIGTERM at step 50: its emergency checkpoint committed"),
        ({"saving": False, "saved_before": True}, None, "committed, nothing lost"),
        (
            {"saving": True},
            None,
            "the emergency save did not commit (SIGKILL cut it, or a peer was lost before "
            "its part)",
        ),
        ({"saving": True}, 40, "did not commit"),  # a commit of an earlier save only
        (
            {"saving": False},
            None,
            "no emergency save started (it needs about 4.2s, 0.9s were left of the 1s grace "
            "period): the newest committed checkpoint stands whole",
        ),
        (
            {"saving": False, "needed_s": None, "left_s": -2},
            None,
            "no emergency save started (0.0s were left of the 1s grace period)",
        ),
    ],
)
def test_what_a_sigterm_did_is_said_and_the_next_resume_beside_it(
    stop: dict[str, Any], commit: int | None, words: str
) -> None:
    """Rank 0's `sigterm` and `emergency_commit` events become the attempt's preemption,
    in words for `status` with where the next attempt resumed, and in summary.json."""
    killed = attempt(0, None, [window(3, 8, 0, 50, train=5)], end="")
    killed.insert(-1, e(8, "sigterm", **{**SIGTERM, **stop}))
    if commit is not None:
        killed.insert(-1, e(8, "emergency_commit", step=commit, key="checkpoints/x"))
    resumed = attempt(20, 40, [window(24, 31, 40, 100, train=7)], "finished")
    other_rank = attempt(0, None, [window(3, 8, 0, 50, train=5)], end="")
    other_rank.insert(-1, e(8, "sigterm", **{**SIGTERM, "step": 7}))  # rank 0's is read
    result = account(
        [RankEvents(1, 0, killed), RankEvents(2, 0, resumed), RankEvents(1, 1, other_rank)]
    )
    assert result is not None
    line = preemption_line(result)
    assert line is not None and line.startswith("attempt 1: SIGTERM at step 50: ")
    assert words in line and line.endswith("; attempt 2 resumed from step 40")
    saved = result.to_json()["attempts"][0]["preemption"]
    assert Preemption.from_json(saved) == result.attempts[0].preemption
    assert result.attempts[1].preemption is None


@pytest.mark.parametrize(
    "value",
    [None, [], {"step": "50", "left_s": 1}, {"step": 50}, {"step": 50, "left_s": float("nan")}],
)
def test_a_preemption_a_pod_or_a_person_wrote_badly_is_none(value: Any) -> None:
    assert Preemption.from_json(value) is None


def test_a_slow_rank_is_named_and_an_empty_run_has_no_account() -> None:
    fast = attempt(
        0, None, [window(3, 13, 0, 100, train=5), window(13, 23, 100, 200, train=5)], "finished"
    )
    slow = attempt(
        0, None, [window(3, 13, 0, 100, train=8), window(13, 23, 100, 200, train=8)], "finished"
    )
    result = account([RankEvents(1, 0, fast), RankEvents(1, 1, slow)])
    assert result is not None
    assert [r.straggler for r in result.ranks] == [pytest.approx(1.0), pytest.approx(1.6)]
    assert account([]) is None and account([RankEvents(1, 0, [])]) is None


def test_an_event_file_a_pod_wrote_is_read_within_bounds(tmp_path: Path) -> None:
    """Lines of another shape (not JSON, no finite time, a window or step that is not a
    number) are passed over, so the account never meets them."""
    path = tmp_path / "rank.jsonl"
    bad = [
        b"not json",
        b'{"t": "x", "event": "exit"}',
        b"[1]",
        b'{"t": NaN, "event": "exit"}',
        b'{"t": 2, "event": "steps", "start": 1, "from": "a", "to": 3, "count": 1}',
        b'{"t": 2, "event": "first_step", "step": true}',
    ]
    path.write_bytes(events.dumps([e(1.0, "process_start")]) + b"\n".join(bad) + b"\n")
    assert [x["event"] for x in events.read(path, 1, 0).events] == ["process_start"]
    assert events.parse_key("events/attempt-00002/rank-00003.jsonl") == (2, 3)
    assert events.parse_key("events/attempt-2/rank-3.jsonl") is None


def test_the_event_log_writes_the_whole_file_once_bound(tmp_path: Path) -> None:
    from operator_client.runtime.event_log import EventLog

    store = open_store((tmp_path / "store").as_uri() + "/")
    clock = iter(range(100))
    log = EventLog(3, clock=lambda: float(next(clock)))
    log.record("process_start")
    log.bind(store, 2)
    log.record("exit", reason="finished")
    assert log.exited
    log.close()
    written = events.parse(2, 3, store.get_bytes(events.key(2, 3)).decode().splitlines())
    assert [(x["t"], x["event"]) for x in written.events] == [(0.0, "process_start"), (1.0, "exit")]


def test_the_event_log_writes_the_attempts_start_as_soon_as_it_is_bound(tmp_path: Path) -> None:
    """A pod killed long before the next periodic write (here an hour away) has still left
    when its attempt began."""
    from operator_client.runtime.event_log import EventLog

    store = open_store((tmp_path / "store").as_uri() + "/")
    log = EventLog(0, every=3600)
    log.record("process_start")
    log.bind(store, 1)
    deadline = time.monotonic() + 60
    while not store.exists(events.key(1, 0)) and time.monotonic() < deadline:
        time.sleep(0.05)
    written = events.parse(1, 0, store.get_bytes(events.key(1, 0)).decode().splitlines())
    assert [x["event"] for x in written.events] == ["process_start"]
    log.close()


def test_the_step_profiler_sums_what_lightning_times_into_windows() -> None:
    """Lightning's action names: a data fetch, a training batch, our checkpoint callback's
    hook, validation between its module hooks; anything else is not timed."""
    from operator_client.runtime.event_log import EventLog
    from operator_client.runtime.step_profiler import StepProfiler

    now = [0.0]
    log = EventLog(0)
    profiler = StepProfiler(log, clock=lambda: now[0])
    step = [0]
    profiler.step = lambda: step[0]

    def timed(action: str, seconds: float) -> None:
        profiler.start(action)
        now[0] += seconds
        profiler.stop(action)

    for _ in range(3):
        timed("[_TrainingEpochLoop].train_dataloader_next", 0.5)
        timed("run_training_batch", 2.0)
        step[0] += 1
        timed("[Callback]CheckpointCallback.on_train_batch_end", 0.25)
        timed("[Callback]ProgressCallback.on_train_batch_end", 0.25)  # part of the step
    timed("[Callback]OutputsCallback.on_train_epoch_end", 0.5)
    timed("[LightningModule]Model.on_validation_start", 0.0)
    now[0] += 1.0
    timed("[LightningModule]Model.on_validation_end", 0.0)
    profiler.close_window()
    first, steps = log.events[0], log.events[1]
    assert first["event"] == "first_step" and first["step"] == 0
    assert steps["event"] == "steps" and (steps["from"], steps["to"], steps["count"]) == (0, 3, 3)
    assert (steps["train_s"], steps["data_s"], steps["stall_s"], steps["eval_s"]) == (
        6,
        1.5,
        0.75,
        1,
    )
    profiler.close_window()  # nothing trained since: no event
    assert len(log.events) == 2
    # The outputs' commit and a save that waited for the validation run inside it: each
    # counted once, as what it is.
    timed("run_training_batch", 2.0)
    timed("[LightningModule]Model.on_validation_start", 0.0)
    now[0] += 1.0
    timed("[Callback]OutputsCallback.on_validation_epoch_end", 0.25)
    timed("[Callback]CheckpointCallback.on_validation_end", 0.5)
    timed("[LightningModule]Model.on_validation_end", 0.0)
    profiler.close_window()
    third = log.events[2]
    assert (third["outputs_s"], third["stall_s"], third["eval_s"]) == (0.25, 0.5, 1.0)


NAMES = ["process_start", "rendezvous_start", "rendezvous_end", "restore_start", "restore_end",
         "first_step", "steps", "exit", "imports_done", "agent_start",
         "agent_rendezvous_start", "agent_preloaded"]  # fmt: skip
NUMBER = st.floats(-1e3, 1e3, allow_nan=False)
EVENT = st.builds(
    lambda t, name, n: {
        "t": t, "event": name, "step": int(n), "start": t - abs(n), "from": int(n),
        "to": int(n) + 5, "count": 5, "train_s": abs(n) / 2, "data_s": abs(n) / 4,
    },
    NUMBER, st.sampled_from(NAMES), NUMBER,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2), st.lists(EVENT, max_size=6))))
def test_any_history_adds_up(files: list[tuple[int, int, list[dict[str, Any]]]]) -> None:
    """Whatever the events (out of order, overlapping, a restore without a start), each
    rank's categories add up to the job's wall time: `other` takes what is not explained."""
    result = account([RankEvents(a, r, ev) for a, r, ev in files])
    if result is None:
        return
    for r in result.ranks:
        assert sum(r.categories.values()) == pytest.approx(result.wall, abs=1e-6)


def test_the_pods_split_the_time_before_each_ranks_process() -> None:
    """Rank 0's pod was made at 0, bound to a node at 2, waited 1.5 s for its image, its
    process started at 5: 2 s queued, 1.5 s pulling, 1.5 s starting its container. Rank
    1's pod (a TrainJob's: its name is the hostname plus JobSet's suffix) was made at 1
    and never said when it was bound. A pod made after the process it is said to hold is
    another attempt's: not used."""
    r0 = attempt(5, None, [window(8, 18, 0, 100, train=10)], "finished")
    r1 = attempt(6, None, [window(9, 18, 0, 100, train=9)], "finished")
    r0[0]["host"], r1[0]["host"] = "job-node-0-0", "job-node-0-1"
    pods = [
        PodTimes("job-node-0-0-abcde", created=0, scheduled=2, started=4, image_pull_s=1.5),
        PodTimes("job-node-0-1-fghij", created=1, image_pull_s=9),
    ]
    result = account([RankEvents(1, 0, r0), RankEvents(1, 1, r1)], pods)
    assert result is not None and result.start == 0 and result.wall == 19
    zero, one = (r.categories for r in result.ranks)
    assert [zero[c] for c in ("pending", "queued", "image_pull", "container_start")] == [
        0, 2, 1.5, 1.5,
    ]  # fmt: skip
    # A pull longer than the time before the process (an event of the pod's restart):
    # capped.
    assert [one[c] for c in ("pending", "queued", "image_pull", "container_start")] == [
        1, 0, 5, 0,
    ]  # fmt: skip
    for r in result.ranks:
        assert sum(r.categories.values()) == pytest.approx(result.wall)
    late = [PodTimes("job-node-0-0-abcde", created=5.5), PodTimes("job-node-0-1-fghij")]
    again = account([RankEvents(1, 0, r0), RankEvents(1, 1, r1)], late)
    assert again is not None and again.start == 5
    assert [r.categories["queued"] + r.categories["container_start"] for r in again.ranks] == [
        0,
        0,
    ]
    assert pod_of("job-master-0", [PodTimes("job-master-0")]) == PodTimes("job-master-0")
    assert pod_of("job-master-1", [PodTimes("job-master-10")]) is None


def test_the_agent_a_worker_was_forked_from_is_start_up_and_rendezvous() -> None:
    """The pod (made at 0, bound at 1) started its agent at 2; the agent imported torch
    and Lightning and checked the store until 6, then waited for the other pods until it
    forked the worker at 8. Without the agent's events all 7 s before the worker would
    be the container's start; with them: 1 s container start, 4 s more start-up, 2 s
    more rendezvous."""
    plain = attempt(8, None, [window(11, 21, 0, 100, train=10)], "finished")
    plain[0]["host"] = "job-worker-0"
    forked = [e(2, "agent_start"), e(6, "agent_rendezvous_start"), *plain]
    pods = [PodTimes("job-worker-0", created=0, scheduled=1)]
    before, after = (account([RankEvents(1, 0, f)], pods) for f in (plain, forked))
    assert before is not None and after is not None
    was, now = before.ranks[0].categories, after.ranks[0].categories
    assert (was["container_start"], was["startup"], was["rendezvous"]) == (7, 2, 1)
    assert (now["container_start"], now["startup"], now["rendezvous"]) == (1, 6, 3)
    assert now["queued"] == 1 and now["productive"] == 10
    assert sum(now.values()) == pytest.approx(after.wall) == before.wall


@pytest.mark.parametrize(
    ("preloaded", "startup", "rendezvous"),
    [
        (None, 6, 3),  # an agent that records no end of its imports
        (5, 6, 3),  # Lightning imported before the rendezvous began: as above
        (7.5, 7.5, 1.5),  # imported 1.5 s into the rendezvous: start-up until then
        (8, 8, 1),  # imported as the rendezvous ended: the fork waited for it
    ],
)
def test_an_agent_importing_beside_its_rendezvous_is_start_up_until_it_has_imported(
    preloaded: float | None, startup: float, rendezvous: float
) -> None:
    """The agent of the test above, importing Lightning in a thread from its rendezvous'
    start at 6: until it has, its time is start-up, then waiting for the other pods."""
    plain = attempt(8, None, [window(11, 21, 0, 100, train=10)], "finished")
    plain[0]["host"] = "job-worker-0"
    marks = [e(2, "agent_start"), e(6, "agent_rendezvous_start")]
    marks += [e(preloaded, "agent_preloaded")] if preloaded is not None else []
    pods = [PodTimes("job-worker-0", created=0, scheduled=1)]
    result = account([RankEvents(1, 0, sorted(marks, key=lambda x: x["t"]) + plain)], pods)
    assert result is not None
    c = result.ranks[0].categories
    assert (c["container_start"], c["startup"], c["rendezvous"]) == (1, startup, rendezvous)
    assert sum(c.values()) == pytest.approx(result.wall)


def test_an_attempt_that_died_starting_up_counts_as_start_up() -> None:
    """The first attempt failed 3 s after its rendezvous (a bad checkpoint, an import
    error in the model): start-up, not `other`; then the gap to the next attempt."""
    died = [
        e(0, "process_start"),
        e(1, "rendezvous_start"),
        e(2, "rendezvous_end"),
        e(5, "exit", reason="failed"),
    ]
    again = attempt(9, None, [window(12, 20, 0, 50, train=7)], "finished")
    result = account([RankEvents(1, 0, died), RankEvents(2, 0, again)])
    assert result is not None
    c = result.ranks[0].categories
    assert c["other"] == pytest.approx(0) and c["recovery"] == 4
    assert c["startup"] == pytest.approx(4 + 2) and c["rendezvous"] == 2
    assert result.attempts[0].reached is None and result.attempts[0].resumed_from is None
