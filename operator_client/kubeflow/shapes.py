"""The CRDs' types of the fields the rules and the pods read, for objects that reach us
without an API server's validation (files, hand-written TrainJobs and runtimes): each field
of its type, required names, parsable quantities, reported in the API server's words. The
rules and pod builders then assume the shape (tests/fidelity/test_readers_fuzz.py).
"""

from __future__ import annotations

from typing import Any

from ..spec.quantities import parse_quantity

Shape = dict[str, Any]  # {"type": ..., "fields": {...}, "items": Shape, "required": [...]}

QUANTITY_WORDS = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_PY = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "quantity": (str, int, float),
}


def _obj(fields: dict[str, Any] | None = None, required: tuple[str, ...] = ()) -> Shape:
    return {"type": "object", "fields": fields or {}, "required": required}


def _arr(items: Shape) -> Shape:
    return {"type": "array", "items": items}


STRING, INTEGER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
QUANTITIES = {"type": "object", "values": {"type": "quantity"}}
RESOURCES = _obj({"limits": QUANTITIES, "requests": QUANTITIES})
ENV = _arr(_obj({"name": STRING, "value": STRING, "valueFrom": _obj()}, required=("name",)))
CONTAINER = _obj(
    {
        "name": STRING,
        "image": STRING,
        "command": _arr(STRING),
        "args": _arr(STRING),
        "env": ENV,
        "ports": _arr(_obj({"containerPort": INTEGER, "name": STRING})),
        "resources": RESOURCES,
        "volumeMounts": _arr(_obj({"name": STRING, "mountPath": STRING})),
    },
    required=("name",),
)
POD_TEMPLATE = _obj(
    {
        "metadata": _obj({"labels": _obj(), "annotations": _obj()}),
        "spec": _obj(
            {
                "containers": _arr(CONTAINER),
                "initContainers": _arr(CONTAINER),
                "volumes": _arr(_obj({"name": STRING})),
                "restartPolicy": STRING,
            }
        ),
    }
)
TRAINJOB_SPEC = _obj(
    {
        "runtimeRef": _obj({"name": STRING, "kind": STRING, "apiGroup": STRING}, ("name",)),
        "suspend": BOOLEAN,
        "managedBy": STRING,
        "runtimePatches": _arr(_obj({"manager": STRING, "trainingRuntimeSpec": _obj()})),
        "trainer": _obj(
            {
                "image": STRING,
                "command": _arr(STRING),
                "args": _arr(STRING),
                "env": ENV,
                "numNodes": INTEGER,
                "numProcPerNode": INTEGER,
                "resourcesPerNode": RESOURCES,
            }
        ),
        "initializer": _obj(),
    },
    required=("runtimeRef",),
)
RUNTIME_SPEC = _obj(
    {
        "mlPolicy": _obj({"numNodes": INTEGER, "torch": _obj(), "mpi": _obj()}),
        "template": _obj(
            {
                "spec": _obj(
                    {
                        "network": _obj({"subdomain": STRING, "enableDNSHostnames": BOOLEAN}),
                        "volumeClaimPolicies": _arr(_obj()),
                        "replicatedJobs": _arr(
                            _obj(
                                {
                                    "name": STRING,
                                    "replicas": INTEGER,
                                    "dependsOn": _arr(_obj({"name": STRING}, ("name",))),
                                    "template": _obj(
                                        {
                                            "metadata": _obj({"labels": _obj()}),
                                            "spec": _obj(
                                                {
                                                    "parallelism": INTEGER,
                                                    "completions": INTEGER,
                                                    "backoffLimit": INTEGER,
                                                    "template": POD_TEMPLATE,
                                                }
                                            ),
                                        }
                                    ),
                                },
                                ("name",),
                            )
                        ),
                    },
                    ("replicatedJobs",),
                )
            },
            ("spec",),
        ),
    },
    required=("template",),
)


def _json_type(value: Any) -> str:
    """The OpenAPI type name of a JSON value, as the API server's messages give it."""
    if isinstance(value, bool):
        return "boolean"
    kinds = {str: "string", int: "integer", float: "number", list: "array", dict: "object"}
    return kinds.get(type(value), "null")


def type_error(path: str, value: Any, want: str) -> str:
    """The API server's words for a field of the wrong OpenAPI type."""
    given = _json_type(value)
    return f'{path}: Invalid value: "{given}": {path} in body must be of type {want}: "{given}"'


def shape_errors(value: Any, shape: Shape, path: str) -> list[str]:
    """Every way `value` breaks `shape` at `path`; [] when it fits."""
    want = shape["type"]
    if want == "quantity":
        return [] if _quantity(value) else [f'{path}: Invalid value: "{value}": {QUANTITY_WORDS}']
    ok = isinstance(value, _PY[want]) and not (want == "integer" and isinstance(value, bool))
    if not ok:
        return [type_error(path, value, want)]
    errors: list[str] = []
    if want == "array":
        for i, item in enumerate(value):
            errors += shape_errors(item, shape["items"], f"{path}[{i}]")
    if want == "object":
        for key in shape.get("required", ()):
            if value.get(key) in (None, ""):
                errors.append(f"{path}.{key}: Required value")
        for key, field in shape.get("fields", {}).items():
            if value.get(key) is not None:
                errors += shape_errors(value[key], field, f"{path}.{key}")
        if "values" in shape:
            for key, item in value.items():
                errors += shape_errors(item, shape["values"], f"{path}.{key}")
    return errors


def _quantity(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    try:
        parse_quantity(str(value))
    except ValueError:
        return False
    return True
