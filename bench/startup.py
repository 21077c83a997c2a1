"""Start-up cost of the CLI, as ratios to `python3 -c pass` measured side by side.

Targets (issue 32): `render`, `validate` and `apply --dry-run=client` at most 6x
`python3 -c pass`, `status` (against a loopback API server, the test fixture
tests/fake_apiserver.py, so it pays for the kubernetes client) at most 10x; an import
profile of `render` follows the ratios. Prints the ratios; it asserts nothing, since shared
machines are noisy. Runs are interleaved so that load changes hit both sides alike, and the
median of each side is compared.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
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


def main() -> None:
    api = FakeApiServer()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig(Path(tmp)))}
        subprocess.run([KCTL, "apply", QUICKSTART], check=True, env=env, capture_output=True)
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(RUNS):
            for name, argv in COMMANDS.items():
                start = time.perf_counter()
                subprocess.run(argv, check=True, env=env, capture_output=True)
                times[name].append(time.perf_counter() - start)
    api.stop()
    base = statistics.median(times["python3 -c pass"])
    print(f"{'command':34} {'median ms':>10} {'ratio':>7}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:34} {median * 1000:10.1f} {median / base:6.2f}x")
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
