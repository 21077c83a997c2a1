"""With the cluster of `make cluster`: the goldens are recorded again from the real
controllers, and any change from the committed ones fails with its diff (re-record with
`python -m tests.fidelity.record` and review what changed). Without a cluster this skips
saying why; under CI=true it fails, as the other cluster tests do."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from ..e2e.cluster import connect
from .corpus import GOLDEN, names
from .record import main


@pytest.mark.xdist_group("heavy")  # not beside the crash fuzz (test_checkpoint_fuzz.py)
def test_the_goldens_are_what_the_real_controllers_make_now(tmp_path: Path) -> None:
    connect()
    main([], into=tmp_path)
    changed = []
    for name in names():
        old = (GOLDEN / f"{name}.yaml").read_text().splitlines(keepends=True)
        new = (tmp_path / f"{name}.yaml").read_text().splitlines(keepends=True)
        changed += difflib.unified_diff(old, new, f"committed {name}", f"recorded {name}")
    assert not changed, "".join(changed)
