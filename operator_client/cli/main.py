"""`kctl-train`: argument parsing and dispatch. Handlers live in the command modules.

Exit codes: 0 success, 1 the operation failed, 2 bad input (job file, flags), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar."""
    parser = argparse.ArgumentParser(
        prog="kctl-train",
        description="From one job.yaml to a Kubeflow PyTorchJob and finished checkpoints.",
    )
    parser.add_argument("--version", action="version", version=f"kctl-train {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser(
        "render",
        help="print the PyTorchJob for job files (offline)",
        description="Render job files into PyTorchJob manifests. Pure "
        "and offline: same input, byte-identical output.",
    )
    render.add_argument("files", nargs="+", metavar="FILE", help="job.yaml files ('-' for stdin)")
    render.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="output format (default: yaml)",
    )
    render.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write one <name>.yaml (or .json) per job into DIR instead of printing",
    )
    render.set_defaults(handler="render")

    validate = sub.add_parser(
        "validate",
        help="check job files and report every problem",
        description="Validate job files: every problem at once, with "
        "file:line:column, and the warnings.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="job.yaml files ('-' for stdin)")
    validate.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text lines on stderr, or a JSON report on stdout",
    )
    validate.set_defaults(handler="validate")

    schema = sub.add_parser(
        "schema",
        help="print the JSON schema of job.yaml",
        description="Print the JSON schema of job.yaml, generated from "
        "the spec model (for yaml-language-server and Helm).",
    )
    schema.set_defaults(handler="schema")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kctl-train` console script."""
    args = build_parser().parse_args(argv)
    # Imported after parsing, so --help and --version need no spec machinery.
    from ..spec import SpecError
    from . import console, spec_commands

    try:
        code: int = getattr(spec_commands, args.handler)(args)
    except SpecError as exc:
        console.report(exc.issues)
        return EXIT_BAD_INPUT
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
