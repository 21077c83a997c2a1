"""A local run's file:// store is a directory kctl-train owns, and a pod gets its own run
directory of it only, never a change of owner of what existed before (issue 20, item 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operator_client.backends.local import file_store
from operator_client.backends.local.file_store import MARKER, StoreRefused
from operator_client.cli.main import main

from .conftest import job_yaml

ROOT = os.geteuid() == 0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KCTL_TRAIN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/", "is a system directory"),
        ("/etc", "is a system directory"),
        ("/etc/kctl-train", "is a system directory"),
        ("/usr/local/runs", "is a system directory"),
        ("/proc/self", "is a system directory"),
        ("/root", "is a system directory"),
        ("/tmp", "is a system directory"),
        ("/tmp/../etc", "not an absolute path in its normal form"),
        ("relative/runs", "not an absolute path in its normal form"),
    ],
)
def test_system_and_unnormal_paths_are_refused(home: Path, path: str, problem: str) -> None:
    assert problem in (file_store.store_problem(Path(path)) or "")


def test_what_kctl_train_owns_or_may_make_is_a_store(home: Path, tmp_path: Path) -> None:
    assert file_store.store_problem(home / "store") is None  # the default, under its home
    assert file_store.store_problem(tmp_path / "new" / "runs") is None  # made and marked
    (tmp_path / "empty").mkdir()
    assert file_store.store_problem(tmp_path / "empty") is None
    full = tmp_path / "data"
    full.mkdir()
    (full / "precious.db").write_text("x")
    assert "holds files kctl-train did not make" in (file_store.store_problem(full) or "")
    (full / MARKER).touch()  # an earlier kctl-train's store, marked
    assert file_store.store_problem(full) is None
    assert "kctl-train's own state" in (file_store.store_problem(home / "local" / "x") or "")
    (tmp_path / "via").symlink_to(tmp_path / "empty")
    assert "is a symbolic link" in (file_store.store_problem(tmp_path / "via" / "runs") or "")


def test_claim_makes_and_marks_and_refuses_with_the_reason(home: Path, tmp_path: Path) -> None:
    file_store.claim(tmp_path / "runs")
    assert (tmp_path / "runs" / MARKER).is_file()
    with pytest.raises(StoreRefused, match="system directory"):
        file_store.claim(Path("/etc"))


@pytest.mark.skipif(not ROOT, reason="giving a directory to the pod's uid needs root")
def test_the_pod_gets_its_own_run_directory_and_nothing_is_chowned(tmp_path: Path) -> None:
    store = tmp_path / "store"
    file_store.claim(store)
    run = store / "default" / "job"
    assert file_store.run_directory(run, store, 10001, 10001) == run
    assert (os.stat(run).st_uid, os.stat(store / "default").st_uid) == (10001, 0)
    (run / "checkpoint").write_text("x")  # the pod's (here written as root)
    file_store.run_directory(run, store, 10001, 10001)  # again: nothing changes
    assert os.stat(run / "checkpoint").st_uid == 0
    other = store / "default" / "mine"
    other.mkdir()
    (other / "root-only").write_text("secret")
    os.chmod(other / "root-only", 0o600)
    with pytest.raises(StoreRefused, match="belongs to uid 0"):
        file_store.run_directory(other, store, 10001, 10001)
    assert os.stat(other / "root-only").st_uid == 0  # never handed over
    (store / "default" / "linked").symlink_to(tmp_path)
    with pytest.raises(StoreRefused, match="not a directory"):
        file_store.run_directory(store / "default" / "linked", store, 10001, 10001)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("file:///etc", "is a system directory"),
        ("file:///tmp/../../etc/../root", "normal form"),
    ],
)
def test_a_local_run_refuses_such_a_store_before_anything_runs(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], uri: str, message: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("j", f"  command: [python, t.py]\n  storage: {{uri: '{uri}'}}\n"))
    assert main(["apply", str(path), "--local"]) == 2
    assert message in capsys.readouterr().err
    assert not (home / "local" / "default" / "j").exists()
