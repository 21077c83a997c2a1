"""`kctl-train build` timings: cold (a registry that has nothing), warm (no change: the
registry has the tag), and one changed file (a new layer built and pushed), with the
build and push phases apart. A real registry on loopback (Debian's docker-registry), the
real builder, the trainer image as the base (`make image`). Prints the figures and the
ratios to the cold build; asserts nothing (shared machines are noisy).

    .venv/bin/python bench/build.py            (as root; `make bench` runs it)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from operator_client import Client  # noqa: E402
from tests import registry  # noqa: E402

BASE = os.environ.get("KCTL_TRAIN_TEST_IMAGE", "localhost/kctl-train/trainer:dev")
PROJECT = ROOT / "tests" / "userproject"


def why_not() -> str | None:
    if os.geteuid() != 0 or shutil.which("buildah") is None:
        return "needs root and buildah (make image)"
    if not registry.available():
        return registry.WHY_NOT
    if subprocess.run(
        ["buildah", "inspect", "--type", "image", BASE], capture_output=True
    ).returncode:
        return f"the trainer image {BASE} is not built (make image)"
    return None


def main() -> int:
    why = why_not()
    if why:
        print(f"bench/build.py: skipped: {why}")
        return 0
    client = Client("local")
    rows: list[tuple[str, float, dict[str, float], bool, bool]] = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        project = work / "project"
        shutil.copytree(PROJECT, project)
        # A marker no earlier run built: no layer of this workspace is cached anywhere.
        (project / "sinewave" / "build_id.py").write_text(f"BUILD = {uuid.uuid4().hex!r}\n")
        (work / "registry").mkdir()
        with registry.serve(work / "registry") as host:
            repo = f"{host}/bench/sinewave"

            def run(label: str) -> None:
                start = time.monotonic()
                built = client.build(project, base=BASE, repository=repo)
                total = time.monotonic() - start
                rows.append((label, total, built.seconds, built.built, built.pushed))

            run("cold: new workspace, empty registry")
            run("warm: no change")
            model = project / "sinewave" / "model.py"
            model.write_text(model.read_text() + "\n# one changed line\n")
            run("one file changed")
    cold = rows[0][1]
    header = ("total s", "build s", "push s", "built", "pushed", "x cold")
    print(f"{'case':38} " + " ".join(f"{h:>8}" for h in header))
    for label, total, seconds, built, pushed in rows:
        print(
            f"{label:38} {total:8.2f} {seconds.get('build', 0):8.2f} {seconds.get('push', 0):8.2f} "
            f"{built!s:>8} {pushed!s:>8} {total / cold:8.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
