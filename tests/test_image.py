"""The trainer image and the renderer agree on the user and the entrypoint; the image
built for real runs the quickstart."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from operator_client import Client
from operator_client.backends.local import LocalBackend
from operator_client.contract import RUNTIME_COMMAND, ImageRoot
from operator_client.kubeflow.security import RUN_AS_GROUP, RUN_AS_USER

from .conftest import ROOT

DOCKERFILE = (ROOT / "images" / "trainer" / "Dockerfile").read_text()


def instruction(name: str) -> str:
    found = re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, re.MULTILINE)
    assert found, f"no {name} in the Dockerfile"
    return str(found[-1]).strip()


def test_user_matches_the_pod_security_context() -> None:
    assert instruction("USER") == f"{RUN_AS_USER}:{RUN_AS_GROUP}"


def test_entrypoint_is_the_rendered_command() -> None:
    assert json.loads(instruction("ENTRYPOINT")) == list(RUNTIME_COMMAND)


def test_entrypoint_is_an_installed_console_script() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[RUNTIME_COMMAND[0]] == "operator_client.runtime.entry:main"


# The image built for real (`make image-test` builds it first: buildah here, Docker where an
# engine runs) and the quickstart run from its root filesystem in pod sandboxes.
IMAGE = os.environ.get("KCTL_TRAIN_TEST_IMAGE", "localhost/kctl-train/trainer:dev")


def _why_not_run_the_image() -> str | None:
    from operator_client.backends.local.sandbox import support

    if shutil.which("buildah") is None:
        return "buildah is not installed (`make image-test` installs it and builds the image)"
    if subprocess.run(
        ["buildah", "inspect", "--type", "image", IMAGE], capture_output=True
    ).returncode:
        return f"the image {IMAGE} is not built (`make image`)"
    why = support.why_not()
    return f"pod sandboxes are not possible here: {why}" if why else None


@pytest.fixture(scope="module")
def image_root() -> Iterator[ImageRoot]:
    """The image's root filesystem (a buildah working container, mounted) and config."""
    why = _why_not_run_the_image()
    if why is not None:
        pytest.skip(why)

    def buildah(*args: str) -> str:
        return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True).stdout

    container = buildah("from", "--quiet", "--pull-never", IMAGE).strip()
    try:
        path = buildah("mount", container).strip()
        config = json.loads(buildah("inspect", "--type", "image", IMAGE))["OCIv1"]["config"]
        env = dict(item.split("=", 1) for item in config.get("Env", []))
        yield ImageRoot(path, env, config.get("WorkingDir") or "/")
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True)


def test_the_quickstart_runs_from_the_image(
    image_root: ImageRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replicas run the image's own Python and package (uid 10001, read-only root):
    the job succeeds, resumes after its Master is killed, and every row is collected once."""
    monkeypatch.setenv("KCTL_TRAIN_HOME", str(tmp_path / "home"))
    job = yaml.safe_load((ROOT / "examples/quickstart.yaml").read_text())
    job["spec"]["train"]["modelArgs"]["step_delay"] = 0.03  # ~10 s: time to kill it
    handle = Client(LocalBackend(tmp_path / "home", image=image_root)).apply(job)
    assert handle.submitted is not None and "pod sandboxes" in handle.submitted.how
    pods = json.loads((tmp_path / "home/local/default/quickstart/pods.json").read_text())
    assert pods["image"]["path"] == image_root.path
    deadline = time.monotonic() + 240
    while not any("checkpoint step 100 committed" in line.text for line in handle.logs()):
        assert time.monotonic() < deadline, "no checkpoint committed"
        assert not handle.status().ended, "\n".join(line.text for line in handle.logs())
        time.sleep(0.5)
    description = json.loads(
        (tmp_path / "home/local/default/quickstart/pods/quickstart-master-0/pod.json").read_text()
    )
    assert description["rootfs"] == image_root.path and description["uid"] == 10001
    handle.inject("kill", "quickstart-master-0")
    view = handle.wait(timeout=300)
    assert view.state == "Succeeded", view.message
    logs = "\n".join(line.text for line in handle.logs())
    assert "resuming from checkpoints/step-" in logs
    collected = handle.collect(to=tmp_path / "results")
    assert not collected.problems and collected.summary["success"]["step"] == 300
    with (tmp_path / "results/outputs/val/all.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    seen = Counter((r["epoch"], r["sample"]) for r in rows)
    assert rows and set(seen.values()) == {1}
