"""The call path of `Client.apply(--dry-run=server)` through the project's rooms.

Issue 32 asks that the path of an apply no longer go back and forth between a backend and
the rules more than twice: the backend should ask controlplane/ for one plan of the job's
pods and read it. (kubeflow/ holds API facts, names and kinds, which a backend may look up
anywhere; it counted as the rules before controlplane/ had its room.) This traces every
call into an operator_client function (not comprehensions) during an apply of the
quickstart with `--dry-run=server`, on the local backend and on the Kubernetes backend
against the loopback API server of the tests (tests/fake_apiserver.py), and prints:

- stays: runs of consecutive calls in one room (a package: backends/local, controlplane, ...)
- rooms: how many different rooms the path passes through
- climbs back: how often the path returns from the rules into the backend (target <= 2)

It asserts nothing: it measures what a refactoring changes.

Usage: python bench/call_path.py [--show]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_client import Client  # noqa: E402
from tests.fake_apiserver import FakeApiServer  # noqa: E402

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
RULES = ("controlplane",)
TARGET = 2


def room_of(module: str) -> str | None:
    """The room a module belongs to: operator_client's package, with the backend named
    (backends/local, backends/kubernetes; base, types, views are `backends`)."""
    parts = module.split(".")
    if parts[0] != "operator_client" or len(parts) < 2:
        return None
    if parts[1] == "backends" and len(parts) > 2 and parts[2] in ("local", "kubernetes"):
        return f"backends/{parts[2]}"
    return parts[1]


def trace(call: Callable[[], Any]) -> list[tuple[str, str]]:
    """The stays of `call`: (room, the function that entered it), in order."""
    stays: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name.startswith("<"):
            return
        room = room_of(frame.f_globals.get("__name__", ""))
        if room and (not stays or stays[-1][0] != room):
            stays.append((room, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stays


def climbs_back(stays: list[tuple[str, str]]) -> int:
    """How often the path goes from the rules back into a backend."""
    path = [room for room, _ in stays if room in RULES or room.startswith("backends")]
    return sum(1 for a, b in itertools.pairwise(path) if a in RULES and b.startswith("backends"))


def report(name: str, stays: list[tuple[str, str]], show: bool) -> None:
    climbs = climbs_back(stays)
    met = "met" if climbs <= TARGET else "NOT met"
    rooms = len({room for room, _ in stays})
    print(
        f"{name}: {len(stays)} stays in {rooms} rooms; climbs back from the rules into the "
        f"backend: {climbs} (target <= {TARGET}: {met})"
    )
    if show:
        print("  " + " > ".join(f"{room}:{function}" for room, function in stays))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print every stay of each path")
    show = parser.parse_args().show
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KCTL_TRAIN_HOME"] = str(Path(tmp) / "home")
        local = Client("local")
        _ = local.info  # the backend is made on first use: made here, outside the traced apply
        report("local", trace(lambda: local.apply(QUICKSTART, dry_run="server")), show)
        api = FakeApiServer()
        try:
            cluster = Client("kubernetes", kubeconfig=str(api.kubeconfig(Path(tmp))))
            _ = cluster.info
            report(
                "kubernetes",
                trace(lambda: cluster.apply(QUICKSTART, dry_run="server")),
                show,
            )
        finally:
            api.stop()


if __name__ == "__main__":
    main()
