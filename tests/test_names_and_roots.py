"""Names are names: every name that reaches a path is validated as the API server validates
it, and a run root is only ever the job's own `<store>/<namespace>/<name>/`, whatever a
hand-written object's annotations say (spec/k8s_names.py, backends/types.py StorageLocation,
backends/local/file_store.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from operator_client.backends.local import file_store
from operator_client.backends.local.jobdir import JobDir
from operator_client.backends.types import StorageLocation
from operator_client.contract import ENDPOINT_ANNOTATION, RUN_ROOT_ANNOTATION
from operator_client.errors import BadInput
from operator_client.spec.k8s_names import config_key_problem, label_problem, subdomain_problem

from .test_trainer_runtimes import KCTL


@pytest.mark.parametrize(
    ("check", "value", "ok"),
    [
        (label_problem, "default", True),
        (label_problem, "a-1", True),
        (label_problem, "..", False),
        (label_problem, "a/b", False),
        (label_problem, "A", False),
        (label_problem, "x" * 64, False),
        (label_problem, "", False),
        (label_problem, 7, False),
        (subdomain_problem, "job.v1", True),
        (subdomain_problem, "../../../victim", False),
        (subdomain_problem, "a..b", False),
        (subdomain_problem, "x" * 5000, False),
        (config_key_problem, "AWS_ACCESS_KEY_ID", True),
        (config_key_problem, ".env", True),
        (config_key_problem, "..", False),
        (config_key_problem, "a/b", False),
    ],
)
def test_kubernetes_name_rules(check: Any, value: object, ok: bool) -> None:
    assert (check(value, "name") is None) == ok


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("default", "../../../victim"), ("../x", "job"), ("default", "x" * 5000)],
)
def test_a_local_job_directory_is_one_component_of_its_root(namespace: str, name: str) -> None:
    with pytest.raises(BadInput, match="is not a valid name"):
        JobDir.of(namespace, name, Path("/nonexistent"))


@pytest.mark.parametrize(
    "command",
    [["delete"], ["status"], ["chaos", "_", "kill", "master-0"],
     ["collect", "_", "--from", "file:///nonexistent/store"]],
)  # fmt: skip
def test_the_cli_refuses_a_name_that_leaves_the_home(tmp_path: Path, command: list[str]) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    home = tmp_path / "home"
    args = [*command[:1], "../../../victim", *command[2:]]
    run = subprocess.run(
        [KCTL, *args, "--local"],
        capture_output=True,
        text=True,
        env={"KCTL_TRAIN_HOME": str(home), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "is not a valid name" in run.stderr and "Traceback" not in run.stderr
    assert (victim / "keep").exists()


def manifest(root: str, endpoint: str | None = None) -> dict[str, Any]:
    annotations = {RUN_ROOT_ANNOTATION: root}
    if endpoint:
        annotations[ENDPOINT_ANNOTATION] = endpoint
    return {"metadata": {"name": "mine", "namespace": "team", "annotations": annotations}}


@pytest.mark.parametrize(
    ("root", "endpoint", "followed"),
    [
        ("file:///store/team/mine/", None, True),
        ("s3://bucket/runs/team/mine/", "http://127.0.0.1:9000", True),
        ("file:///store/team/victim/", None, False),  # another job's root
        ("file:///store/team/victim/checkpoints/team/mine/", None, True),  # see the store rule
        ("file:///store/x/../team/mine/", None, False),
        ("file:///store/%2E%2E/team/mine/", None, False),
        ("s3://bucket/team/mine/?X-Amz-Credential=abc", None, False),
        ("s3://bucket/team/mine/", "http://127.0.0.1:9000/?X-Amz-Credential=abc", False),
        ("http://host/team/mine/", None, False),
    ],
)
def test_a_run_root_annotation_is_followed_only_as_the_jobs_own(
    root: str, endpoint: str | None, followed: bool
) -> None:
    found = StorageLocation.of(manifest(root, endpoint))
    assert (found is not None) == followed
    assert (StorageLocation.problem(manifest(root, endpoint)) is None) == followed


def test_a_store_inside_another_store_is_refused(tmp_path: Path) -> None:
    """A run root nested in another job's run directory (a namespace `checkpoints`, say)
    could forge that job's checkpoints: its store lies inside a store, and is refused."""
    store = tmp_path / "store"
    file_store.claim(store)
    victim = store / "team" / "victim"
    victim.mkdir(parents=True)
    problem = file_store.store_problem(victim)
    assert problem and f"inside the store {store}" in problem
    assert file_store.store_problem(store) is None


def test_a_loopback_endpoint_is_relayed_only_when_it_answers_as_the_store(tmp_path: Path) -> None:
    """A hand-written TrainJob's endpoint annotation pointing at any port of this machine:
    refused unless that port answers as the job's S3 store (here: a plain TCP service)."""
    import json
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "relay",
            "annotations": {
                RUN_ROOT_ANNOTATION: "s3://bucket/runs/default/relay/",
                ENDPOINT_ANNOTATION: f"http://127.0.0.1:{port}",
            },
        },
        "spec": {"runtimeRef": {"name": "kctl-train"}, "trainer": {"command": ["true"]}},
    }
    path = tmp_path / "tj.json"
    path.write_text(json.dumps(job))
    env = {"KCTL_TRAIN_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}  # fmt: skip
    try:
        run = subprocess.run(
            [KCTL, "apply", str(path), "--local", "--dry-run=server"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        listener.close()
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert f"storage endpoint http://127.0.0.1:{port}: it does not answer as the job's store" in (
        run.stderr
    )
