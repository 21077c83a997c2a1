"""`kctl-train`: argument parsing and dispatch. Handlers live in the command modules.

Exit codes: errors.py (0 success, 1 failed, 2 bad input, 130 Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import EXIT_INTERRUPTED, EXIT_OK
from ..version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar: each command module registers its own subcommands
    (handlers import what they need when they run: --help and --version stay quick)."""
    from . import build_commands, job_commands, spec_commands, view_commands

    parser = argparse.ArgumentParser(
        prog="kctl-train",
        description="From one job.yaml to a Kubeflow PyTorchJob and finished checkpoints.",
    )
    parser.add_argument("--version", action="version", version=f"kctl-train {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (spec_commands, job_commands, view_commands, build_commands):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kctl-train` console script."""
    args = build_parser().parse_args(argv)
    from ..errors import KctlTrainError
    from . import console, flags

    try:
        flags.settle(args)
        code: int = args.handler(args)
    except KctlTrainError as exc:
        issues = getattr(exc, "issues", None)  # a SpecError: one line per problem
        if issues is not None:
            console.report(issues)
        else:
            console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `kctl-train render job.yaml | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
