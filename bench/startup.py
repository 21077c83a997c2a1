"""Start-up cost of the CLI, as ratios to `python3 -c pass` measured side by side.

Target (issue 2): `kctl-train render` at most 4x `python3 -c pass`. Also measured
(issue 5): `apply --dry-run=client`, and `status` against a loopback API server (the test
fixture tests/fake_apiserver.py), which pays for the kubernetes client. Prints the ratios;
it asserts nothing, since shared machines are noisy. Runs are interleaved so that load
changes hit both sides alike, and the median of each side is compared.
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
    render = statistics.median(times["kctl-train render quickstart"]) / base
    print(f"render ratio {render:.2f}x (target <= 4x): {'met' if render <= 4 else 'NOT met'}")


if __name__ == "__main__":
    main()
