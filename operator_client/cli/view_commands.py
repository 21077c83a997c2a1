"""Commands that look at jobs: status, goodput, list, logs."""

from __future__ import annotations

import argparse
import json

from ..client.store_words import store_words_within
from ..controlplane import lifecycle as lc
from ..errors import EXIT_FAILED, EXIT_OK
from . import console, output
from .clients import backend_flag, client_for

STATUS_WAIT = 5.0  # seconds status waits for the store's goodput events


def status(args: argparse.Namespace) -> int:
    """`kctl-train status`: one job's replicas and conditions (no NAME: every job).
    Exit 1 when the job's state cannot be known."""
    if args.name is None:
        return list_cmd(args)
    handle = client_for(args).job(args.name)
    view = handle.found or handle.status()
    if args.output != "text":
        output.objects(view.raw, args.output)
        return EXIT_OK
    output.job_detail(view)
    for line in store_words_within(handle, STATUS_WAIT, view).lines():
        hint = f"  (kctl-train goodput {args.name}{backend_flag(args)}: the account)"
        print(line + (hint if line.startswith("goodput") else ""))
    return EXIT_FAILED if view.state == lc.UNKNOWN else EXIT_OK


def goodput(args: argparse.Namespace) -> int:
    """`kctl-train goodput`: where the job's rank-seconds went so far, from the events its
    ranks wrote to the run store (the same account as report's). Exit 1 when there is
    nothing to account yet."""
    found = client_for(args).job(args.name).goodput(endpoint=args.endpoint)
    if found is None:
        console.info(f"{args.name}: no goodput events in its store yet (has a rank started?)")
        return EXIT_FAILED
    if args.output == "json":
        print(json.dumps(found.to_json(), indent=2, sort_keys=True))
    else:
        from ..collect.report import goodput_table

        print("\n".join(goodput_table(found.to_json())))
    return EXIT_OK


def list_cmd(args: argparse.Namespace) -> int:
    """`kctl-train list`: a table of jobs, of one namespace or all."""
    views = client_for(args).list()
    if args.output != "text":
        output.objects([v.raw for v in views], args.output)
    else:
        output.job_table(views)
    return EXIT_OK


def logs(args: argparse.Namespace) -> int:
    """`kctl-train logs`: every replica's log with a [replica] prefix (-f: follow)."""
    handle = client_for(args).job(args.name)
    lines = handle.logs(follow=args.follow, replica=args.replica, previous=args.previous)
    replicas = (handle.found or handle.status()).replicas
    prefix = args.replica in (None, "all") and len(replicas) > 1
    for line in lines:
        print(f"[{line.tag}] {line.text}" if prefix else line.text, flush=True)
    return EXIT_OK
