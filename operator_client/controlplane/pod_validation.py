"""What the API server refuses in a pod spec that the controllers pass on as written, in its
words (k8s.io/kubernetes pkg/apis/core/validation/validation.go: ValidateResourceRequirements,
validateEnvVarValueFrom, validateContainers). On a cluster the controller that creates the
pod or Job reports it in an event and the job never runs as written; a local run refuses it
at once with the same words (tests/fidelity compares them with the recorded events).

Only rules the fidelity corpus has met are here; the shape checker (shapes.py) refuses what
is not even of the right type. Quantities are compared after the API server's default (a
limit without a request is the request too).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ..spec.quantities import parse_quantity

# Native resources without a domain that may be requested below their limit (v1helper
# IsOvercommitAllowed: native, not hugepages).
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


# Volume sources in the order validateVolumeSource checks them: a second one present is
# refused on its own field.
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gitRepo", "gcePersistentDisk", "awsElasticBlockStore", "secret",
    "nfs", "iscsi", "glusterfs", "flocker", "persistentVolumeClaim", "rbd", "quobyte", "cinder",
    "cephfs", "downwardAPI", "fc", "azureFile", "vsphereVolume", "photonPersistentDisk",
    "portworxVolume", "azureDisk", "projected", "scaleIO", "configMap", "csi", "ephemeral",
    "image",
)  # fmt: skip


def pod_spec_errors(spec: Mapping[str, Any], at: str = "spec") -> list[str]:
    """Each refusal of a pod spec's volumes, containers and init containers, with its
    field path under `at` (a Job's pod template is under `spec.template.spec`)."""
    errors = []
    volumes = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        given = [k for k in VOLUME_SOURCES if volume.get(k) is not None]
        if len(given) > 1:  # a patch merged a second source into a volume of that name
            errors.append(
                f"{at}.volumes[{i}].{given[1]}: Forbidden: may not specify more than 1 volume type"
            )
        else:
            volumes.add(volume.get("name"))
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            errors += container_errors(container, f"{at}.{field}[{i}]", volumes)
    return errors


def container_errors(container: Mapping[str, Any], at: str, volumes: set[Any]) -> list[str]:
    """A container's refusals: no image, a mount of no (valid) volume of the pod, an env
    entry with both value and valueFrom, requests above limits, an extended resource
    without a limit or with a request that is not its limit."""
    errors = []
    if not container.get("image"):
        errors.append(f"{at}.image: Required value")
    for k, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            errors.append(f'{at}.volumeMounts[{k}].name: Not found: "{mount.get("name")}"')
    for n, item in enumerate(container.get("env") or []):
        if item.get("value") and item.get("valueFrom") is not None:
            errors.append(
                f'{at}.env[{n}].valueFrom: Invalid value: "": may not be specified when '
                "`value` is not empty"
            )
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = {**limits, **(resources.get("requests") or {})}
    for name, request in requests.items():
        limit = limits.get(name)
        if _overcommittable(str(name)):
            if limit is not None and _value(request) > _value(limit):
                errors.append(
                    f'{at}.resources.requests: Invalid value: "{request}": must be less than '
                    f"or equal to {name} limit of {limit}"
                )
        elif limit is None:
            errors.append(
                f"{at}.resources.limits: Required value: Limit must be set for non "
                "overcommitable resources"
            )
        elif _value(request) != _value(limit):
            errors.append(
                f'{at}.resources.requests: Invalid value: "{request}": must be equal to '
                f"{name} limit of {limit}"
            )
    return errors


def _overcommittable(name: str) -> bool:
    return name in OVERCOMMITTABLE


def _value(quantity: Any) -> Decimal:
    # shapes.py has checked the syntax.
    return parse_quantity(str(quantity))
