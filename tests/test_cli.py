"""The installed `kctl-train` command, run as a user runs it: exit codes, streams, formats."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from operator_client import __version__

from .conftest import ROOT

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def kctl(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kctl-train", path=str(Path(sys.executable).parent))
    assert exe, "the kctl-train console script is not installed in this environment"
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    return subprocess.run(
        [exe, *args], input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def test_version() -> None:
    r = kctl("--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"kctl-train {__version__}")


def test_render_prints_one_pytorchjob() -> None:
    r = kctl("render", QUICKSTART)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    # The quickstart has no storage (local runs get one): on a cluster that loses data.
    assert r.stderr.count("\n") == 1 and "warning: spec.storage: no storage" in r.stderr


def test_render_json_and_several_files(tmp_path: Path) -> None:
    r = kctl("render", "-o", "json", QUICKSTART)
    assert json.loads(r.stdout)["kind"] == "PyTorchJob"
    other = str(ROOT / "examples" / "aks-a100.yaml")
    r = kctl("render", "-o", "json", QUICKSTART, other)
    listed = json.loads(r.stdout)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["quickstart", "segmentation"]
    r = kctl("render", QUICKSTART, other)
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(r.stdout)] == [
        "quickstart",
        "segmentation",
    ]


def test_job_files_are_taken_as_kubectl_takes_them(tmp_path: Path) -> None:
    """`-f/--filename FILE` (repeatable where several files are taken) or positionally,
    alike; none, or two for a command of one, is a usage error naming the way; apply's
    --follow has no short flag (kubectl's `apply -f` is a file), logs keeps `-f` (kubectl
    logs -f follows)."""
    other = str(ROOT / "examples" / "aks-a100.yaml")
    assert kctl("render", "-f", QUICKSTART, "--filename", other).stdout == (
        kctl("render", QUICKSTART, other).stdout
    )
    assert kctl("validate", "-f", QUICKSTART).returncode == 0
    for argv, said in (
        (["validate"], "validate: give the job files: -f job.yaml"),
        (["apply", "--dry-run=client"], "apply: give the job file: -f job.yaml"),
        (["doctor", QUICKSTART, "-f", other, "--local"], "doctor: one job file, not 2"),
        (["delete", "--local"], "delete: give the job's NAME, or -f job.yaml"),
        (["delete", "x", "-f", QUICKSTART, "--local"], "the job's NAME or -f FILE, not both"),
    ):
        r = kctl(*argv)
        assert (r.returncode, r.stdout) == (2, ""), (argv, r.stderr)
        assert said in r.stderr, (argv, r.stderr)
    dry = kctl("apply", "-f", QUICKSTART, "--dry-run=client", "-o", "name")
    assert (dry.returncode, dry.stdout) == (0, "pytorchjob.kubeflow.org/quickstart\n"), dry.stderr
    follow = kctl("apply", QUICKSTART, "-f")
    assert follow.returncode == 2 and "-f/--filename: expected one argument" in follow.stderr
    assert "-f, --follow" in kctl("logs", "--help").stdout
    # collect's destination and endpoint, spelled alike on every command that collects
    for command in ("apply", "wait", "collect"):
        shown = kctl(command, "--help").stdout
        assert "--to DIR" in shown and "--endpoint URL" in shown, command
        assert "--collect-to" not in shown, command  # the old spelling works, unshown


def test_delete_takes_the_job_a_file_names(tmp_path: Path) -> None:
    """`delete -f job.yaml` deletes the job named in the file (its metadata, a TrainJob
    object's too), in the file's namespace unless -n says another."""
    env = {**os.environ, "KCTL_TRAIN_HOME": str(tmp_path / "home")}
    exe = str(Path(sys.executable).parent / "kctl-train")
    job = tmp_path / "job.yaml"
    job.write_text(Path(QUICKSTART).read_text().replace("name: quickstart", "name: from-file"))
    missing = subprocess.run(
        [exe, "delete", "-f", str(job), "--local"], capture_output=True, text=True, env=env
    )
    assert missing.returncode == 1, missing.stderr
    assert "no local job default/from-file" in missing.stderr, missing.stderr
    trainjob = tmp_path / "trainjob.yaml"
    trainjob.write_text(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"
        "metadata: {name: tj, namespace: team-a}\nspec: {runtimeRef: {name: torch}}\n"
    )
    ignored = subprocess.run(
        [exe, "delete", "--filename", str(trainjob), "--local", "--ignore-not-found"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert (ignored.returncode, ignored.stdout, ignored.stderr) == (0, "", "")
    for extra, where in (([], "team-a/tj"), (["-n", "other"], "other/tj")):
        named = subprocess.run(
            [exe, "delete", "-f", str(trainjob), "--local", *extra],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert named.returncode == 1 and f"no local job {where}" in named.stderr, named.stderr


def test_render_from_stdin_matches_render_from_file() -> None:
    text = Path(QUICKSTART).read_text()
    assert kctl("render", "-", stdin=text).stdout == kctl("render", QUICKSTART).stdout


@pytest.mark.parametrize(
    "text",
    [
        Path(QUICKSTART).read_text(),
        # One line without a line break (`printf`, a JSON producer): still text, not a file
        # name, and its warnings are printed as a file's are.
        json.dumps(yaml.safe_load(Path(QUICKSTART).read_text())),
    ],
    ids=["yaml", "one-line-json"],
)
def test_apply_from_stdin_names_stdin(text: str) -> None:
    """`apply -` reads the job from standard input; its messages name <stdin>, as
    render's and validate's do."""
    r = kctl("apply", "-", "--dry-run=client", "-o", "name", stdin=text)
    assert (r.returncode, r.stdout) == (0, "pytorchjob.kubeflow.org/quickstart\n"), r.stderr
    assert "<stdin>:" in r.stderr and "warning: spec.storage: no storage" in r.stderr
    bad = kctl("apply", "-", "--dry-run=client", stdin="kind: [\n")
    assert bad.returncode == 2 and bad.stderr.startswith("<stdin>:2:1: error: YAML"), bad.stderr


def test_render_output_dir_writes_stable_file_names(tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    r = kctl(
        "render", QUICKSTART, str(ROOT / "examples" / "aks-a100.yaml"), "--output-dir", str(out)
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["quickstart.yaml", "segmentation.yaml"]
    assert (out / "quickstart.yaml").read_text() == kctl("render", QUICKSTART).stdout
    assert "written to" in r.stdout


def test_render_output_dir_that_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = kctl("render", QUICKSTART, "--output-dir", str(blocker / "sub"))
    assert r.returncode == 1
    assert "kctl-train: error: cannot write to" in r.stderr
    assert "Traceback" not in r.stderr


def test_duplicate_jobs_across_files_are_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text(Path(QUICKSTART).read_text())
    r = kctl("render", QUICKSTART, str(copy))
    assert r.returncode == 2
    assert "job default/quickstart is also defined in" in r.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "error: no such file"),
        ("", "error: file is empty"),
        ("- a\n", "found a list"),
        ("a: [\n", "YAML syntax error"),
        (
            "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
            "spec: {image: i, train: {model: 'a:B'}, nodse: 2}\n",
            "did you mean 'nodes'?",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_per_problem(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "job.yaml"
    if content is not None:
        path.write_text(content)
    for command in ("render", "validate"):
        r = kctl(command, str(path))
        assert r.returncode == 2, (command, r.stderr)
        assert message in r.stderr
        assert r.stderr.startswith(str(path))
        assert "Traceback" not in r.stderr
        assert r.stdout == ""


def test_validate_reports_valid_jobs_and_warnings() -> None:
    r = kctl("validate", QUICKSTART, str(ROOT / "examples" / "onprem-infiniband.yaml"))
    assert r.returncode == 0, r.stderr
    assert "quickstart.yaml: valid: default/quickstart, 2 nodes, CPU per node" in r.stdout
    assert "warning: spec.scheduling.gang" in r.stderr


def test_validate_json_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- x\n")
    r = kctl("validate", "-o", "json", QUICKSTART, str(bad))
    assert r.returncode == 2
    report = json.loads(r.stdout)
    assert report["valid"] is False
    assert report["jobs"] == [{"file": QUICKSTART, "name": "quickstart", "namespace": "default"}]
    errors = [i for i in report["issues"] if i["severity"] == "error"]
    assert [i["source"] for i in errors] == [str(bad)]
    warnings = [i for i in report["issues"] if i["severity"] == "warning"]
    assert [(i["source"], i["path"]) for i in warnings] == [(QUICKSTART, "spec.storage")]


def test_schema_is_json_for_editors() -> None:
    r = kctl("schema")
    schema = json.loads(r.stdout)
    assert schema["title"] == "TrainingJob"
    assert schema["additionalProperties"] is False


def test_usage_errors_exit_2() -> None:
    assert kctl("render").returncode == 2
    assert kctl("render", QUICKSTART, "-o", "xml").returncode == 2
    assert kctl("frobnicate").returncode == 2


def test_no_colour_when_not_a_terminal(tmp_path: Path) -> None:
    r = kctl("validate", str(tmp_path / "missing.yaml"))
    assert "\x1b[" not in r.stderr


HEAVY = ("torch", "lightning", "kubernetes", "boto3", "pandas", "botocore", "matplotlib")


@pytest.mark.parametrize(
    "argv", [["render", QUICKSTART], ["apply", QUICKSTART, "--dry-run=client"]]
)
def test_render_paths_import_nothing_heavy(argv: list[str]) -> None:
    probe = (
        "import sys, io, contextlib\n"
        "from operator_client.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(code, heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "0 []", r.stdout + r.stderr


def test_the_import_probe_sees_an_installed_heavy_module() -> None:
    # Guards the test above: kubernetes is installed with the client, and a probe that
    # imports it does report it.
    probe = (
        f"import sys, kubernetes\nprint(sorted(m for m in sys.modules "
        f"if m.split('.')[0] in {HEAVY!r})[:1])\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "['kubernetes']", r.stdout + r.stderr


def test_render_check_reports_drift_for_gitops(tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    other = str(ROOT / "examples" / "aks-a100.yaml")
    assert kctl("render", QUICKSTART, other, "--output-dir", str(out)).returncode == 0
    clean = kctl("render", QUICKSTART, other, "--check", str(out))
    assert clean.returncode == 0 and "2 manifest(s)" in clean.stdout
    edited = out / "quickstart.yaml"
    edited.write_text(edited.read_text().replace("backoffLimit: 6", "backoffLimit: 1"))
    (out / "old-job.yaml").write_text("kind: PyTorchJob\n")
    (out / "segmentation.yaml").unlink()
    r = kctl("render", QUICKSTART, other, "--check", str(out))
    assert r.returncode == 1 and "3 manifest(s)" in r.stderr
    assert "-    backoffLimit: 1\n+    backoffLimit: 6\n" in r.stdout
    assert "segmentation.yaml: missing" in r.stdout
    assert "old-job.yaml: not rendered by any of the job files" in r.stdout


def test_a_rendered_job_the_operator_would_refuse_is_a_bug_said_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """render and apply share one admission check (render_admitted): a refusal is said as
    kctl-train's bug, naming the file, exit 1, and nothing is printed or applied."""
    from operator_client import Client
    from operator_client.cli.main import main
    from operator_client.errors import RenderBug
    from operator_client.render import manifest

    monkeypatch.setattr(manifest, "admission_errors", lambda m: ["spec.planted: refused"])
    assert main(["render", QUICKSTART]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{QUICKSTART}: internal error, the operator would reject the rendered job: " in err
    assert "spec.planted: refused" in err and "a kctl-train bug" in err
    with pytest.raises(RenderBug, match=r"spec\.planted: refused"):
        Client("local").apply(QUICKSTART, dry_run="client")
    with pytest.raises(RenderBug, match=r"spec\.planted: refused"):
        Client("local").render(QUICKSTART)
