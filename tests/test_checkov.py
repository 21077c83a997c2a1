"""checkov over every example's rendered PyTorchJob and the Helm chart's, and their replica
pods (emitted as standalone Pods by `render --pods`, since checkov does not look inside
PyTorchJob templates). Zero failed checks beyond tests/checkov_waivers.yaml, and no stale waiver.

checkov lives in its own virtual environment (.venv-scan, made by `make test`): beside
boto3 it resolves to urllib3 1.26, which must not constrain the client's environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLES, ROOT

KCTL = str(Path(sys.executable).parent / "kctl-train")


def checkov() -> str:
    found = shutil.which("checkov") or str(ROOT / ".venv-scan/bin/checkov")
    if not Path(found).is_file():
        message = "checkov is not installed (make test installs it into .venv-scan)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def chart_output(directory: Path) -> None:
    """The Helm chart's PyTorchJob (quickstart values) and its replica pods, as files."""
    helm_python = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    from operator_client.render import to_yaml
    from operator_client.render.pods import replica_pods

    chart = ROOT / "charts" / "kctl-train"
    values = yaml.safe_load((chart / "ci/quickstart-values.yaml").read_text())
    values["name"] = "helm-quickstart"
    loaded = helm_python.Chart.load(str(chart))
    try:
        out = loaded.render(values=values, name="release", namespace="ml")
    finally:
        loaded.close()
    job = yaml.safe_load(out["kctl-train/templates/pytorchjob.yaml"])
    for doc in (job, *replica_pods(job)):
        (directory / f"{doc['metadata']['name']}.yaml").write_text(to_yaml(doc))


def test_examples_pass_checkov_apart_from_listed_waivers(tmp_path: Path) -> None:
    scanner = checkov()
    rendered = subprocess.run(
        [KCTL, "render", *map(str, EXAMPLES), "--pods", "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert rendered.returncode == 0, rendered.stderr
    chart_output(tmp_path)
    scan = subprocess.run(
        [scanner, "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    reports = json.loads(scan.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert reports[0]["summary"]["parsing_errors"] == 0

    def job_of(finding: dict[str, str]) -> str:
        return Path(finding["file_path"]).stem.rsplit("-", 2)[0]  # <job>-master-0 -> <job>

    failed = {(f["check_id"], job_of(f)) for r in reports for f in r["results"]["failed_checks"]}
    waivers = yaml.safe_load((ROOT / "tests/checkov_waivers.yaml").read_text())
    all_jobs = {p.stem.rsplit("-", 2)[0] for p in tmp_path.glob("*-0.yaml")}  # the Pods
    allowed = {
        (w["check"], job) for w in waivers for job in (all_jobs if w["jobs"] == "*" else w["jobs"])
    }
    assert sorted(failed - allowed) == []
    assert sorted(allowed - failed) == []  # every waiver is needed, for exactly these jobs
    skipped = sum(len(r["results"].get("skipped_checks", [])) for r in reports)
    assert skipped > 0  # the pods' checkov.io/skip annotations were read
