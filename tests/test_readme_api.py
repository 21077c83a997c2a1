"""The README's Python API example runs as written (on the local backend, in a scratch
directory holding the example job file)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The Python API") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python example in the README's Python API section"
    return match.group(1)


def test_the_readme_python_example_runs(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples/quickstart.yaml", tmp_path / "examples/quickstart.yaml")
    env = {**os.environ, "KCTL_TRAIN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-c", readme_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Succeeded [('master-0', 'Succeeded', 0), ('worker-0', 'Succeeded', 0)]" in out.stdout
    assert "final val_loss" in out.stdout  # the report, from collect
    assert (tmp_path / "results/quickstart/summary.json").is_file()
    assert re.search(r"^master-0 ", out.stdout, re.M)  # the log lines
