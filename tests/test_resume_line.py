"""Which checkpoint an attempt starts from (runstore/resume_line.py): checkpoint.resume
begins a line once per spec, every later attempt continues it. Pure rules, tables; the
record round trip and the ordering of committed checkpoints on a file store."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_client.runstore import checkpoints, resume_line
from operator_client.runstore.checkpoints import Best, Manifest
from operator_client.runstore.resume_line import Line, ResumeChoiceError, plan
from operator_client.storage import join_key, open_store


def ckpt(step: int, attempt: int, loss: float | None = None) -> Manifest:
    scores = {} if loss is None else {"val_loss": loss}
    return Manifest(step, 0, attempt, 2, [], created=0.0, scores=scores)


# A run of three attempts, newest first as checkpoints.committed orders them.
RUN = [ckpt(500, 3, 0.40), ckpt(400, 2, 0.30), ckpt(300, 2, 0.20), ckpt(100, 1, 0.50)]
BEST = Best("val_loss", "min", 1)
H, OTHER = "hash-of-this-spec", "hash-of-another"


def steps(found: resume_line.Plan) -> list[tuple[int, int]]:
    return [(m.step, m.attempt) for m in found.candidates]


@pytest.mark.parametrize(
    ("resume", "line", "committed", "candidates", "begins", "required"),
    [
        # auto, no line: the newest first (then older ones, should it not verify).
        ("auto", None, RUN, [(500, 3), (400, 2), (300, 2), (100, 1)], None, False),
        ("auto", None, [], [], None, False),
        # A choice begins a line the first time a spec with it runs...
        ("never", None, RUN, [], "never", False),
        ("best", None, RUN, [(300, 2), (400, 2), (500, 3), (100, 1)], "best", True),
        ("best", None, [], [], "best", False),  # nothing saved yet: fresh
        (400, None, RUN, [(400, 2)], "400", True),
        # ... and again for another spec with a choice,
        ("never", Line(OTHER, "never", 2, None), RUN, [], "never", False),
        (300, Line(OTHER, "300", 2, 300), RUN, [(300, 2)], "300", True),
        # but the same spec continues the line: its own checkpoints (attempt >= 4), newest
        # first, then where it began.
        (
            300,
            Line(H, "300", 4, 300),
            [ckpt(350, 5), ckpt(320, 4), *RUN],
            [(350, 5), (320, 4), (300, 2)],
            None,
            True,
        ),
        (300, Line(H, "300", 4, 300), RUN, [(300, 2)], None, True),  # none of its own yet
        ("never", Line(H, "never", 4, None), [ckpt(20, 4), *RUN], [(20, 4)], None, False),
        ("never", Line(H, "never", 4, None), RUN, [], None, False),  # fresh again
        # auto continues whatever line there is.
        ("auto", Line(OTHER, "best", 4, 300), RUN, [(300, 2)], None, True),
        ("auto", Line(OTHER, "never", 4, None), RUN, [], None, False),
    ],
)
def test_where_an_attempt_starts(
    resume: int | str,
    line: Line | None,
    committed: list[Manifest],
    candidates: list[tuple[int, int]],
    begins: str | None,
    required: bool,
) -> None:
    found = plan(resume, H, line, committed, BEST)
    assert (steps(found), found.begins, found.required) == (candidates, begins, required)
    assert found.from_uri is None


def test_a_uri_begins_a_line_and_is_read_again_until_the_line_saves() -> None:
    uri = "s3://other-run/checkpoints/step-9000"
    first = plan(uri, H, None, RUN, None)
    assert (first.candidates, first.from_uri, first.begins) == ((), uri, uri)
    began = first.line(H, 4, ckpt(9000, 7))
    assert began == Line(H, uri, 4, 9000)
    again = plan(uri, H, began, RUN, None)
    assert (again.candidates, again.from_uri, again.begins) == ((), uri, None)
    later = plan(uri, H, began, [ckpt(9100, 4), *RUN], None)
    assert [m.step for m in later.candidates] == [9100] and later.from_uri == uri


@pytest.mark.parametrize(
    ("resume", "committed", "says"),
    [
        (250, RUN, "no committed checkpoint at step 250 (committed, newest first: 500, 400"),
        (250, [], "newest first: none"),
        ("best", [ckpt(500, 3)], "no committed checkpoint recorded val_loss"),
    ],
)
def test_a_choice_that_is_not_there_is_refused_saying_what_is(
    resume: int | str, committed: list[Manifest], says: str
) -> None:
    with pytest.raises(ResumeChoiceError, match=r".*") as caught:
        plan(resume, H, None, committed, BEST)
    assert says in str(caught.value)


def test_the_line_is_recorded_and_a_record_of_another_shape_is_ignored(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/")
    assert resume_line.read(store) is None
    line = Line(H, "best", 4, 300)
    resume_line.write(store, line)
    assert resume_line.read(store) == line
    resume_line.write(store, Line(H, "never", 5, None))
    assert resume_line.read(store) == Line(H, "never", 5, None)
    store.put_bytes(resume_line.KEY, b'{"spec_hash": 1}')
    assert resume_line.read(store) is None


def test_committed_checkpoints_are_newest_by_attempt_then_step(tmp_path: Path) -> None:
    """A line that began again at step 300 (attempt 4) is newer than the step 500 of the
    line it left: resume, collect's `last` and retention all take its checkpoints first."""
    store = open_store(f"file://{tmp_path}/")
    for manifest in (ckpt(500, 3), ckpt(300, 2), ckpt(320, 4), ckpt(310, 4)):
        store.put_bytes(join_key(manifest.key, checkpoints.MANIFEST), manifest.to_json())
    assert [(m.step, m.attempt) for m in checkpoints.committed(store)] == [
        (320, 4), (310, 4), (500, 3), (300, 2),
    ]  # fmt: skip
    # Retention keeps the newest 2 of the line, and deletes the left line's step 500,
    # though its step is higher than the newest's (that rule is for uploads in flight).
    store.put_bytes("checkpoints/step-330/parts/rank-0.json", b"{}")  # an upload in flight
    checkpoints.retain(store, keep=2)
    assert [m.step for m in checkpoints.committed(store)] == [320, 310]
    assert store.exists("checkpoints/step-330/parts/rank-0.json")
