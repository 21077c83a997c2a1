"""Which checkpoints are kept and collected (issue 31): the newest `keep` and the best
`keepBest` by checkpoint.monitor, each as its manifest recorded it when saved; `collect
--checkpoint last|best|STEP`; the spec's rules. Real file stores, no torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operator_client.collect.collect import CollectError, best_of, choose, collect
from operator_client.runstore import checkpoints, runinfo
from operator_client.spec import load_job_text
from operator_client.storage import ObjectStore, open_store

from .conftest import job_yaml


def save(
    store: ObjectStore, tmp: Path, step: int, loss: float | None, best: checkpoints.Best | None
) -> None:
    (tmp / f"model-{step}").write_bytes(step.to_bytes(8, "big"))
    part = checkpoints.publish_part(
        store, {checkpoints.MODEL_FILE: tmp / f"model-{step}"}, step=step, rank=0, attempt=1
    )
    scores = {} if loss is None else {"val_loss": loss, "train_loss": 9.0}
    checkpoints.commit(
        store, [part], step=step, epoch=0, attempt=1, world_size=1, keep=1,
        fmt=checkpoints.LIGHTNING, scores=scores, best=best,
    )  # fmt: skip


def test_retention_keeps_the_newest_and_the_best(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    best = checkpoints.Best("val_loss", "min", 2)
    # Step 10 saved before any validation (no val_loss): never a best.
    for step, loss in [(10, None), (20, 0.5), (30, 0.2), (40, 0.9), (50, 0.3), (60, 0.8)]:
        save(store, tmp_path, step, loss, best)
    assert [m.step for m in checkpoints.committed(store)] == [60, 50, 30]
    manifest = checkpoints.committed(store)[-1]
    assert manifest.scores == {"val_loss": 0.2, "train_loss": 9.0}
    # Larger is better: 0.9 (40) and 0.8 (60, also the newest).
    store2 = open_store((tmp_path / "store2").as_uri())
    most = checkpoints.Best("val_loss", "max", 2)
    for step, loss in [(20, 0.5), (30, 0.2), (40, 0.9), (50, 0.3), (60, 0.8)]:
        save(store2, tmp_path, step, loss, most)
    assert [m.step for m in checkpoints.committed(store2)] == [60, 40]


def test_collect_takes_the_checkpoint_asked_for(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    best = checkpoints.Best("val_loss", "min", 1)
    for step, loss in [(20, 0.5), (30, 0.2), (40, 0.9)]:
        save(store, tmp_path, step, loss, best)
    committed = checkpoints.committed(store)
    assert [m.step for m in choose(committed, "last", None)] == [40, 30]
    assert [m.step for m in choose(committed, "best", best)] == [30, 40]
    assert [m.step for m in choose(committed, "40", None)] == [40]
    with pytest.raises(CollectError, match=r"no committed checkpoint at that step \(40, 30\)"):
        choose(committed, "20", best)
    with pytest.raises(CollectError, match="ranks no checkpoints"):
        choose(committed, "best", None)
    with pytest.raises(CollectError, match="no committed checkpoint recorded accuracy"):
        choose(committed, "best", checkpoints.Best("accuracy", "max", 1))
    # The run's own policy, from its run.json.
    assert best_of(store) is None
    spec = {"spec": {"checkpoint": {"monitor": "val_loss", "mode": "min", "keepBest": 1}}}
    runinfo.write_run_json(store, spec, "h", {}, 1, {})
    assert best_of(store) == best
    result = collect(store, tmp_path / "out", checkpoint="best")
    assert [c["step"] for c in result.summary["checkpoints"]] == [30]
    assert result.summary["best"] == {"step": 30, "metric": "val_loss", "value": 0.2}
    assert (tmp_path / "out/checkpoints/step-000000000030/MANIFEST.json").is_file()
    assert not (tmp_path / "out/checkpoints/step-000000000040").exists()
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["checkpoints"][0]["scores"]["val_loss"] == 0.2


HEAD = job_yaml("best", "  command: [x]\n")


def test_mode_and_keep_best_need_a_monitor() -> None:
    from operator_client.spec.loader import SpecError

    with pytest.raises(SpecError) as caught:
        load_job_text(HEAD + "  checkpoint: {mode: max, keepBest: 2}\n")
    said = str(caught.value)
    assert "spec.checkpoint.mode: has no effect without spec.checkpoint.monitor" in said
    assert "spec.checkpoint.keepBest: has no effect" in said
    job = load_job_text(HEAD + "  checkpoint: {monitor: val_acc, mode: max}\n").job
    assert job.spec.checkpoint.best == ("val_acc", "max", 1)
    assert load_job_text(HEAD).job.spec.checkpoint.best is None
