"""Records the corpus's goldens from the real cluster of `make cluster`: each input applied
(as its admin, into kctl-fidelity, which enforces the baseline Pod Security level as a local
run does by default) through the real webhooks and controllers; then the pods they made, as
project.py keeps them, or the refusal. No kubelet is needed: the pods are read from the API
server once their number has settled, and the job is deleted.

    python -m tests.fidelity.record [NAME...]     # all inputs without names
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ..e2e.cluster import JOB_LABEL, STATE
from .corpus import GOLDEN, NAMESPACE, documents, names
from .project import project, refusal

KUBECTL = [str(STATE / "bin/kubectl"), "--kubeconfig", str(STATE / "kubeconfig")]
SETTLE_S = 3.0  # the pod count unchanged this long: the controllers are done
LIMIT_S = 30.0


def _kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def _pods(kind: str, name: str) -> list[dict[str, Any]]:
    done = _kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{JOB_LABEL[kind]}={name}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"] if done.returncode == 0 else []
    return items


def _events(name: str) -> list[str]:
    done = _kubectl("get", "events", "-n", NAMESPACE, "-o", "json")
    if done.returncode != 0:
        return []
    return sorted(
        {
            refusal(f"{e['reason']}: {e['message']}")
            for e in json.loads(done.stdout)["items"]
            if e.get("type") == "Warning" and e["involvedObject"]["name"].startswith(name)
        }
    )


def record(name: str) -> dict[str, Any]:
    """The golden of one input: its pods, or why there are none."""
    job, *runtimes = documents(name)
    kind = job["kind"].lower()
    for runtime in runtimes:
        done = _kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(runtime)
        )
        if done.returncode != 0:
            raise SystemExit(f"{name}: its runtime was refused: {done.stderr}")
    _kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=true", "--ignore-not-found")
    # An earlier recording's events would read as this one's refusals.
    _kubectl("delete", "events", "--all", "-n", NAMESPACE)
    done = _kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(job))
    if done.returncode != 0:
        return {"refused": done.stderr.strip()}
    try:
        pods: list[dict[str, Any]] = []
        settled, deadline = time.monotonic(), time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            now = _pods(kind, name)
            if len(now) != len(pods):
                pods, settled = now, time.monotonic()
            elif time.monotonic() - settled >= SETTLE_S and (pods or _events(name)):
                break  # settled, or refused by a controller (its Warning event)
            time.sleep(0.5)
        if not pods:
            return {"pods": [], "events": _events(name)}
        return {"pods": sorted((project(p) for p in pods), key=lambda p: p["name"])}
    finally:
        _kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=false")


def main(argv: list[str], into: Path = GOLDEN) -> None:
    """Record the named inputs (all without names) into `into`."""
    into.mkdir(exist_ok=True)
    for name in argv or names():
        started = time.monotonic()
        golden = record(name)
        (into / f"{name}.yaml").write_text(yaml.safe_dump(golden, sort_keys=True, width=100))
        what = f"{len(golden['pods'])} pods" if "pods" in golden else "refused"
        print(f"{name}: {what} ({time.monotonic() - started:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
