"""Commands that look at and remove jobs: status, list, logs, delete."""

from __future__ import annotations

import argparse

from ..errors import EXIT_FAILED, EXIT_OK, JobNotFound
from ..kubeflow import lifecycle as lc
from ..kubeflow.kinds import kind_of
from . import output
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
        print(f"[{line.replica}] {line.text}" if prefix else line.text, flush=True)
    return EXIT_OK


def delete(args: argparse.Namespace) -> int:
    """`kctl-train delete`: stop a job and remove its record (stored data stays)."""
    client = client_for(args)
    try:
        kind = kind_of(client.get(args.name).kind)
    except JobNotFound:
        kind = kind_of({})  # delete says it is missing, or ignores it
    if client.delete(args.name, wait=args.wait, missing_ok=args.ignore_not_found):
        print(f"{kind.resource}/{args.name} deleted ({client.backend.name})")
    return EXIT_OK
