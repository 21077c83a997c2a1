"""Aggregation of per-rank outputs: kctl-train's streaming aggregate vs pandas.

Default (the issue's size): 512 ranks x 20,000 rows, one epoch, in a file:// store.
Baseline: `pandas.read_csv` of every member + `concat` + `to_csv`. Each side runs in its
own subprocess, so peak RSS (ru_maxrss) is measured per side. Prints times, peak memory
and ratios; asserts nothing.  Usage: python bench/aggregate.py [RANKS] [ROWS]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OURS = """
import sys
from pathlib import Path
from operator_client.runstore.aggregate import aggregate_split, committed_units
from operator_client.storage import open_store
store = open_store(Path(sys.argv[1]).as_uri())
(manifests,) = committed_units(store).values()
path, rows = aggregate_split(store, "val", manifests, Path(sys.argv[2]))
print(rows)
"""

PANDAS = """
import json, sys
from pathlib import Path
import pandas as pd
root = Path(sys.argv[1])
manifest = json.loads((root / "outputs/val/epoch-00000/MANIFEST.json").read_text())
frames = []
for m in manifest["members"]:
    df = pd.read_csv(root / m["key"])
    df.insert(0, "rank", m["rank"])
    df.insert(0, "epoch", 0)
    frames.append(df)
out = pd.concat(frames, ignore_index=True)
out.to_csv(Path(sys.argv[2]) / "all.csv", index=False)
print(len(out))
"""


def make(root: Path, ranks: int, rows: int) -> None:
    from operator_client.storage.base import sha256_file

    directory = root / "outputs/val/epoch-00000"
    directory.mkdir(parents=True)
    members = []
    for rank in range(ranks):
        key = f"outputs/val/epoch-00000/rank-{rank:05d}.csv"
        path = root / key
        with path.open("w") as fh:
            fh.write("sample,target,prediction\n")
            fh.writelines(
                f"{rank * rows + i},{i * 0.001:.6f},{i * 0.0011:.6f}\n" for i in range(rows)
            )
        members.append(
            {
                "key": key,
                "rank": rank,
                "rows": rows,
                "size": path.stat().st_size,
                "sha256": sha256_file(path),
            }
        )
    (directory / "MANIFEST.json").write_text(
        json.dumps(
            {"split": "val", "epoch": 0, "worldSize": ranks, "attempt": 1, "members": members}
        )
    )


def measure(code: str, root: Path, out: Path) -> tuple[float, float, str]:
    out.mkdir()
    probe = code + "\nimport resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", probe, str(root), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    rows, peak_kib = result.stdout.split()
    return elapsed, int(peak_kib) / 1024, rows


def main() -> None:
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        make(root, ranks, rows)
        ours = measure(OURS, root, Path(tmp) / "ours")
        base = measure(PANDAS, root, Path(tmp) / "pandas")
    assert ours[2] == base[2] == str(ranks * rows), (ours, base)
    print(f"{ranks} ranks x {rows} rows = {ranks * rows:,} rows (verified sha256 on our side)")
    print(f"{'':22} {'time s':>8} {'peak MiB':>9}")
    print(f"{'kctl-train aggregate':22} {ours[0]:8.1f} {ours[1]:9.0f}")
    print(f"{'pandas read+concat':22} {base[0]:8.1f} {base[1]:9.0f}")
    print(
        f"time ratio ours/pandas {ours[0] / base[0]:.2f}x, "
        f"memory ratio ours/pandas {ours[1] / base[1]:.2f}x"
    )


if __name__ == "__main__":
    main()
