"""A checkpoint's staging buffers against the pod's memory limit (runtime/memory.py): the
limit and use read from cgroup v2 or v1 as a container sees them, and the refusal at the
first save, with what to do. Pure rules and fake cgroup trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_client.runtime import memory
from operator_client.runtime.memory import PodMemory, staging_problem

GIB = 2**30


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize(
    ("proc_cgroup", "files", "expected"),
    [
        # cgroup v2 in a container: its own cgroup is the root.
        ("0::/\n", {"memory.max": "8589934592\n", "memory.stat": "anon 1073741824\nfile 5\n"},
         PodMemory(8 * GIB, GIB)),
        # v2 with the path visible (no cgroup namespace), as a local pod sandbox sees it.
        ("0::/kctl-train/pod-a\n",
         {"kctl-train/pod-a/memory.max": "4294967296", "kctl-train/pod-a/memory.stat": "anon 42"},
         PodMemory(4 * GIB, 42)),
        ("0::/\n", {"memory.max": "max\n", "memory.stat": "anon 1\n"}, None),  # no limit
        # cgroup v1: the memory controller's own hierarchy.
        ("12:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/x\n",
         {"memory/kubepods/pod1/c1/memory.limit_in_bytes": str(2 * GIB),
          "memory/kubepods/pod1/c1/memory.stat": "cache 9\nrss 7\ntotal_rss 100\n"},
         PodMemory(2 * GIB, 100)),
        ("5:memory:/\n", {"memory/memory.limit_in_bytes": str(memory.NO_LIMIT_V1 + 4096),
                          "memory/memory.stat": "total_rss 1\n"}, None),
        ("5:memory:/\n", {}, None),  # nothing readable
    ],
)  # fmt: skip
def test_the_pods_limit_and_use_as_its_cgroup_shows_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    proc_cgroup: str,
    files: dict[str, str],
    expected: PodMemory | None,
) -> None:
    write(tmp_path, files)
    monkeypatch.setattr(memory, "CGROUP", tmp_path)
    assert memory.pod_memory(proc_cgroup) == expected


@pytest.mark.parametrize(
    ("share", "ranks", "pod", "refused"),
    [
        (GIB, 1, None, False),  # no limit known: nothing to refuse
        (GIB, 1, PodMemory(16 * GIB, 4 * GIB), False),
        (GIB, 8, PodMemory(16 * GIB, 4 * GIB), False),  # 8 of 10.4 GiB of room
        (GIB, 8, PodMemory(16 * GIB, 8 * GIB), True),  # 8 of 6.4
        (3 * GIB, 1, PodMemory(4 * GIB, 1 * GIB), True),  # 3 of 2.6: headroom kept
        (GIB, 1, PodMemory(GIB, 2 * GIB), True),  # already over: no room at all
    ],
)
def test_staging_is_refused_when_the_pod_has_no_room_for_every_ranks_share(
    share: int, ranks: int, pod: PodMemory | None, refused: bool
) -> None:
    problem = staging_problem(share, ranks, pod)
    assert (problem is not None) is refused
    if problem:
        assert f"{ranks} rank(s) x {memory.gib(share)}" in problem
        assert "raise spec.resources.memory" in problem and "more nodes" in problem
        assert "leaves -" not in problem


def test_this_process_reads_its_own_resident_memory() -> None:
    before = memory.rss()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touched: resident
    assert memory.rss() - before > 48 * 2**20
