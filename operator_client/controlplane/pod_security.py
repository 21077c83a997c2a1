"""Pod Security admission as the API server's PodSecurity plugin applies it to a namespace
labelled `pod-security.kubernetes.io/enforce: <level>` at version `latest`: the checks of
k8s.io/pod-security-admission/policy (check_*.go), their order (baseline check IDs
sorted, then restricted ones; a restricted check replaces the baseline one it overrides,
registry.go) and their wording (checks.go ForbiddenDetail, admission.go "violates
PodSecurity %q: %s"). Pure: a pod's metadata and spec in, the refusal out.

Also the kubelet's own refusal of a container that asks for non-root and names uid 0
(kuberuntime verifyRunAsNonRoot: CreateContainerConfigError).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..kubeflow.security import containers, security_context

if TYPE_CHECKING:
    from .workload import Workload

BASELINE, RESTRICTED = "baseline", "restricted"
LEVELS = (BASELINE, RESTRICTED)

Pod = Mapping[str, Any]  # a pod spec
Meta = Mapping[str, Any]  # the pod's metadata
Result = tuple[str, str] | None  # (forbidden reason, detail); None: allowed

# check_capabilities_baseline.go capabilities_allowed_1_0
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})  # fmt: skip
# check_sysctls.go sysctlsAllowedV1Dot37 (the newest set)
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
})  # fmt: skip
# check_seLinuxOptions.go selinuxAllowedTypes1_31
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})  # fmt: skip
# check_restrictedVolumes.go: the volume sources restricted allows.
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
    "persistentVolumeClaim", "projected", "secret",
})  # fmt: skip
_APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _quote(items: Iterable[str]) -> str:
    return ", ".join(f'"{item}"' for item in items)


def _named(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_quote(names)}"


def _setters(pod: bool, names: list[str]) -> list[str]:
    return (["pod"] if pod else []) + ([_named(names)] if names else [])


def _user_namespace(spec: Pod) -> bool:
    """helpers.go relaxPolicyForUserNamespacePod: hostUsers: false relaxes some checks."""
    return spec.get("hostUsers") is False


def app_armor(meta: Meta, spec: Pod) -> Result:
    def bad(profile: Mapping[str, Any] | None) -> str | None:
        kind = (profile or {}).get("type")
        return None if profile is None or kind in ("RuntimeDefault", "Localhost") else str(kind)

    values: set[str] = set()
    pod_bad = bad(security_context(spec).get("appArmorProfile"))
    if pod_bad is not None:
        values.add(pod_bad)
    names = []
    for c in containers(spec):
        value = bad(security_context(c).get("appArmorProfile"))
        if value is not None:
            names.append(c["name"])
            values.add(value)
    listed = sorted(values)
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(_APPARMOR_PREFIX)
        and v
        and v != "runtime/default"
        and not str(v).startswith("localhost/")
    )
    setters = _setters(pod_bad is not None, names)
    if annotations:
        listed += annotations
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    return (
        _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
        f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(listed)}",
    )


def capabilities_baseline(meta: Meta, spec: Pod) -> Result:
    names, added = [], set()
    for c in containers(spec):
        extra = {str(a) for a in (security_context(c).get("capabilities") or {}).get("add") or []}
        extra -= BASELINE_CAPABILITIES
        if extra:
            names.append(c["name"])
            added |= extra
    if not names:
        return None
    detail = f"{_named(names)} must not include {_quote(sorted(added))} in "
    return "non-default capabilities", detail + "securityContext.capabilities.add"


def host_namespaces(meta: Meta, spec: Pod) -> Result:
    used = [f"{flag}=true" for flag in ("hostNetwork", "hostPID", "hostIPC") if spec.get(flag)]
    return ("host namespaces", ", ".join(used)) if used else None


def host_path_volumes(meta: Meta, spec: Pod) -> Result:
    names = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    if not names:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_quote(names)}"


def host_ports(meta: Meta, spec: Pod) -> Result:
    names, ports = [], set()
    for c in containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            names.append(c["name"])
            ports |= used
    if not names:
        return None
    return "hostPort", (
        f"{_named(names)} {_plural('uses', 'use', len(names))} "
        f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )


def host_probes(meta: Meta, spec: Pod) -> Result:
    names, hosts = set(), set()
    for c in containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        for handler in filter(None, handlers):
            for action in ("httpGet", "tcpSocket"):
                host = (handler.get(action) or {}).get("host")
                if host:
                    names.add(c["name"])
                    hosts.add(str(host))
    if not names:
        return None
    return "probe or lifecycle host", (
        f"{_named(sorted(names))} {_plural('uses', 'use', len(names))} "
        f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{_quote(sorted(hosts))}"
    )


def privileged(meta: Meta, spec: Pod) -> Result:
    names = [c["name"] for c in containers(spec) if security_context(c).get("privileged") is True]
    if not names:
        return None
    return "privileged", f"{_named(names)} must not set securityContext.privileged=true"


def _proc_mount(spec: Pod) -> Result:
    names, kinds = [], set()
    for c in containers(spec):
        kind = security_context(c).get("procMount")
        if kind is not None and kind != "Default":
            names.append(c["name"])
            kinds.add(str(kind))
    if not names:
        return None
    return "procMount", (
        f"{_named(names)} must not set securityContext.procMount to {_quote(sorted(kinds))}"
    )


def proc_mount_baseline(meta: Meta, spec: Pod) -> Result:
    return None if _user_namespace(spec) else _proc_mount(spec)


def proc_mount_restricted(meta: Meta, spec: Pod) -> Result:
    return _proc_mount(spec)


def se_linux(meta: Meta, spec: Pod) -> Result:
    types: set[str] = set()
    flags = {"user": False, "role": False}

    def bad(options: Mapping[str, Any] | None) -> bool:
        if options is None:
            return False
        wrong = False
        if str(options.get("type") or "") not in SELINUX_TYPES:
            types.add(str(options.get("type")))
            wrong = True
        for key in flags:
            if options.get(key):
                flags[key] = wrong = True
        return wrong

    pod_bad = bad(security_context(spec).get("seLinuxOptions"))
    names = [c["name"] for c in containers(spec) if bad(security_context(c).get("seLinuxOptions"))]
    setters = _setters(pod_bad, names)
    if not setters:
        return None
    data = [f"{_plural('type', 'types', len(types))} {_quote(sorted(types))}"] if types else []
    data += [f"{key} may not be set" for key, set_ in flags.items() if set_]
    detail = f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: "
    return "seLinuxOptions", detail + "; ".join(data)


def _seccomp(spec: Pod, *, required: bool) -> Result:
    values: set[str] = set()

    def kind_of(item: Mapping[str, Any]) -> str | None:
        profile = security_context(item).get("seccompProfile")
        return None if profile is None else str(profile.get("type"))

    pod_kind = kind_of(spec)
    pod_bad = pod_kind is not None and pod_kind not in ("RuntimeDefault", "Localhost")
    if pod_bad:
        values.add(str(pod_kind))
    explicit, implicit = [], []
    for c in containers(spec):
        kind = kind_of(c)
        if kind is None:
            if pod_kind is None or pod_bad:
                implicit.append(c["name"])
        elif kind not in ("RuntimeDefault", "Localhost"):
            explicit.append(c["name"])
            values.add(kind)
    setters = _setters(pod_bad, explicit)
    if setters:
        return "seccompProfile", (
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{_quote(sorted(values))}"
        )
    if required and implicit:
        return "seccompProfile", (
            f"pod or {_named(implicit)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"'
        )
    return None


def seccomp_baseline(meta: Meta, spec: Pod) -> Result:
    return _seccomp(spec, required=False)


def seccomp_restricted(meta: Meta, spec: Pod) -> Result:
    return None if _windows(spec) else _seccomp(spec, required=True)


def sysctls(meta: Meta, spec: Pod) -> Result:
    names = [
        str(s.get("name"))
        for s in security_context(spec).get("sysctls") or []
        if s.get("name") not in SAFE_SYSCTLS
    ]
    return ("forbidden sysctls", ", ".join(names)) if names else None


def windows_host_process(meta: Meta, spec: Pod) -> Result:
    def on(item: Mapping[str, Any]) -> bool:
        return (security_context(item).get("windowsOptions") or {}).get("hostProcess") is True

    setters = _setters(on(spec), [c["name"] for c in containers(spec) if on(c)])
    if not setters:
        return None
    detail = f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    return "hostProcess", detail


def _windows(spec: Pod) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def allow_privilege_escalation(meta: Meta, spec: Pod) -> Result:
    if _windows(spec):
        return None
    names = [
        c["name"]
        for c in containers(spec)
        if security_context(c).get("allowPrivilegeEscalation") is not False
    ]
    if not names:
        return None
    detail = f"{_named(names)} must set securityContext.allowPrivilegeEscalation=false"
    return "allowPrivilegeEscalation != false", detail


def capabilities_restricted(meta: Meta, spec: Pod) -> Result:
    if _windows(spec):
        return None
    missing, adding, added = [], [], set()
    for c in containers(spec):
        caps = security_context(c).get("capabilities")
        if caps is None or "ALL" not in (caps.get("drop") or []):
            missing.append(c["name"])
        extra = {str(a) for a in (caps or {}).get("add") or []} - {"NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            added |= extra
    details = []
    if missing:
        details.append(f'{_named(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_named(adding)} must not include {_quote(sorted(added))} in "
            "securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(meta: Meta, spec: Pod) -> Result:
    names, kinds = [], set()
    for volume in spec.get("volumes") or []:
        sources = set(volume) - {"name"}
        if sources & RESTRICTED_VOLUMES:
            continue
        names.append(volume.get("name", ""))
        kinds.add(next(iter(sorted(sources)), "unknown"))
    if not names:
        return None
    return "restricted volume types", (
        f"{_plural('volume', 'volumes', len(names))} {_quote(names)} "
        f"{_plural('uses', 'use', len(names))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} "
        f"{_quote(sorted(kinds))}"
    )


def run_as_non_root(meta: Meta, spec: Pod) -> Result:
    if _user_namespace(spec):
        return None
    pod_value = security_context(spec).get("runAsNonRoot")
    explicit = [
        c["name"] for c in containers(spec) if security_context(c).get("runAsNonRoot") is False
    ]
    implicit = [
        c["name"]
        for c in containers(spec)
        if security_context(c).get("runAsNonRoot") is None and pod_value is not True
    ]
    setters = _setters(pod_value is False, explicit)
    if setters:
        detail = f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
        return "runAsNonRoot != true", detail
    if implicit:
        detail = f"pod or {_named(implicit)} must set securityContext.runAsNonRoot=true"
        return "runAsNonRoot != true", detail
    return None


def run_as_user(meta: Meta, spec: Pod) -> Result:
    if _user_namespace(spec):
        return None
    names = [c["name"] for c in containers(spec) if security_context(c).get("runAsUser") == 0]
    setters = _setters(security_context(spec).get("runAsUser") == 0, names)
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


Check = Callable[[Meta, Pod], Result]
# registry.go's order: baseline IDs sorted, then restricted IDs sorted; each restricted
# check names the baseline IDs it overrides.
_BASELINE: list[tuple[str, Check]] = [
    ("appArmorProfile", app_armor),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("hostProbesAndHostLifecycle", host_probes),
    ("privileged", privileged),
    ("procMount", proc_mount_baseline),
    ("seLinuxOptions", se_linux),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
]
_RESTRICTED: list[tuple[str, Check, tuple[str, ...]]] = [
    ("allowPrivilegeEscalation", allow_privilege_escalation, ()),
    ("capabilities_restricted", capabilities_restricted, ("capabilities_baseline",)),
    ("procMount_restricted", proc_mount_restricted, ("procMount",)),
    ("restrictedVolumes", restricted_volumes, ("hostPathVolumes",)),
    ("runAsNonRoot", run_as_non_root, ()),
    ("runAsUser", run_as_user, ()),
    ("seccompProfile_restricted", seccomp_restricted, ("seccompProfile_baseline",)),
]


def checks(level: str) -> list[Check]:
    """The checks of `level` at version latest, in the API server's order."""
    if level not in LEVELS:
        raise ValueError(f"pod security level {level!r}: use one of {', '.join(LEVELS)}")
    if level == BASELINE:
        return [check for _, check in _BASELINE]
    overridden = {o for _, _, overrides in _RESTRICTED for o in overrides}
    return [c for i, c in _BASELINE if i not in overridden] + [c for _, c, _ in _RESTRICTED]


def violations(meta: Meta, spec: Pod, level: str) -> list[tuple[str, str]]:
    """Every (reason, detail) the pod breaks at `level` (empty: admitted)."""
    return [found for check in checks(level) if (found := check(meta, spec)) is not None]


def refusal(pod: str, meta: Meta, spec: Pod, level: str) -> str | None:
    """The API server's refusal of creating this pod in a namespace enforcing `level`
    (None: admitted)."""
    found = violations(meta, spec, level)
    if not found:
        return None
    detail = ", ".join(f"{reason} ({why})" if why else reason for reason, why in found)
    return f'pods "{pod}" is forbidden: violates PodSecurity "{level}:latest": {detail}'


def group_refusals(workload: Workload, level: str) -> dict[str, str]:
    """The API server's refusal of each pod group it would refuse at `level`, by replica
    type (every pod of a group has the same template: its first pod names it)."""
    found = {}
    for group in workload.groups:
        template = group.template
        pod = workload.pod_name(group.type, 0)
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        if (refused := refusal(pod, meta, spec, level)) is not None:
            found[group.type] = refused
    return found


def kubelet_refusal(pod: str, namespace: str, spec: Pod, default_uid: int) -> str | None:
    """CreateContainerConfigError's message for a container that must run as non-root but
    would run as uid 0 (`default_uid`: the image's user when no runAsUser is set)."""
    for c in containers(spec):
        non_root = security_context(c).get(
            "runAsNonRoot", security_context(spec).get("runAsNonRoot")
        )
        uid = security_context(c).get("runAsUser", security_context(spec).get("runAsUser"))
        if non_root is not True:
            continue
        if uid == 0:
            return (
                f'container\'s runAsUser breaks non-root policy (pod: "{pod}_{namespace}", '
                f"container: {c['name']})"
            )
        if uid is None and default_uid == 0:
            return (
                f"container has runAsNonRoot and image will run as root (pod: "
                f'"{pod}_{namespace}", container: {c["name"]})'
            )
    return None
