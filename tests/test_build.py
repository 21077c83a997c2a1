"""`kctl-train build` for real: a user's package (its own LightningModule) built with a
real builder onto the locally built trainer image, pushed to a real registry on loopback,
pinned by the digest the registry reports, and run from the built image's root filesystem
in pod sandboxes. Needs root, buildah, docker-registry and the trainer image (`make test`
provides them here and in CI); each test skips saying which is missing."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from . import registry as test_registry
from .conftest import ROOT
from .test_image import IMAGE

PROJECT = ROOT / "tests" / "userproject"
BASE_WITHOUT_RUNTIME = "localhost/kctl-train/base:bookworm-torch2.13.0"
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def _why_not() -> str | None:
    from operator_client.backends.local.sandbox import support

    if os.geteuid() != 0:
        return "image builds with buildah here need root"
    if shutil.which("buildah") is None:
        return "buildah is not installed (`make test` installs it as root)"
    if not test_registry.available():
        return test_registry.WHY_NOT
    found = subprocess.run(["buildah", "inspect", "--type", "image", IMAGE], capture_output=True)
    if found.returncode:
        return f"the trainer image {IMAGE} is not built (`make image`)"
    why = support.why_not()
    return f"pod sandboxes are not possible here: {why}" if why else None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


def kctl(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "kctl-train"
    env = {**os.environ, "KCTL_TRAIN_HOME": str(home), "NO_COLOR": "1"}
    env.pop("KCTL_TRAIN_IMAGE_REPO", None)
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900
    )


@pytest.fixture(scope="module")
def registry_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with test_registry.serve(tmp_path_factory.mktemp("registry")) as host:
        try:
            yield host
        finally:
            forget_images(host)


def forget_images(host: str) -> None:
    """Remove from buildah's store what the tests built for the registry at `host` and
    the working containers the local backend kept to run them (each run has its own
    port, so nothing of it is ever used again: left there, every run would add GBs)."""

    def lines(*args: str) -> list[str]:
        done = subprocess.run(["buildah", *args], capture_output=True, text=True)
        return done.stdout.splitlines() if done.returncode == 0 else []

    prefix = f"{host}/"
    for line in lines("containers", "--format", "{{.ContainerName}} {{.ImageName}}"):
        name, _, image = line.partition(" ")
        if image.startswith(prefix):
            subprocess.run(["buildah", "rm", name], capture_output=True)
    for line in lines("images", "--format", "{{.Name}}:{{.Tag}}"):
        if line.startswith(prefix):
            subprocess.run(["buildah", "rmi", "--force", line], capture_output=True)


def registry_digest(host: str, repository: str, tag: str) -> str:
    answer = requests.head(
        f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": ACCEPT}, timeout=10
    )
    answer.raise_for_status()
    return str(answer.headers["Docker-Content-Digest"])


def test_build_push_pin_rebuild_and_run_the_users_module(
    registry_host: str, tmp_path: Path
) -> None:
    project = tmp_path / "sinewave"
    shutil.copytree(PROJECT, project)
    (project / ".env").write_text("WANDB_API_KEY=secret\n")  # must not go in
    home = tmp_path / "home"
    repo = f"{registry_host}/acme/sinewave"

    # 1. Built and pushed; the reference is pinned by the digest the registry reports.
    first = kctl("build", "-f", "job.yaml", "--repo", repo, "-o", "json", cwd=project, home=home)
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)
    assert built["built"] and built["pushed"] and built["builder"]["name"] == "buildah"
    assert built["workspace"]["kind"] == "package"
    assert built["workspace"]["secretsLeftOut"] == [".env"]
    assert "left out as secrets: .env" in first.stderr
    tag = built["tag"].rsplit(":", 1)[1]
    digest = registry_digest(registry_host, "acme/sinewave", tag)
    assert built["digest"] == digest and built["image"] == f"{repo}@{digest}"

    # 2. No change: nothing built or pushed, and the rendered job pins that digest.
    again = kctl(
        "apply", "job.yaml", "--build", "--repo", repo, "--dry-run=client", cwd=project, home=home
    )
    assert again.returncode == 0, again.stderr
    assert "is in the registry already: nothing to build or push" in again.stderr
    manifest = yaml.safe_load(again.stdout)
    containers = [
        spec["template"]["spec"]["containers"][0]
        for spec in manifest["spec"]["pytorchReplicaSpecs"].values()
    ]
    assert {c["image"] for c in containers} == {f"{repo}@{digest}"}

    # 3. One file changed: a new tag and a new digest.
    model = project / "sinewave" / "model.py"
    model.write_text(model.read_text().replace("HIDDEN = 16", "HIDDEN = 24"))
    second = kctl("build", "-f", "job.yaml", "--repo", repo, "-o", "json", cwd=project, home=home)
    assert second.returncode == 0, second.stderr
    rebuilt = json.loads(second.stdout)
    assert rebuilt["built"] and rebuilt["pushed"]
    assert rebuilt["tag"] != built["tag"] and rebuilt["digest"] != digest
    new_tag = rebuilt["tag"].rsplit(":", 1)[1]
    assert rebuilt["digest"] == registry_digest(registry_host, "acme/sinewave", new_tag)

    # 4. TorchX's workspace hook builds through the same path: the same pinned image.
    torchx = ROOT / ".venv-torchx" / "bin" / "python"
    if torchx.exists():
        probe = (
            "import sys\n"
            "from torchx.specs import Role\n"
            "from operator_client.integrations.torchx_scheduler import create_scheduler\n"
            f"role = Role(name='trainer', image={IMAGE!r}, entrypoint='python')\n"
            f"create_scheduler('t').build_workspace_and_update_role(role, 'file://{project}', "
            f"{{'image_repo': {repo!r}}})\n"
            "print(role.image)\n"
        )
        done = subprocess.run(
            [str(torchx), "-c", probe], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == rebuilt["image"]

    # 5. The local run uses the built image's bytes: the user's module trains to the end
    # and every validation row is collected once.
    run = kctl(
        "apply", "job.yaml", "--local", "--build", "--repo", repo, "--wait",
        "--to", str(tmp_path / "results"), cwd=project, home=home,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert "nothing to build or push" in run.stderr and "pod sandboxes" in run.stdout
    pods = json.loads((home / "local/default/sinewave/pods.json").read_text())
    assert pods["image"] is not None and pods["mode"] == "sandbox"
    summary = json.loads((tmp_path / "results/summary.json").read_text())
    assert summary["success"]["step"] == 96
    with (tmp_path / "results/outputs/val/all.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    seen = Counter((r["epoch"], r["sample"]) for r in rows)
    assert len(rows) == 6 * 64 and set(seen.values()) == {1}


def test_a_base_without_the_runtime_is_refused(tmp_path: Path) -> None:
    found = subprocess.run(
        ["buildah", "inspect", "--type", "image", BASE_WITHOUT_RUNTIME], capture_output=True
    )
    if found.returncode:
        pytest.skip(f"{BASE_WITHOUT_RUNTIME} is not built (images/base/build.sh)")
    project = tmp_path / "code"
    project.mkdir()
    (project / "train.py").write_text("x = 1\n")
    done = kctl("build", "--base", BASE_WITHOUT_RUNTIME, cwd=project, home=tmp_path / "home")
    assert done.returncode == 2
    assert f"{BASE_WITHOUT_RUNTIME} has no kctl-train-runtime on its PATH" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_registry_that_refuses_is_one_line(tmp_path: Path) -> None:
    with test_registry.serve(tmp_path, users={"robot": "s3cret"}) as host:
        done = kctl(
            "build", "--base", IMAGE, "--repo", f"{host}/acme/x", cwd=PROJECT, home=tmp_path
        )
    assert done.returncode == 1
    error = [line for line in done.stderr.splitlines() if "error" in line]
    assert error == [
        f"kctl-train: error: registry refused {host}/acme/x: 401 unauthorized; log in (docker "
        f"login {host}, podman login) or pass --registry-auth FILE"
    ]
