"""`kctl-train build`, and the build step of `apply --build`: the user's code as an image
layer, pushed and pinned (the work is Client.build; this prints)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..client import Client
from ..errors import EXIT_OK
from . import console
from .progress import StatusLine

if TYPE_CHECKING:
    from ..client.jobs import JobInput
    from ..image import BuiltImage


def run_build(
    client: Client, args: argparse.Namespace, directory: str, job: JobInput | None
) -> BuiltImage:
    """Client.build with the flags, its steps shown as they happen."""
    status = StatusLine()
    try:
        return client.build(
            directory,
            job=job,
            base=args.base,
            repository=args.repo,
            builder=args.builder,
            registry_auth=args.registry_auth,
            max_bytes=args.max_size,
            allow_secrets=tuple(args.allow_secret),
            say=status.print,
            line=lambda text: status.update(f"  {text[:160]}"),
        )
    finally:
        status.stop()


def build(args: argparse.Namespace) -> int:
    """`kctl-train build [DIR]`: print the reference a job should run."""
    built = run_build(Client("local"), args, args.directory, args.file)
    if args.output == "json":
        print(json.dumps(built.to_json(), indent=2))
    else:
        print(built.reference)
    if not built.pushed and built.digest is None:
        console.info("(on this machine only: give --repo to push it where a cluster can pull it)")
    return EXIT_OK
