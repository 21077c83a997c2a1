"""`kctl-train`: parse the command line (grammar.py), import the command's handler and
run it. Exit codes: errors.py (0 success, 1 failed, 2 bad input, 130 Ctrl-C)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from ..errors import EXIT_INTERRUPTED, EXIT_OK, KctlTrainError
from . import console, flags
from .grammar import parser


def handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function that runs the parsed command: its module is imported only now."""
    module, function = args.handler.rsplit(".", 1)
    run: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f".{module}", __package__), function
    )
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kctl-train` console script."""
    args = parser().parse_args(argv)
    try:
        flags.settle(args)
        code: int = handler(args)(args)
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
