"""Pod Security Standards "restricted" (with "baseline" under it) as a checker over a pod
spec, following the rules of kubernetes.io/docs/concepts/security/pod-security-standards
(docs/RUNTIME_NOTES.md, "Pod security"). A test helper: it returns every violation."""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
ALLOWED_ADD = {"NET_BIND_SERVICE"}
BASELINE_ADD = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def violations(pod: dict[str, Any]) -> list[str]:
    """Every rule of "restricted" the pod spec breaks, one line each."""
    out = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(f"{flag} is set")
    pod_sc = pod.get("securityContext", {})
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {volume['name']}: {sorted(kinds)} not allowed")
    containers = [*pod.get("initContainers", []), *pod.get("containers", [])]
    for c in containers:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runs as uid 0")
        seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: capabilities do not drop ALL")
        added = set(caps.get("add", []))
        if added - ALLOWED_ADD:
            level = "restricted" if added <= BASELINE_ADD else "baseline"
            out.append(f"{name}: adds capabilities {sorted(added - ALLOWED_ADD)} ({level})")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{name}: hostPort {port['hostPort']}")
    return out
