"""Start-up cost of the CLI, as ratios to `python3 -c pass` measured side by side.

Targets (issue 32): `render`, `validate` and `apply --dry-run=client` at most 6x
`python3 -c pass`, `status` (against a loopback API server, the test fixture
tests/fake_apiserver.py, so it pays for the kubernetes client) at most 10x; an import
profile of `render` follows the ratios. Two rows show the floors the chosen libraries set
before any of kctl-train's code runs: PyYAML with pydantic and the job model's validator
(render, validate, apply), and `import kubernetes` (status). Prints the ratios; it asserts
nothing, since shared machines are noisy. Runs are interleaved so that load changes hit
both sides alike, and the median of each side is compared.

`--against REV` also runs the offline commands (render, validate, apply --dry-run=client,
--version) of that git revision, checked out in a temporary worktree, in the same runs: a
before/after measured side by side.

Usage: python bench/startup.py [--against REV]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fake_apiserver import FakeApiServer  # noqa: E402

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
KCTL = str(Path(sys.executable).parent / "kctl-train")
RUNS = 15

COMMANDS = {
    "python3 -c pass": [sys.executable, "-c", "pass"],
    # The floor any pydantic-based spec pays before a single model exists.
    "python3 -c 'import pydantic.BaseModel'": [
        sys.executable,
        "-c",
        "from pydantic import BaseModel",
    ],
    # render's and validate's floor with the chosen libraries: PyYAML, pydantic and the
    # job model's validator, built once, as any validated spec must (nothing of the CLI).
    "python3 -c 'import yaml, spec.model'": [
        sys.executable,
        "-c",
        # With the plugin scan off, as the CLI has it (cli/__init__.py).
        "import os; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'; "
        "import yaml, operator_client.spec.model",
    ],
    # status's floor: the official client's package, before any of kctl-train's code.
    "python3 -c 'import kubernetes'": [sys.executable, "-c", "import kubernetes"],
    "kctl-train --version": [KCTL, "--version"],
    "kctl-train validate quickstart": [KCTL, "validate", QUICKSTART],
    "kctl-train render quickstart": [KCTL, "render", QUICKSTART],
    "kctl-train apply --dry-run=client": [KCTL, "apply", QUICKSTART, "--dry-run=client"],
    "kctl-train status (loopback API)": [KCTL, "status", "quickstart"],
}
# Issue 32's ratios to `python3 -c pass`.
TARGETS = {
    "render quickstart": 6.0,
    "validate quickstart": 6.0,
    "apply --dry-run=client": 6.0,
    "status (loopback API)": 10.0,
}


# The offline commands, run from another revision's tree (--against): the interpreter's
# path starts with that tree, so its operator_client is imported instead of this one's.
AGAINST = {
    "--version": ["--version"],
    "validate quickstart": ["validate", QUICKSTART],
    "render quickstart": ["render", QUICKSTART],
    "apply --dry-run=client": ["apply", QUICKSTART, "--dry-run=client"],
}
FROM_TREE = "import sys; sys.path.insert(0, sys.argv.pop(1)); from operator_client.cli.main import main; sys.exit(main(sys.argv[1:]))"  # noqa: E501


@contextlib.contextmanager
def worktree(rev: str | None) -> Iterator[Path | None]:
    """A temporary checkout of `rev` (None: nothing to check out)."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="also run these commands of REV")
    against = parser.parse_args().against
    commands = dict(COMMANDS)
    api = FakeApiServer()
    with tempfile.TemporaryDirectory() as tmp, worktree(against) as tree:
        if tree is not None:  # both revisions started alike, beside the console script's
            for name, args in AGAINST.items():
                for label, root in ((against, tree), ("this tree", ROOT)):
                    argv = [sys.executable, "-c", FROM_TREE, str(root), *args]
                    commands[f"{label} {name}"] = argv
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig(Path(tmp)))}
        subprocess.run([KCTL, "apply", QUICKSTART], check=True, env=env, capture_output=True)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(RUNS):
            for name, argv in commands.items():
                start = time.perf_counter()
                subprocess.run(argv, check=True, env=env, capture_output=True)
                times[name].append(time.perf_counter() - start)
    api.stop()
    base = statistics.median(times["python3 -c pass"])
    print(f"{'command':44} {'median ms':>10} {'ratio':>7}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:44} {median * 1000:10.1f} {median / base:6.2f}x")
    for name, target in TARGETS.items():
        ratio = statistics.median(times[f"kctl-train {name}"]) / base
        met = "met" if ratio <= target else "NOT met"
        print(f"{name} ratio {ratio:.2f}x (target <= {target:g}x): {met}")
    print()
    import_profile([KCTL, "render", QUICKSTART])


def import_profile(argv: list[str]) -> None:
    """Where a command's start-up goes: `-X importtime` summed by top-level package
    (each module's own time), the biggest first, and the total."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True
    )
    own: dict[str, int] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not self_us.isdigit():
            continue  # the header line
        top = name.split(".")[0]
        if top == "operator_client":
            top = ".".join(name.split(".")[:3])  # operator_client.spec.model, ...
        own[top] = own.get(top, 0) + int(self_us)
    total = sum(own.values())
    print(f"imports of `kctl-train render`: {total / 1000:.0f} ms, by package (own time):")
    for name, us in sorted(own.items(), key=lambda item: -item[1])[:15]:
        print(f"  {name:40} {us / 1000:7.1f} ms  {100 * us / total:5.1f} %")


if __name__ == "__main__":
    main()
