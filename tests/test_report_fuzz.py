"""`report` reads what pods wrote (collected as they were): any JSON in its documents and
any text in its CSVs gives a report or a ReportError naming the file, never a traceback,
and a CSV is read as a bounded stream (collect/report.py, untrusted.csv_rows)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operator_client.collect.report import ReportError, build, text
from operator_client.untrusted import MAX_CSV_LINE, UntrustedFileError, csv_rows

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
summary_values = st.fixed_dictionaries(
    {},
    optional={
        key: json_values
        for key in (
            "job",
            "success",
            "checkpoints",
            "committedCheckpoints",
            "outputs",
            "restarts",
            "complete",
        )
    },
)
csv_text = st.text(alphabet=st.sampled_from('a1,."\n\r-e9 \x00'), max_size=300)
headers = st.sampled_from(
    [
        "",
        "step,loss\n",
        "time,gpu,utilization_pct\n",
        "step,stall_s,write_s,commit_s,skipped_before,emergency\n",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    summary=st.one_of(summary_values, json_values),
    attempt=json_values,
    metrics=st.tuples(headers, csv_text),
    gpu=st.tuples(headers, csv_text),
    saves=st.tuples(headers, csv_text),
)
def test_any_document_and_csv_gives_a_report_or_a_report_error(
    summary: Any, attempt: Any, metrics: tuple[str, str], gpu: tuple[str, str],
    saves: tuple[str, str],
) -> None:  # fmt: skip
    root = Path(tempfile.mkdtemp())
    try:
        for path, content in {
            "summary.json": json.dumps(summary),
            "attempts/1.json": json.dumps(attempt),
            "metrics/metrics.csv": "".join(metrics),
            "monitor/node-0.csv": "".join(gpu),
            "metrics/checkpoints.csv": "".join(saves),
        }.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content)
        try:
            report = build(root)
        except ReportError as exc:
            assert "summary.json" in str(exc)
            return
        assert text(report).startswith(report.name)
    finally:
        shutil.rmtree(root)


def test_a_csv_is_read_within_bounds(tmp_path: Path) -> None:
    endless = tmp_path / "node-0.csv"
    endless.write_bytes(b"time,gpu\n" + b"x" * (MAX_CSV_LINE + 10))
    with pytest.raises(UntrustedFileError, match="a line longer than"):
        list(csv_rows(endless))
    wide = tmp_path / "metrics.csv"
    wide.write_text('step,loss\n1,"' + "9" * 200_000 + '"\n')
    with pytest.raises(UntrustedFileError, match=r"metrics.csv: not a CSV kctl-train reads"):
        list(csv_rows(wide))
    small = tmp_path / "ok.csv"
    small.write_text("step,loss\n1,0.5,extra\n")
    assert list(csv_rows(small)) == [{"step": "1", "loss": "0.5"}]
    with pytest.raises(UntrustedFileError, match="larger than a CSV"):
        list(csv_rows(small, limit=12))


def test_report_names_the_file_it_passed_over(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"success": [1], "job": "x"}))
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "metrics.csv").write_text('step,loss\n1,"' + "9" * 200_000 + '"\n')
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts" / "0.json").write_text("[1, 2]")
    out = text(build(tmp_path))
    assert "not finished" in out
    assert "metrics.csv: not a CSV kctl-train reads" in out
    assert "0.json: not a JSON object" in out
