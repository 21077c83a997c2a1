"""`kctl-train validate` on hostile job files of up to 1 MiB: every one must be refused
(exit 2, a message, no traceback) in under a second. Prints each file's size, exit code,
wall time and the first line of the message, with `python3 -c pass` measured in the same
run for scale. Asserts nothing about time; exits 1 if any file was not refused cleanly.
Usage: python bench/hostile_input.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

KCTL = str(Path(sys.executable).parent / "kctl-train")
HEAD = "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: h}\nspec:\n"
HEAD += "  image: local\n  command: [python, train.py]\n"
MIB = 1 << 20


def files() -> dict[str, str]:
    """1 MiB of each kind, and the same just under the 256 KiB file limit (where parsing
    and validation really run)."""
    out: dict[str, str] = {"1 MiB comment": HEAD + "# " + "x" * MIB + "\n"}
    for label, size in (("1 MiB", MIB), ("250 KB", 250_000)):
        env_count = size // 34
        many_env = "".join(f"    V{i}: '{'x' * 20}'\n" for i in range(env_count))
        numbers = ", ".join(str(i) for i in range(size // 7))
        digits = size // 2 - 100
        out |= {
            f"{label}: {env_count} env vars": HEAD + "  env:\n" + many_env,
            f"{label}: numbers in modelArgs": HEAD.replace("  command: [python, train.py]\n", "")
            + f"  train: {{model: 'a.b:C', modelArgs: {{xs: [{numbers}, .nan]}}}}\n",
            f"{label}: label value": HEAD.replace(
                "{name: h}", "{name: h, labels: {a: " + "x" * (size - 200) + "}}"
            ),
            f"{label}: huge numbers": HEAD
            + f"  nodes: 1{'9' * digits}\n  fault: {{activeDeadline: {'9' * digits}d}}\n",
            f"{label}: NUL bytes": HEAD + '  env: {A: "' + "\\0" * (size // 2 - 100) + '"}\n',
        }
    nested = "  env: &a {A: x}\n" + "".join(
        f"  e{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 9)}]\n" for i in range(7)
    )
    wide = ", ".join(["*s"] * 70)
    return out | {
        "alias bomb (9^7 nodes)": HEAD + nested,
        "alias expansion (4.2 MB of text)": HEAD.replace("  command: [python, train.py]\n", "")
        + f"  command: [&s '{'x' * 60_000}', {wide}]\n",
    }


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return time.perf_counter() - start, out


def main() -> int:
    baseline, _ = timed([sys.executable, "-c", "pass"])
    print(f"python3 -c pass: {baseline:.3f}s")
    print(f"{'file':36} {'bytes':>9} {'exit':>4} {'seconds':>7}  message")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files().items():
            path = Path(tmp) / "job.yaml"
            path.write_text(text)
            seconds, out = timed([KCTL, "validate", str(path)])
            first = (out.stderr.strip().splitlines() or [""])[0]
            first = first.replace(str(path), "job.yaml")[:90]
            clean = out.returncode == 2 and "Traceback" not in out.stderr
            bad += not clean
            print(f"{name:36} {len(text.encode()):>9} {out.returncode:>4} {seconds:>7.3f}  {first}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
