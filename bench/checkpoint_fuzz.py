"""The crash fuzz of the checkpoint save path (issue 31): kills at random instants, biased
to the stages of a save, each followed by a restart whose choice of checkpoint and every
committed checkpoint are checked (tests/crash_fuzz.py says what is killed and checked).

Prints a line per trial, then the kill points covered (kind x point), the work lost per
kill in save intervals, the RNG and read checks, any failure, and last
`N trials, T torn, R resumed from the newest commit`. Exits 1 on any torn checkpoint,
missed resume, RNG or read failure, or sample counted twice in a job's outputs.

Usage: python bench/checkpoint_fuzz.py [--trials N] [--seed S] [--keep DIR] [--kinds K,...]
       [--stores file,s3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import crash_fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="leave the jobs' files here")
    parser.add_argument(
        "--kinds",
        default=",".join(crash_fuzz.KINDS),
        help="the kinds of kill to draw from, comma-separated (default: all)",
    )
    parser.add_argument(
        "--stores",
        default=",".join(crash_fuzz.STORES),
        help="the stores the jobs take turns on, comma-separated (default: file,s3)",
    )
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kctl-fuzz-") as scratch:
        workdir = args.keep or Path(scratch)
        kinds, stores = tuple(args.kinds.split(",")), tuple(args.stores.split(","))
        for flag, chosen, known in (("kinds", kinds, crash_fuzz.KINDS),
                                    ("stores", stores, crash_fuzz.STORES)):  # fmt: skip
            if set(chosen) - set(known):
                parser.error(f"--{flag}: unknown {sorted(set(chosen) - set(known))}; "
                             f"choose from {known}")  # fmt: skip
        try:
            result = crash_fuzz.run(
                args.trials, args.seed, workdir, say=print, kinds=kinds, stores=stores
            )
        except ValueError as exc:  # no kind asked for can be drawn on the stores asked for
            parser.error(str(exc))
    print(f"({time.monotonic() - began:.0f}s, seed {args.seed})")
    print("\n".join(result.lines()))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
