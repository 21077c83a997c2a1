"""A replica's keeper, where replicas run as processes: `python -m
operator_client.backends.local.pods.keeper RECORD -- COMMAND...` starts the replica's
command, passes on the signals the replica is sent, and records its exit status in RECORD
(sandbox/exit_record.py) before it exits with it, as a pod sandbox's shim does. A
supervisor that died and was started again is no replica's parent: it takes the exit from
the record (adoption.py), so it can take running replicas over instead of ending them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..sandbox import exit_record

USAGE = "usage: python -m operator_client.backends.local.pods.keeper RECORD -- COMMAND..."


def keep(record: Path, command: list[str]) -> int:
    """Run `command` (in this process group, with this environment and output) to its
    end; its exit status as the shell gives it, recorded first."""
    try:
        pid = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:  # as a shell says it: 127, the command was not found
        print(f"kctl-train local: cannot start {command[0]}: {exc}", file=sys.stderr)
        code = 127
    else:
        exit_record.forward_signals(pid)
        code = exit_record.code_of(os.waitpid(pid, 0)[1])
    exit_record.write(record, os.getpid(), code)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    return keep(Path(args[0]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
