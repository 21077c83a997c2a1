"""The CLI's Client, from kubectl's where-flags: the one place a command picks its
backend (job_commands.py and view_commands.py both use it)."""

from __future__ import annotations

import argparse

from ..client import Client
from . import console


def client_for(args: argparse.Namespace) -> Client:
    """The backend factory of the CLI: --local, else the cluster of --kubeconfig and
    --context (connected on first use)."""
    return Client(
        "local" if args.local else "kubernetes",
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        progress=console.info,
        runtimes=getattr(args, "runtime", None) or (),
        secrets=getattr(args, "secret", None) or (),
        configmaps=getattr(args, "configmap", None) or (),
        pod_security=getattr(args, "pod_security", None),
    )


def backend_flag(args: argparse.Namespace) -> str:
    """The flag that picks the backend again, for the hints printed after a command."""
    return " --local" if args.local else ""
