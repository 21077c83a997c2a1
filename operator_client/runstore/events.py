"""The goodput events of a run: what each rank of each attempt did when (docs/STORAGE.md).

`events/attempt-NNNNN/rank-NNNNN.jsonl` in the run store, one JSON object per line:
`{"t": <wall-clock seconds>, "event": <name>, ...}`, written by the runtime
(runtime/event_log.py) and read by the account (goodput.py). Wall clocks are the nodes'
own (NTP keeps a cluster's within milliseconds); the account measures everything from the
job's first event.

Events, in the order a rank writes them:

- `agent_start`, `agent_preloaded`, `agent_rendezvous_start`: when the pod's runtime (PID 1,
  torchrun's agent) began, when it had imported torch and Lightning, and when it had
  checked the store and began its rendezvous with the other pods; recorded by a Lightning
  worker the agent forked in its first round (an in-place restart's wait is the attempts'
  `recovery`);
- `process_start` (`host`: the pod's hostname, which names its pod): the worker process
  began (forked from the agent, or before `import torch`);
- `imports_done`: torch and Lightning are imported;
- `rendezvous_start` / `rendezvous_end`: joining the process group;
- `restore_start` / `restore_end` (`bytes`): fetching and verifying the checkpoint to
  resume from (none on a fresh start);
- `first_step`: the first training batch begins;
- `steps` (`start`, `from`, `to`, `count`, `train_s`, `data_s`, `stall_s`, `outputs_s`,
  `eval_s`): a window of training batches, one every `WINDOW_SECONDS` (so a run of a
  million short steps stays small): when it began, the global steps before and after it,
  how many batches, and the time spent in their forward, backward and optimizer step,
  waiting for their data, stalled by checkpoint saves (and the agreement on them),
  committing per-rank outputs at epoch ends, and validating;
- `sigterm` (rank 0 only; `step`, `after_s`, `saving`, `saved_before`, `needed_s`,
  `left_s`, `grace_s`): training stopped on SIGTERM at `step`, `after_s` seconds after the
  signal; whether an emergency save of that step was started, or that step had its
  checkpoint already; what an emergency save needs on this job (null before any save was
  measured) and what was left of the `grace_s` seconds to SIGKILL. Written at once;
- `emergency_commit` (rank 0 only; `step`, `key`): the emergency save committed (missing
  when SIGKILL cut it);
- `exit` (`reason`: finished, preempted, failed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..storage import ObjectStore, StoreError
from ..untrusted import is_finite_number, read_bytes

PREFIX = "events"
WINDOW_SECONDS = 10.0
# The largest event file a host reads (a pod wrote it): a line is about 200 bytes, a window
# each WINDOW_SECONDS, so this holds a year of windows.
MAX_BYTES = 64 << 20
_KEY = re.compile(rf"{PREFIX}/attempt-(\d{{5}})/rank-(\d{{5}})\.jsonl")


def key(attempt: int, rank: int) -> str:
    """The store key of one rank's events in one attempt."""
    return f"{PREFIX}/attempt-{attempt:05d}/rank-{rank:05d}.jsonl"


def parse_key(name: str) -> tuple[int, int] | None:
    """(attempt, rank) of an event file's key, or None for any other key."""
    found = _KEY.fullmatch(name)
    return (int(found[1]), int(found[2])) if found else None


@dataclass
class RankEvents:
    """One rank's events in one attempt, in the order written."""

    attempt: int
    rank: int
    events: list[dict[str, Any]] = field(default_factory=list)

    def first(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == name), None)

    def all(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]


def parse(attempt: int, rank: int, lines: Iterable[str]) -> RankEvents:
    """The events of one file; a line that is not an event object (a pod wrote the file,
    or died mid-line) is passed over."""
    found = RankEvents(attempt, rank)
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(event, dict)
            and isinstance(event.get("event"), str)
            and all(is_finite_number(event.get(f)) for f in ("t", *NUMBERS.get(event["event"], ())))
        ):
            found.events.append(event)
    return found


# The fields of each event the account reads as numbers (an event without them is passed
# over, as is any line of another shape).
NUMBERS = {
    "steps": (
        "start",
        "from",
        "to",
        "count",
        "train_s",
        "data_s",
        "stall_s",
        "outputs_s",
        "eval_s",
    ),
    "first_step": ("step",),
    "sigterm": ("step", "left_s"),
    "emergency_commit": ("step",),
}


def read(path: Path, attempt: int, rank: int) -> RankEvents:
    """One collected event file (bounded: untrusted.py); a file that cannot be read as one
    gives no events."""
    try:
        text = read_bytes(path, MAX_BYTES).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return RankEvents(attempt, rank)
    return parse(attempt, rank, text.splitlines())


def read_store(store: ObjectStore, *, strict: bool = False) -> list[RankEvents]:
    """Every event file in a run store so far (the runtime's account at the end of a run,
    the goodput so far); a file too large or gone meanwhile is passed over. A store that
    cannot be listed has none, or with `strict` raises its StoreError."""
    found = []
    try:
        listing = store.list(PREFIX + "/")
    except StoreError:
        if strict:
            raise
        return []
    for info in listing:
        parsed = parse_key(info.key)
        if parsed is None or info.size > MAX_BYTES:
            continue
        try:
            data = store.get_bytes(info.key, MAX_BYTES)
        except StoreError:
            continue
        found.append(parse(*parsed, data.decode("utf-8", errors="replace").splitlines()))
    return found


def dumps(events: Iterable[dict[str, Any]]) -> bytes:
    """Events as the file holds them."""
    return b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events)
