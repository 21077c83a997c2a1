"""Which pods a local run admits, before anything runs: Pod Security admission as a
namespace enforcing `baseline` (default) or `restricted` applies it (controlplane/pod_security.py),
the kubelet's non-root check, and the fields a pod sandbox cannot honour, each refused by
name rather than silently dropped (docs/LOCAL_PODS.md). Every local pod has a user
namespace of its own (`hostUsers: false` is what it gets, asked or not)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...controlplane import pod_security as pss
from ...controlplane.pod_plan import JobPlan
from ...errors import BadInput
from ...kubeflow.security import containers, security_context
from ..types import Finding

POD_SECURITY_ENV = "KCTL_TRAIN_POD_SECURITY"
# What the user namespaces of most clusters enforce; Kubeflow's stock runtimes pass it.
DEFAULT_LEVEL = pss.BASELINE


def level_of(given: str | None) -> str:
    """The level to enforce: `given`, else $KCTL_TRAIN_POD_SECURITY, else baseline.
    BadInput for any other (`privileged` is never one: a local pod is a boundary)."""
    level = given or os.environ.get(POD_SECURITY_ENV) or DEFAULT_LEVEL
    if level not in pss.LEVELS:
        raise BadInput(
            f"pod security level {level!r}: a local run enforces {' or '.join(pss.LEVELS)} "
            "(never privileged: its pods must not reach this machine)"
        )
    return level


def unhonoured(spec: Mapping[str, Any], main: str = "") -> list[str]:
    """The fields of a pod spec that a pod sandbox cannot do as a node would, by name;
    `main`: the container a local pod runs, when the others must be named too."""
    found = []
    others = [str(c.get("name")) for c in spec.get("containers") or [] if c.get("name") != main]
    if main and others:
        found.append(f"containers {others}: a local pod runs its main container {main!r} only")
    init = [str(c.get("name")) for c in spec.get("initContainers") or []]
    if init:
        found.append(f"initContainers {init}: a local pod runs its main container only")
    pod = security_context(spec)
    if pod.get("supplementalGroups"):
        found.append("securityContext.supplementalGroups: a local pod gets no supplementary group")
    fs_group = pod.get("fsGroup")
    if fs_group is not None and fs_group != pod.get("runAsGroup", pod.get("runAsUser")):
        found.append(
            f"securityContext.fsGroup {fs_group}: a local pod gets no supplementary group and "
            "its volumes are not chowned; use the pod's runAsGroup"
        )
    if pod.get("sysctls"):
        found.append("securityContext.sysctls: a local pod's kernel settings are this machine's")
    for where, context in [("pod", pod)] + [
        (f"container {c.get('name')!r}", security_context(c)) for c in containers(spec)
    ]:
        added = (context.get("capabilities") or {}).get("add") or []
        if added:
            found.append(
                f"{where}: capabilities.add {sorted(map(str, added))}: a local pod runs with "
                "no capabilities"
            )
        if context.get("seLinuxOptions"):
            found.append(f"{where}: seLinuxOptions: this machine applies no SELinux labels")
        if (context.get("appArmorProfile") or {}).get("type") == "Localhost":
            found.append(f"{where}: a Localhost AppArmor profile is a file on the cluster's nodes")
        if (context.get("seccompProfile") or {}).get("type") == "Localhost":
            found.append(f"{where}: a Localhost seccomp profile is a file on the cluster's nodes")
    return found


def admission_findings(plan: JobPlan) -> list[Finding]:
    """An error for each pod group the API server, the kubelet or a pod sandbox would
    refuse (the first pod of each names it), and which level was enforced."""
    findings = [Finding("info", f"pod security: {plan.level} (--pod-security)")]
    for group in plan.groups:
        if group.type in plan.refused:
            findings.append(Finding("error", plan.refused[group.type], bad_input=True))
            continue
        if group.type in plan.kubelet_refused:
            findings.append(Finding("error", plan.kubelet_refused[group.type], bad_input=True))
        pod = next(p for p in plan.pods if p.type == group.type)
        findings += [
            Finding("error", f"{pod.name}: not run locally: {why}", bad_input=True)
            for why in unhonoured(pod.spec, group.container)
        ]
    return findings
