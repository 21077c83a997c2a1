"""The runtime's console script (runtime/entry.py): it leaves with the runtime's exit code,
without the interpreter's teardown, and nothing it wrote is lost on the way out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LEAVES = """\
import logging, sys
from operator_client.runtime.entry import leave
logging.basicConfig(stream=sys.stderr, format="%(message)s")
logging.getLogger("agent").warning("logged")
print("printed")
sys.stderr.write("unterminated")
leave(3)
"""


def test_leave_flushes_what_was_written_and_exits_with_the_code() -> None:
    # stdout into a pipe is block-buffered (unless PYTHONUNBUFFERED): without the flush,
    # os._exit would drop it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", LEAVES], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 3
    assert done.stdout == "printed\n" and done.stderr == "logged\nunterminated"


def test_the_console_script_exits_with_the_runtimes_code_and_message() -> None:
    script = Path(sys.executable).parent / "kctl-train-runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KCTL_TRAIN", "PET_"))}
    done = subprocess.run([script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("kctl-train-runtime: error: ") and "Traceback" not in done.stderr
