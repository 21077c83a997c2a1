"""Commands that look at jobs: status, goodput, list, logs."""

from __future__ import annotations

import argparse
import json

from ..controlplane import lifecycle as lc
from ..errors import EXIT_FAILED, EXIT_OK
from . import console, flags, output
from .job_commands import backend_flag, client_for
from .progress import store_lines

STATUS_WAIT = 5.0  # seconds status waits for the store's goodput events


def status(args: argparse.Namespace) -> int:
    """`kctl-train status`: one job's replicas and conditions (no NAME: every job).
    Exit 1 when the job's state cannot be known."""
    if args.name is None:
        return list_cmd(args)
    view = client_for(args).get(args.name)
    if args.output != "text":
        output.objects(view.raw, args.output)
        return EXIT_OK
    output.job_detail(view)
    for line in store_lines(client_for(args).job(args.name), STATUS_WAIT):
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
    prefix = args.replica in (None, "all") and len(handle.status().replicas) > 1
    for line in lines:
        print(f"[{line.tag}] {line.text}" if prefix else line.text, flush=True)
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """status, goodput, list, logs"""
    cmd = sub.add_parser("status", help="a job's conditions and replicas (no NAME: every job)")
    cmd.add_argument("name", nargs="?", metavar="NAME")
    flags.where(cmd)
    flags.table_output(cmd)
    cmd.set_defaults(handler=status)

    cmd = sub.add_parser(
        "goodput",
        help="where a job's rank-seconds went so far: training, start-up, stalls, restarts",
    )
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    flags.output(cmd, ("text", "json"), "a table, or the account as JSON")
    cmd.add_argument(
        "--endpoint",
        help="the S3 endpoint to read the store from here (the pods' may be in-cluster)",
    )
    cmd.set_defaults(handler=goodput)

    cmd = sub.add_parser("list", help="a table of jobs: name, state, nodes, restarts, age")
    flags.where(cmd)
    flags.table_output(cmd)
    cmd.set_defaults(handler=list_cmd)

    cmd = sub.add_parser("logs", help="the replicas' logs, prefixed [master-0], [worker-0]")
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    cmd.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    cmd.add_argument(
        "--replica", metavar="REPLICA", help="master-0, worker-N or all (default: all)"
    )
    cmd.add_argument(
        "--previous", action="store_true", help="the previous container's log (cluster)"
    )
    cmd.set_defaults(handler=logs)
