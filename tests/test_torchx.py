"""The TorchX scheduler: the AppDef mapping (pure, table-driven) and, with TorchX itself in
its own environment (.venv-torchx, made by `make test`: TorchX 0.7 pins urllib3<1.27), the
registered scheduler's dryrun and `torchx run --dryrun` producing a PyTorchJob the CRD takes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from operator_client.integrations.torchx_appdef import (
    AppDefError,
    RoleSpec,
    job_document,
    job_name,
    launch_of,
)
from operator_client.kubeflow.webhook import webhook_errors
from operator_client.render import render
from operator_client.spec import load_job_text

from .conftest import ROOT
from .crd import crd_errors

DDP = (  # what torchx.components.dist.ddp(script="train.py", j="2x4") puts in its role
    "torchrun --rdzv_backend c10d --rdzv_endpoint $${TORCHX_RANK0_HOST:=localhost}:29500 "
    "--rdzv_id ${app_id} --nnodes 2 --nproc_per_node 4 --tee 3 --role '' train.py --lr 0.1"
)


@pytest.mark.parametrize(
    ("entrypoint", "args", "command", "nproc"),
    [
        ("bash", ["-c", DDP], ["python", "train.py", "--lr", "0.1"], 4),
        (
            "bash",
            ["-c", "torchrun --nproc-per-node=2 -m pkg.train x"],
            ["python", "-m", "pkg.train", "x"],
            2,
        ),
        ("bash", ["-c", "torchrun --no_python ./run.sh a"], ["./run.sh", "a"], None),
        ("python", ["train.py"], ["python", "train.py"], None),
        ("bash", ["-c", "echo hi"], ["bash", "-c", "echo hi"], None),
    ],
)
def test_what_a_role_runs(
    entrypoint: str, args: list[str], command: list[str], nproc: int | None
) -> None:
    launch = launch_of(RoleSpec("r", "img", entrypoint, args))
    assert (launch.command, launch.nproc_per_node) == (command, nproc)


def test_an_unknown_torchrun_option_is_an_error() -> None:
    with pytest.raises(AppDefError, match="--bogus"):
        launch_of(RoleSpec("r", "img", "bash", ["-c", "torchrun --bogus 1 train.py"]))


@pytest.mark.parametrize(
    ("app", "name"),
    [("train-abc123", "train-abc123"), ("My_App.v2", "my-app-v2"), ("9lives", "lives")],
)
def test_job_names(app: str, name: str) -> None:
    assert job_name(app) == name


def test_a_ddp_app_becomes_a_valid_job() -> None:
    role = RoleSpec(
        "train", "ghcr.io/acme/trainer:1", "bash", ["-c", DDP], num_replicas=4, min_replicas=2,
        env={"LOGLEVEL": "INFO"}, cpu=8, gpu=4, mem_mb=65536, max_retries=3,
    )  # fmt: skip
    doc = job_document("train-x1", [role], {"namespace": "ml", "storage": "s3://bucket/runs"})
    job = load_job_text(json.dumps(doc)).job
    manifest = render(job)
    assert crd_errors(manifest) == [] and webhook_errors(manifest) == []
    assert doc["spec"]["nodes"] == {"min": 2, "max": 4}
    assert doc["spec"]["resources"] == {"cpu": "8", "memory": "65536Mi", "gpus": 4}
    assert manifest["spec"]["nprocPerNode"] == "4"
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 3


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        ([RoleSpec("a", "i", "python", ["x"]), RoleSpec("b", "i", "python", ["y"])], "2 roles"),
        ([RoleSpec("a", "i", "python", ["x"], mounts=["/data"])], "mount no volumes"),
    ],
)
def test_apps_a_job_cannot_express(roles: list[RoleSpec], message: str) -> None:
    with pytest.raises(AppDefError, match=message):
        job_document("app", roles, {})


VENV = ROOT / ".venv-torchx" / "bin"


def torchx_python() -> Path:
    if not (VENV / "torchx").is_file():
        message = "TorchX is not installed (make test installs it into .venv-torchx)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return VENV / "python"


PROBE = """
import json
from torchx.components.dist import ddp
from torchx.schedulers import get_scheduler_factories
factories = get_scheduler_factories()
app = ddp("--epochs", "3", script="train.py", j="2x2", image="ghcr.io/acme/trainer:1",
          cpu=4, memMB=16384, env={"WANDB_MODE": "offline"})
scheduler = factories["kctl_train"]("test")
info = scheduler.submit_dryrun(app, {"namespace": "ml", "storage": "s3://bucket/runs"})
print(json.dumps({"manifest": info.request["manifest"], "schedulers": sorted(factories),
                  "default": next(iter(factories)), "text": repr(info)}))
"""


def test_the_registered_scheduler_dryruns_a_pytorchjob() -> None:
    python = torchx_python()
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    manifest = result["manifest"]
    assert crd_errors(manifest) == [] and webhook_errors(manifest) == []
    assert manifest["metadata"]["namespace"] == "ml"
    assert manifest["spec"]["nprocPerNode"] == "2"
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    spec = json.loads(
        manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
            "env"
        ][0]["value"]
    )
    assert spec["spec"]["command"] == ["python", "train.py", "--epochs", "3"]
    assert spec["spec"]["env"]["WANDB_MODE"] == "offline"
    assert "kind: PyTorchJob" in result["text"]
    # Registering a scheduler replaces TorchX's list: the built-ins must still be there.
    assert {"local_docker", "local_cwd", "kubernetes", "slurm", "kctl_train"} <= set(
        result["schedulers"]
    )


def test_torchx_run_dryrun_on_the_command_line(tmp_path: Path) -> None:
    torchx_python()
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = subprocess.run(
        [str(VENV / "torchx"), "run", "-s", "kctl_train", "--dryrun", "-cfg", "namespace=ml",
         "dist.ddp", "-j", "2x1", "--script", "train.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "kind: PyTorchJob" in out.stdout + out.stderr
    assert "namespace: ml" in out.stdout + out.stderr


SCHEDULE = """
import json, sys, time
from torchx.components.dist import ddp
from torchx.schedulers import get_scheduler_factories
kubeconfig = sys.argv[1]
factory = get_scheduler_factories()["kctl_train"]
app = ddp(script="train.py", j="2x1", image="ghcr.io/acme/trainer:1", cpu=2, memMB=4096)
cfg = {"namespace": "default", "context": "fake", "kubeconfig": kubeconfig}
scheduler = factory("a")
app_id = scheduler.schedule(scheduler.submit_dryrun(app, cfg))
other = factory("b")  # another process: nothing but the app id to go by
described = other.describe(app_id)
lines = list(other.log_iter(app_id, "train", k=0))
other.cancel(app_id)
deadline = time.monotonic() + 30
# Foreground deletion: the job is gone once its pods are.
while other.describe(app_id) is not None and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({"app_id": app_id, "state": str(described.state), "msg": described.msg,
                  "lines": lines, "gone": other.describe(app_id) is None}))
"""


def test_the_scheduler_applies_through_the_client_on_the_configured_context(
    tmp_path: Path,
) -> None:
    """schedule() runs the preflight and the server-side apply of `kctl-train apply`; every
    later call (describe, logs, cancel) reaches the context and kubeconfig it was given,
    not the current context (here a dead server)."""
    import yaml

    from .fake_apiserver import FakeApiServer

    python = torchx_python()
    api = FakeApiServer()
    try:
        config = yaml.safe_load(api.kubeconfig(tmp_path).read_text())
        config["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
        config["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "me"}})
        config["current-context"] = "dead"
        kubeconfig = tmp_path / "two-contexts"
        kubeconfig.write_text(yaml.safe_dump(config))
        api.state.pods = [
            {
                "metadata": {"name": f"{name}-master-0", "namespace": "default",
                             "labels": {"training.kubeflow.org/job-name": name}},
                "status": {"phase": "Running"},
            }
            for name in ("train",)
        ]  # fmt: skip
        api.state.logs = {"train-master-0": ["hello"]}
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        out = subprocess.run(
            [str(python), "-c", SCHEDULE, str(kubeconfig)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout.splitlines()[-1])
        name = result["app_id"].split(":")[1]
        assert result["app_id"] == f"default:{name}:fake:{kubeconfig}"
        assert result["gone"] is True
        paths = [(r.method, r.path) for r in api.state.requests]
        # The preflight ran before the apply: the CRD, RBAC reviews, then the PATCH.
        crd = paths.index(
            (
                "GET",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
            )
        )
        review = [i for i, p in enumerate(paths) if p[1].endswith("selfsubjectaccessreviews")]
        patch = next(i for i, p in enumerate(paths) if p[0] == "PATCH")
        assert crd < patch and review and max(review) < patch
        assert any(
            p == ("DELETE", f"/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/{name}")
            for p in paths
        )
    finally:
        api.stop()
