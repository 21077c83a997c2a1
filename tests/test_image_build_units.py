"""`kctl-train build` without a builder: what goes into an image, the tag, references,
credentials, the builder choice and its command lines, and a real registry's answers."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from operator_client.errors import BadInput, BuildError, NoBuilder, RegistryError
from operator_client.image import workspace as ws
from operator_client.image.builders import Buildah, Docker, Podman, choose
from operator_client.image.pipeline import content_tag, local_repository, push_error
from operator_client.image.recipe import MISSING_RUNTIME, dockerfile
from operator_client.image.registry import ImageRef, Registry, auth_files, credentials

from . import registry as test_registry
from .conftest import ROOT


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def paths(workspace: ws.Workspace) -> list[str]:
    return [e.path for e in workspace.entries]


PROJECT = {
    "train/model.py": "x = 1\n",
    "train/__pycache__/model.cpython-311.pyc": "bytecode",
    "data/big.bin": "0" * 100,
    "data/keep.txt": "kept\n",
    "notes.log": "log\n",
    "sub/notes.log": "log\n",
    ".env": "TOKEN=secret\n",
    ".env.prod": "TOKEN=secret\n",
    ".git/config": "[core]\n",
    "keys/server.pem": "-----BEGIN-----\n",
    "deploy/.aws/credentials": "[default]\n",
    ".venv/bin/python": "#!/bin/sh\n",
}


@pytest.mark.parametrize(
    ("ignore_file", "text", "expected"),
    [
        # .dockerignore patterns are anchored at the root: notes.log is ./notes.log only.
        (
            ".dockerignore",
            "data\n!data/keep.txt\nnotes.log\n.venv\n",
            [".dockerignore", "data/keep.txt", "sub/notes.log", "train/model.py"],
        ),
        # .gitignore patterns match at any depth.
        (
            ".gitignore",
            "data/\n*.log\n.venv/\n",
            [".gitignore", "train/model.py"],
        ),
        # Neither: the defaults leave out virtual environments and caches.
        (
            None,
            "",
            ["data/big.bin", "data/keep.txt", "notes.log", "sub/notes.log", "train/model.py"],
        ),
    ],
)
def test_what_goes_in(
    tmp_path: Path, ignore_file: str | None, text: str, expected: list[str]
) -> None:
    files = dict(PROJECT)
    if ignore_file:
        files[ignore_file] = text
    workspace = ws.scan(make(tmp_path, files))
    assert paths(workspace) == expected
    assert workspace.rules == (ignore_file or "defaults")


def test_secrets_never_go_in_even_when_an_ignore_file_asks(tmp_path: Path) -> None:
    files = {**PROJECT, ".dockerignore": "!.env\n!.git\n!keys/server.pem\n"}
    workspace = ws.scan(make(tmp_path, files))
    assert not {".env", ".env.prod", "keys/server.pem"} & set(paths(workspace))
    assert not any(p.startswith((".git/", "deploy/.aws")) for p in paths(workspace))
    assert workspace.secrets == [".env", ".env.prod", ".git/", "deploy/.aws/", "keys/server.pem"]
    assert "5 secret file(s)" in workspace.summary()


def test_kind_is_package_with_a_pyproject_or_setup_py(tmp_path: Path) -> None:
    assert ws.scan(make(tmp_path / "a", {"m.py": ""})).kind == "modules"
    assert ws.scan(make(tmp_path / "b", {"m.py": "", "pyproject.toml": ""})).kind == "package"
    assert ws.scan(make(tmp_path / "c", {"m.py": "", "setup.py": ""})).kind == "package"


def test_the_digest_is_of_paths_modes_and_bytes(tmp_path: Path) -> None:
    root = make(tmp_path, {"a.py": "a\n", "pkg/b.py": "b\n"})
    first = ws.scan(root).digest()
    assert ws.scan(root).digest() == first
    (root / "__pycache__").mkdir()  # running the code changes nothing that goes in
    (root / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert ws.scan(root).digest() == first
    (root / "pkg" / "b.py").write_text("b \n")
    changed = ws.scan(root).digest()
    assert changed != first
    (root / "a.py").chmod(0o755)
    assert ws.scan(root).digest() not in (first, changed)


def test_a_workspace_over_the_limit_names_its_biggest_entries(tmp_path: Path) -> None:
    root = make(
        tmp_path,
        {"data/a.bin": "0" * 3000, "data/b.bin": "0" * 3000, "ckpt.pt": "0" * 2000, "m.py": ""},
    )
    with pytest.raises(BadInput) as caught:
        ws.scan(root, max_bytes=4096)
    message = str(caught.value)
    assert "7.8 KiB, over the 4.0 KiB limit" in message
    assert "biggest entries: data/ (5.9 KiB), ckpt.pt (2.0 KiB), m.py (0 B)" in message
    assert ".dockerignore" in message and "--max-size" in message


def test_staging_copies_exactly_what_was_hashed(tmp_path: Path) -> None:
    root = make(tmp_path / "src", {"run.sh": "#!/bin/sh\n", "pkg/m.py": "m\n"})
    (root / "run.sh").chmod(0o755)
    (root / "link.py").symlink_to("pkg/m.py")
    workspace = ws.scan(root)
    ws.stage(workspace, tmp_path / "ctx")
    assert (tmp_path / "ctx/pkg/m.py").read_text() == "m\n"
    assert os.access(tmp_path / "ctx/run.sh", os.X_OK)
    assert os.readlink(tmp_path / "ctx/link.py") == "pkg/m.py"
    (root / "pkg/m.py").write_text("saved during the build\n")
    with pytest.raises(BuildError, match=r"m\.py changed during the build"):
        ws.stage(workspace, tmp_path / "ctx2")


def test_the_tag_changes_with_any_input() -> None:
    recipe = dockerfile("trainer:1", "package", "d1")
    tag = content_tag(recipe, "sha256:base", "d1")
    assert len(tag) == 20 and tag == content_tag(recipe, "sha256:base", "d1")
    assert tag != content_tag(recipe, "sha256:other-base", "d1")
    assert tag != content_tag(recipe, "sha256:base", "d2")
    assert tag != content_tag(dockerfile("trainer:2", "package", "d1"), "sha256:base", "d1")


def test_the_recipe_checks_the_runtime_first_and_runs_as_the_pod_user() -> None:
    package = dockerfile("trainer:1", "package", "abc").splitlines()
    assert package[1] == "FROM trainer:1"
    assert MISSING_RUNTIME in package[3] and "command -v kctl-train-runtime" in package[3]
    assert any(line.startswith("RUN pip install --no-cache-dir /tmp/") for line in package)
    assert package[-2:] == ["USER 10001:10001", 'ENTRYPOINT ["kctl-train-runtime"]']
    modules = dockerfile("trainer:1", "modules", "abc")
    assert "COPY workspace/ /workspace/" in modules and "ENV PYTHONPATH=/workspace" in modules
    assert "pip install" not in modules


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("ghcr.io/acme/train:1.0", "ghcr.io", "acme/train", "1.0", None),
        ("localhost:5000/team/train", "localhost:5000", "team/train", None, None),
        ("localhost/kctl-train/trainer:dev", "localhost", "kctl-train/trainer", "dev", None),
        ("pytorch/pytorch:2.9.1", "docker.io", "pytorch/pytorch", "2.9.1", None),
        ("ubuntu", "docker.io", "library/ubuntu", None, None),
        (
            "127.0.0.1:5055/a/b@sha256:" + "0" * 64,
            "127.0.0.1:5055",
            "a/b",
            None,
            "sha256:" + "0" * 64,
        ),
    ],
)
def test_references(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


@pytest.mark.parametrize("text", ["UPPER/case", "a b", "acme/train:", ":tag"])
def test_bad_references(text: str) -> None:
    with pytest.raises(BadInput, match="not an image reference"):
        ImageRef.parse(text)


@pytest.mark.parametrize(
    ("registry", "loopback"),
    [
        ("localhost:5000", True),
        ("127.0.0.1:5055", True),
        ("ghcr.io", False),
        ("10.0.0.1:5000", False),
    ],
)
def test_loopback_registries(registry: str, loopback: bool) -> None:
    assert ImageRef(registry, "a").loopback is loopback


def test_the_local_repository_is_named_for_the_directory() -> None:
    assert local_repository(Path("/home/me/My Project_2")) == "localhost/kctl-train/my-project-2"


def _auth(user: str, secret: str) -> str:
    return base64.b64encode(f"{user}:{secret}".encode()).decode()


def test_credentials_come_from_the_first_file_that_has_them(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": _auth("hub", "h")},
                    "ghcr.io": {"auth": _auth("d", "1")},
                }
            }
        )
    )
    containers = tmp_path / "auth.json"
    containers.write_text(json.dumps({"auths": {"ghcr.io": {"auth": _auth("c", "2")}}}))
    env = {"DOCKER_CONFIG": str(docker), "REGISTRY_AUTH_FILE": str(containers)}
    files = auth_files(None, env)
    assert files == [containers, docker / "config.json"]
    assert credentials("ghcr.io", files) == ("c", "2")
    assert credentials("docker.io", files) == ("hub", "h")
    assert credentials("quay.io", files) is None
    with pytest.raises(BadInput, match="no such file"):
        auth_files(str(tmp_path / "missing.json"))


def test_a_credential_helper_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "bin" / "docker-credential-test"
    helper.parent.mkdir()
    helper.write_text(
        f"#!{sys.executable}\nimport json, sys\nserver = sys.stdin.read().strip()\n"
        "if server != 'registry.example.com': sys.exit(1)\n"
        "print(json.dumps({'Username': 'robot', 'Secret': 'token'}))\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"credHelpers": {"registry.example.com": "test"}}))
    assert credentials("registry.example.com", [config]) == ("robot", "token")
    assert credentials("other.example.com", [config]) is None


def test_the_builder_is_the_first_that_can_build() -> None:
    def which(present: set[str]) -> Callable[[str], str | None]:
        return lambda name: f"/usr/bin/{name}" if name in present else None

    engine_up, engine_down = (lambda: True), (lambda: False)
    everything = {"docker", "podman", "buildah"}
    assert isinstance(choose(None, {}, which(everything), engine_up), Docker)
    chosen = choose(None, {}, which(everything), engine_down)
    assert isinstance(chosen, Podman) and "no Docker engine" in chosen.why
    assert isinstance(choose(None, {}, which({"buildah"}), engine_up), Buildah)
    assert isinstance(
        choose(None, {"KCTL_TRAIN_BUILDER": "buildah"}, which(everything), engine_up), Buildah
    )
    with pytest.raises(NoBuilder) as caught:
        choose(None, {}, which({"docker"}), engine_down)
    message = str(caught.value)
    assert "no Docker engine answers" in message and "podman is not installed" in message
    assert "buildah is not installed" in message and "apt-get install" in message
    with pytest.raises(BadInput, match="use one of docker, podman, buildah"):
        choose("kaniko", {}, which(everything), engine_up)


def test_push_commands() -> None:
    local = ImageRef.parse("127.0.0.1:5000/a/b:t1")
    assert Buildah("").push_command(local, Path("/auth.json")) == [
        "buildah", "push", "--authfile", "/auth.json", "--tls-verify=false",
        "127.0.0.1:5000/a/b:t1", "docker://127.0.0.1:5000/a/b:t1",
    ]  # fmt: skip
    remote = ImageRef.parse("ghcr.io/a/b:t1")
    assert Podman("").push_command(remote, None) == [
        "podman",
        "push",
        "ghcr.io/a/b:t1",
        "docker://ghcr.io/a/b:t1",
    ]
    assert Docker("").push_command(remote, None) == ["docker", "push", "ghcr.io/a/b:t1"]
    assert Buildah("").build_command(Path("/ctx"), "x:1", ["/etc/pip.conf"])[-4:] == [
        "--volume=/etc/pip.conf:/etc/pip.conf:ro", "-t", "x:1", "/ctx",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Error: pushing: unauthorized: authentication required", "401 unauthorized; log in"),
        ("denied: requested access to the resource is denied", "403 denied"),
        ("name unknown: repository name not known to registry", "has no repository"),
        (
            "Error: writing blob: connection reset by peer",
            "push of ghcr.io/a/b:t failed: Error: writing blob",
        ),
    ],
)
def test_a_refused_push_is_one_line(output: str, expected: str) -> None:
    error = push_error(ImageRef.parse("ghcr.io/a/b:t"), f"Copying blob\n{output}")
    assert expected in str(error) and "\n" not in str(error) and "ghcr.io/a/b" in str(error)


# The registry's answers, from the real distribution registry on loopback.
needs_registry = pytest.mark.skipif(not test_registry.available(), reason=test_registry.WHY_NOT)


@needs_registry
def test_the_registry_reports_the_digest_of_a_tag(tmp_path: Path) -> None:
    with test_registry.serve(tmp_path) as host:
        digest = test_registry.put_image(host, "team/train", "abc")
        registry = Registry(ImageRef.parse(f"{host}/team/train"), None)
        assert registry.digest("abc") == digest
        assert registry.digest("not-there") is None
        assert Registry(ImageRef.parse(f"{host}/team/never-pushed"), None).digest("x") is None


@needs_registry
def test_a_registry_that_wants_credentials(tmp_path: Path) -> None:
    with test_registry.serve(tmp_path, users={"robot": "s3cret"}) as host:
        digest = test_registry.put_image(host, "team/train", "abc", auth=("robot", "s3cret"))
        ref = ImageRef.parse(f"{host}/team/train")
        with pytest.raises(RegistryError) as caught:
            Registry(ref, None).digest("abc")
        assert caught.value.status == 401
        assert str(caught.value) == (
            f"registry refused {host}/team/train: 401 unauthorized; log in (docker login "
            f"{host}, podman login) or pass --registry-auth FILE"
        )
        with pytest.raises(RegistryError, match="401"):
            Registry(ref, ("robot", "wrong")).digest("abc")
        auth = tmp_path / "auth.json"
        auth.write_text(json.dumps({"auths": {host: {"auth": _auth("robot", "s3cret")}}}))
        assert Registry(ref, credentials(host, auth_files(str(auth)))).digest("abc") == digest


def test_a_server_that_is_no_registry(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "0",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().split("port ")[1].split()[0]
        with pytest.raises(RegistryError, match="does not serve the registry API"):
            Registry(ImageRef.parse(f"127.0.0.1:{port}/a/b"), None).digest("t")
    finally:
        server.terminate()
        server.wait()


def test_the_image_scripts_use_the_same_pip_configuration() -> None:
    from operator_client.image.pip_config import pip_paths

    shell = subprocess.run(
        ["bash", "-c", f"source {ROOT}/images/pip-config.sh && pip_paths"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert shell == pip_paths("python3")


def test_no_builder_is_a_clear_error(tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    (tmp_path / "train.py").write_text("x = 1\n")
    done = subprocess.run(
        [str(bindir / "kctl-train"), "build", "--base", "trainer:1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": str(bindir), "HOME": str(tmp_path), "NO_COLOR": "1"},
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        "no image builder here: docker is not installed; podman is not installed; " in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_big_workspace_is_refused_before_any_build(tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    make(tmp_path, {"data/shard.bin": "0" * 4096, "train.py": ""})
    done = subprocess.run(
        [str(bindir / "kctl-train"), "build", "--base", "trainer:1", "--max-size", "1Ki"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    assert "over the 1.0 KiB limit" in done.stderr and "data/ (4.0 KiB)" in done.stderr


def test_docker_gets_credentials_through_a_private_config_removed_after(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auths": {"ghcr.io": {"auth": _auth("u", "p")}}}))
    with Docker("").push_env(auth) as env:
        config = Path(env["DOCKER_CONFIG"])
        assert json.loads((config / "config.json").read_text()) == json.loads(auth.read_text())
    assert not config.exists()
    docker_dir = tmp_path / "docker"
    docker_dir.mkdir()
    (docker_dir / "config.json").write_text("{}")
    with Docker("").push_env(docker_dir / "config.json") as env:
        assert env == {"DOCKER_CONFIG": str(docker_dir)}
    with Buildah("").push_env(auth) as env:
        assert env == {}  # --authfile carries it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-size", "lots"], "argument --max-size: 'lots' is not a Kubernetes quantity"),
        ([], "say which image to build on: --base IMAGE, or a job file"),
    ],
)
def test_bad_build_arguments_are_clear_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    bindir = Path(sys.executable).parent
    base = ["--base", "trainer:1"] if args else []
    done = subprocess.run(
        [str(bindir / "kctl-train"), "build", *base, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_secrets_named_by_their_kind_never_go_in(tmp_path: Path) -> None:
    names = ["service-account.json", "gcp-key.json", "prod.kubeconfig", ".pgpass",
             "terraform.tfstate", "infra/terraform.tfstate.backup"]  # fmt: skip
    workspace = ws.scan(make(tmp_path, {**{n: "x\n" for n in names}, "train.py": ""}))
    assert paths(workspace) == ["train.py"]
    assert sorted(workspace.secrets) == sorted(names)


def _build(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kctl-train build` where no builder is installed: what it refuses before building."""
    bindir = Path(sys.executable).parent
    return subprocess.run(
        [str(bindir / "kctl-train"), "build", "--base", "trainer:1", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": str(bindir), "HOME": str(tmp_path), "NO_COLOR": "1"},
        timeout=120,
    )


def test_a_secret_found_by_content_is_refused_with_its_file_and_line(tmp_path: Path) -> None:
    make(tmp_path, {
        "train.py": "import os\n",
        "conf/settings.py": "REGION = 'eu'\nKEY_ID = 'AKIAIOSFODNN7EXAMPLE'\n",
        "deploy/id.txt": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n",
        "golden.yaml": "annotations: {spec-hash: " + "ab12" * 16 + "}\ncredentialsSecret: s3\n",
    })  # fmt: skip
    done = _build(tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "conf/settings.py:2: AWS Access Key" in done.stderr
    assert "deploy/id.txt:1: Private Key" in done.stderr
    assert "golden.yaml" not in done.stderr  # a hash and a Secret's name are not secrets
    done = _build(tmp_path, "--allow-secret", "conf/settings.py", "--allow-secret", "deploy/id.txt")
    # Allowed: the build goes on to the next step (here: no builder on this PATH).
    assert done.returncode == 2 and "no image builder here" in done.stderr, done.stderr
    assert "shipped although they look like secrets" in done.stderr


def test_secrets_in_large_files_archives_and_credential_files_are_found(tmp_path: Path) -> None:
    key = "AKIAIOSFODNN7EXAMPLE"
    make(tmp_path, {
        "train.py": "import os\n",
        "admin.conf": "kind: Config\nusers:\n- user:\n    client-key-data: " + "QUJD" * 8 + "\n",
        "ci.yaml": "steps:\n- with: {token: ${{ secrets.GITHUB_TOKEN }}}\n  password: $PASSWORD\n",
        "registry-auth.json": '{"auths": {"r.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}\n',
        "train.log": "x" * (2 << 20) + "\naws_access_key_id = " + key + "\n",
    })  # fmt: skip
    with gzip.open(tmp_path / "keys.gz", "wt") as fh:
        fh.write(f"aws_access_key_id={key}\n")
    with zipfile.ZipFile(tmp_path / "bundle.zip", "w") as archive:
        archive.writestr("inner/creds.txt", f"aws_access_key_id={key}\n")
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    done = _build(tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    for expected in ("admin.conf:4: Kubernetes client key (kubeconfig)",
                     "registry-auth.json:1: registry credentials (Docker config)",
                     ": AWS Access Key", "keys.gz!:1: AWS Access Key",
                     "bundle.zip!inner/creds.txt:1: AWS Access Key",
                     "broken.tar.gz:0: an archive the scanner cannot open"):  # fmt: skip
        assert expected in done.stderr, (expected, done.stderr)
    assert "train.log:" in done.stderr and "ci.yaml" not in done.stderr


def test_an_image_name_longer_than_the_grammar_allows_is_refused() -> None:
    with pytest.raises(BadInput, match=r"\(100008 characters\): an image name has at most 255"):
        ImageRef.parse("ghcr.io/" + "a" * 100_000)
    with pytest.raises(BadInput, match="at most 255"):
        ImageRef.parse("ghcr.io/" + "a" * 250)
