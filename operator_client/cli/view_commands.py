"""Commands that look at and remove jobs: status, list, logs, delete."""

from __future__ import annotations

import argparse

from ..errors import EXIT_FAILED, EXIT_OK, JobNotFound
from ..kubeflow import lifecycle as lc
from ..kubeflow.kinds import kind_of
from . import flags, output
from .job_commands import client_for


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
    return EXIT_FAILED if view.state == lc.UNKNOWN else EXIT_OK


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


def delete(args: argparse.Namespace) -> int:
    """`kctl-train delete`: stop a job and remove its record (stored data stays)."""
    client = client_for(args)
    try:
        kind = kind_of(client.get(args.name).kind)
    except JobNotFound:
        kind = kind_of({})  # delete says it is missing, or ignores it
    if client.delete(args.name, wait=args.wait, missing_ok=args.ignore_not_found):
        print(f"{kind.resource}/{args.name} deleted ({client.info.name})")
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """status, list, logs, delete"""
    cmd = sub.add_parser("status", help="a job's conditions and replicas (no NAME: every job)")
    cmd.add_argument("name", nargs="?", metavar="NAME")
    flags.where(cmd)
    flags.table_output(cmd)
    cmd.set_defaults(handler=status)

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

    cmd = sub.add_parser(
        "delete", help="stop a job and remove its record (stored checkpoints stay)"
    )
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    cmd.add_argument("--ignore-not-found", action="store_true")
    cmd.add_argument(
        "--wait", action="store_true", help="cluster: return once the job and its pods are gone"
    )
    cmd.set_defaults(handler=delete)
