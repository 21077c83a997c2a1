"""The import rules of the README's layout section hold, and the checker would notice a
break: lint-imports runs on the tree as it is, then on a copy with one import planted that
the rules forbid (the runtime reaching up into the renderer)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT
from .fake_apiserver import FakeApiServer

LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT.is_file():
        pytest.skip("import-linter is not installed (make test installs it with the dev extra)")
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_import_rule() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("runtime/context.py", "from ..render import render", "Layers"),
        ("collect/report.py", "from ..runtime import context", "Layers"),
        ("cli/output.py", "from ..backends.local import LocalBackend", "The CLI reaches"),
        ("client/jobs.py", "import kubernetes", "Only backends.kubernetes"),
        ("image/builders.py", "from ..backends import types", "The image builders"),
        ("kubeflow/webhook.py", "from ..controlplane import workload", "Layers"),
        ("controlplane/strategic_merge.py", "from ..storage import open_store", "What the"),
        ("backends/local/pods/base.py", "from .launch import pods_for", "The pod launchers"),
        ("backends/local/sandbox/cgroups.py", "from ..jobdir import JobDir", "sandbox/ is only"),
    ],
)
def test_a_planted_violation_breaks_the_check(
    tmp_path: Path, module: str, planted: str, contract: str
) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "operator_client", copy / "operator_client")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / "operator_client" / module
    target.write_text(target.read_text() + f"\n{planted}  # planted\n")
    out = lint(copy)
    assert out.returncode != 0, out.stdout
    broken = [line for line in out.stdout.splitlines() if line.endswith("BROKEN")]
    assert len(broken) == 1 and broken[0].startswith(contract), out.stdout


def test_commands_that_only_look_at_jobs_never_import_pydantic() -> None:
    """status, list, logs and delete read jobs of either kind without the spec model
    (pydantic costs ~0.3 s of start-up: spec/__init__.py)."""
    code = (
        "import sys, operator_client.cli.view_commands, operator_client.backends.local, "
        "operator_client.backends.kubernetes.backend; "
        # A local TrainJob's view builds its pods from kctl-train's runtime.
        "from operator_client.controlplane.workload import workload_of; "
        "workload_of({'kind': 'TrainJob', 'metadata': {'name': 'j'}, 'spec': {'runtimeRef': "
        "{'name': 'kctl-train'}, 'trainer': {'numNodes': 2, 'numProcPerNode': 1}}}); "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('pydantic', 'operator_client.spec.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    # The spec's plain modules only: its issue type, Kubernetes' name rules, the URL rules,
    # the job-as-data functions (the local backend's resume line hashes a spec), the
    # quantities the control plane's rules parse and the save estimate's constants (the
    # client's grace warning names its field).
    assert out.stdout.strip() == str(
        [
            "operator_client.spec.document",
            "operator_client.spec.issues",
            "operator_client.spec.k8s_names",
            "operator_client.spec.quantities",
            "operator_client.spec.save_estimate",
            "operator_client.spec.urls",
        ]
    )


def test_no_module_is_over_500_lines() -> None:
    """A module past 500 lines holds more than one job (issue 32): split it by what it does."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "operator_client").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > 500
    }
    assert long == {}


# What each command must not load (cli/grammar.py names each command's handler module;
# main.py imports it only when the command runs): (argv, package prefixes never imported).
NEVER_LOADED = [
    (["--version"], ("pydantic", "yaml", "operator_client.spec.model", "operator_client.client")),
    (["--help"], ("pydantic", "yaml", "operator_client.client", "operator_client.render")),
    (["schema"], ("operator_client.backends", "kubernetes", "boto3", "torch")),
    (
        ["render", "examples/quickstart.yaml"],
        # render needs no backend, store, collect or run machinery: the Client makes none
        (
            "operator_client.backends",
            "operator_client.collect",
            "operator_client.client.handle",
            "operator_client.controlplane.lifecycle",
            "kubernetes",
            "boto3",
            "torch",
            "rich",
        ),
    ),
    (
        ["validate", "examples/quickstart.yaml"],
        ("operator_client.backends", "operator_client.collect", "kubernetes", "boto3", "torch"),
    ),
]


def _modules_after(argv: list[str]) -> list[str]:
    """Every module loaded once `kctl-train ARGV` has run (in a fresh interpreter)."""
    code = (
        "import contextlib, io, sys\n"
        "from operator_client.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize(("argv", "never"), NEVER_LOADED, ids=lambda v: str(v)[:40])
def test_each_command_loads_only_what_it_needs(argv: list[str], never: tuple[str, ...]) -> None:
    loaded = [m for m in _modules_after(argv) if m.startswith(never)]
    assert loaded == [], f"kctl-train {' '.join(argv)} imported {loaded}"


def test_listing_cluster_jobs_imports_no_pydantic(api: FakeApiServer) -> None:
    """`list` runs the control plane's rules over each job's pods, which parse resource
    quantities (spec/quantities.py): no pydantic, not even its core. (`status` parses the
    job a pod carries for its save window and estimate: that is the spec model's.)"""
    assert "operator_client.spec.model" in _modules_after(["apply", "examples/quickstart.yaml"])
    loaded = _modules_after(["list"])
    assert "operator_client.controlplane.pod_validation" in loaded  # the rules did run
    assert [m for m in loaded if m.startswith("pydantic")] == []
