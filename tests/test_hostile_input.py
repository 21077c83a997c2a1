"""Hostile and careless input: every number the API stores is bounded, free-form JSON
is finite, control characters and labels the API server would refuse are refused, and a
small file cannot expand into megabytes. Always exit 2 with a message, never a traceback
or a hang (the one-second budget for a 1 MiB file is measured by bench/hostile_input.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from operator_client.cli.main import main
from operator_client.spec import SpecError, load_job_text

from .conftest import job_yaml

KCTL = str(Path(sys.executable).parent / "kctl-train")
BASE = "  command: [python, train.py]\n"


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("  nodes: 99999999999999999999999999999999999999\n", "spec.nodes", "less than or equal"),
        ("  nodes: {min: 1, max: 4294967296}\n", "spec.nodes.max", "less than or equal"),
        ("  processesPerNode: 4294967296\n", "spec.processesPerNode", "from 1 to 2147483647"),
        ("  resources: {gpus: 2147483648}\n", "spec.resources.gpus", "less than or equal"),
        ("  fault: {backoffLimit: 99999999999}\n", "spec.fault.backoffLimit", "less than"),
        ("  fault: {activeDeadline: 99999999999999999999999d}\n", "activeDeadline", "too long"),
        ("  fault: {terminationGracePeriod: 24856d}\n", "terminationGracePeriod", "too long"),
        ("  checkpoint: {every: 99999999999 steps}\n", "spec.checkpoint.every", "at most"),
        ("  resources: {memory: 99999999999999999999Ei}\n", "memory", "too large"),
        ("  resources: {memory: 1e999999}\n", "memory", "out of range"),
        ('  env: {A: "x\\0y"}\n', "", "control character (U+0000"),
        ('  env: {A: "x\\ey"}\n', "", "control character (U+001B"),
        ("  nodePool: {nodeSelector: {'bad key!': x}}\n", "nodeSelector", "must be 1-63"),
        ("  nodePool: {nodeSelector: {ok: 'not a value'}}\n", "nodeSelector", "value 'not a"),
    ],
)
def test_bad_values_are_refused_at_the_field(body: str, where: str, message: str) -> None:
    text = job_yaml("j", BASE + body)
    with pytest.raises(SpecError) as info:
        load_job_text(text, "job.yaml")
    rendered = str(info.value)
    assert where in rendered and message in rendered, rendered


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ("{lr: .nan}", "spec.train.modelArgs"),
        ("{layers: [1, .inf]}", "spec.train.modelArgs"),
        ("{opt: {beta: -.inf}}", "spec.train.modelArgs"),
    ],
)
def test_nan_and_infinity_are_refused_at_validation(args: str, path: str) -> None:
    text = job_yaml("j", f"  train: {{model: 'a.b:C', modelArgs: {args}}}\n")
    with pytest.raises(SpecError, match="not a finite number") as info:
        load_job_text(text, "job.yaml")
    assert path in str(info.value)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ("labels: {'a/b/c': x}", "must be a DNS subdomain"),
        ("labels: {team: " + "x" * 64 + "}", "at most 63"),
        ("labels: {'Example.COM/x': y}", "must be a DNS subdomain"),
        ("annotations: {'/x': y}", "prefix before '/' is empty"),
        (
            "annotations: {a: &x " + "x" * 60_000 + ", b: *x, c: *x, d: *x, e: *x}",
            "bytes of annotations",
        ),
    ],
)
def test_labels_and_annotations_follow_kubernetes_rules(metadata: str, message: str) -> None:
    text = job_yaml("j", BASE).replace("metadata: {name: j}", f"metadata: {{name: j, {metadata}}}")
    with pytest.raises(SpecError, match="metadata") as info:
        load_job_text(text, "job.yaml")
    assert message in str(info.value)


def test_a_small_file_cannot_expand_into_megabytes() -> None:
    chunk = "x" * 60_000
    aliases = ", ".join(["*s"] * 90)
    text = job_yaml("j", f"  command: [&s '{chunk}', {aliases}]\n")
    assert len(text) < 100_000
    with pytest.raises(SpecError, match="characters after expanding aliases"):
        load_job_text(text, "job.yaml")


def test_a_huge_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(job_yaml("j", BASE) + "# " + "x" * (1 << 20) + "\n")
    assert main(["validate", str(path)]) == 2
    assert "job file too large" in capsys.readouterr().err


def test_validate_on_hostile_input_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(job_yaml("j", "  command: [python]\n  nodes: 99999999999999999999999999\n"))
    out = subprocess.run([KCTL, "validate", str(path)], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "hostile.yaml:7:10: error: spec.nodes" in out.stderr, out.stderr


def test_too_many_replicas_for_a_local_run_are_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KCTL_TRAIN_HOME", str(tmp_path / "home"))
    path = tmp_path / "wide.yaml"
    path.write_text(job_yaml("wide", BASE + "  nodes: 2147483647\n"))
    assert main(["apply", str(path), "--local", "--dry-run=server"]) == 2
    assert "takes at most 64" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("storage", "where"),
    [
        ("{uri: 's3://bucket/runs', endpoint: 'http://KEY:SECRET@minio:9000'}", "endpoint"),
        ("{uri: 's3://bucket/runs', endpoint: 'http://token@minio:9000'}", "endpoint"),
        ("{uri: 'file:///tmp/../../etc/../root'}", "spec.storage.uri"),
        ("{uri: 'file:///data//runs'}", "spec.storage.uri"),
    ],
)
def test_credentials_and_unnormal_paths_in_store_urls_are_refused(storage: str, where: str) -> None:
    text = job_yaml("j", BASE + f"  storage: {storage}\n")
    with pytest.raises(SpecError) as info:
        load_job_text(text, "job.yaml")
    message = str(info.value)
    assert where in message and ("credentials in a URL" in message or "normal form" in message)


def test_credentials_in_an_endpoint_flag_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["collect", "j", "--from", "s3://bucket/runs", "--endpoint", "http://K:S@127.0.0.1:9"]
    assert main([*args, "--to", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "credentials in a URL are refused" in err and "K:S" not in err


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_job_file_must_be_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = tmp_path / "job.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes it: reading would block forever
    else:
        path = Path("/dev/zero")  # never ends
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert ("a FIFO" if kind == "fifo" else "a character device") in err, err
    assert "give a job file, or - for standard input" in err


def test_standard_input_is_read_with_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    class Endless(io.StringIO):
        def read(self, size: int | None = -1) -> str:
            assert size is not None and size > 0, "read without a cap"
            return "#" * size

    from operator_client.spec.loader import load_files

    _, errors = load_files(["-"], Endless())
    assert "job file too large" in errors[0].message


def test_more_processes_than_this_machine_holds_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KCTL_TRAIN_HOME", str(tmp_path / "home"))
    path = tmp_path / "bomb.yaml"
    path.write_text(job_yaml("bomb", BASE + "  processesPerNode: 1000000\n"))
    assert main(["validate", str(path)]) == 0  # what the operators accept...
    assert main(["apply", str(path), "--local", "--dry-run=server"]) == 2  # ...not this machine
    err = capsys.readouterr().err
    assert "1000001 processes" in err and "available memory holds at most" in err


def test_a_trainjob_has_at_most_the_pods_of_an_indexed_job() -> None:
    text = job_yaml("j", BASE + "  operator: trainjob\n  nodes: 100001\n")
    with pytest.raises(SpecError, match="limits to 100000 pods"):
        load_job_text(text, "job.yaml")
