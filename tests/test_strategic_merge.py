"""Strategic merge patch as Trainer applies runtimePatches and `trainer` to a runtime
(controlplane/strategic_merge.py), one row per rule."""

from __future__ import annotations

from typing import Any

import pytest

from operator_client.controlplane.strategic_merge import merge

BASE: dict[str, Any] = {
    "restartPolicy": "OnFailure",
    "nodeSelector": {"pool": "a"},
    "tolerations": [{"key": "x"}],
    "volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "1Gi"}}, {"name": "tmp"}],
    "containers": [
        {
            "name": "node",
            "image": "old",
            "command": ["a", "b"],
            "env": [{"name": "A", "value": "1"}],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        }
    ],
}


@pytest.mark.parametrize(
    ("patch", "path", "expected"),
    [
        # maps merge key by key
        ({"nodeSelector": {"gpu": "h100"}}, ("nodeSelector",), {"pool": "a", "gpu": "h100"}),
        # a list without a merge key is replaced
        ({"tolerations": [{"key": "y"}]}, ("tolerations",), [{"key": "y"}]),
        # a list with one merges item by item on its key
        (
            {"volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "256Mi"}}]},
            ("volumes",),
            [{"name": "dshm", "emptyDir": {"sizeLimit": "256Mi"}}, {"name": "tmp"}],
        ),
        (
            {"containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]}]},
            ("containers", 0, "env"),
            [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        ),
        (
            {"containers": [{"name": "node", "env": [{"name": "A", "value": "9"}]}]},
            ("containers", 0, "env"),
            [{"name": "A", "value": "9"}],
        ),
        (
            {"containers": [{"name": "node", "command": ["c"]}]},
            ("containers", 0, "command"),
            ["c"],
        ),
        (
            {"containers": [{"name": "node", "resources": {"requests": {"cpu": "4"}}}]},
            ("containers", 0, "resources"),
            {"requests": {"cpu": "4", "memory": "1Gi"}},
        ),
        (
            {"containers": [{"name": "node", "volumeMounts": [{"mountPath": "/dev/shm"}]}]},
            ("containers", 0, "volumeMounts"),
            [{"name": "tmp", "mountPath": "/tmp"}, {"mountPath": "/dev/shm"}],
        ),
        # a null is "not set" (the API server drops it): nothing changes
        ({"nodeSelector": None}, ("nodeSelector",), {"pool": "a"}),
        (
            {"nodeSelector": {"pool": None, "gpu": "h100"}},
            ("nodeSelector",),
            {"pool": "a", "gpu": "h100"},
        ),
        ({"schedulingGates": None}, ("schedulingGates",), None),
        # an env entry replaced by name is replaced whole: never a value and a valueFrom
        (
            {
                "containers": [
                    {
                        "name": "node",
                        "env": [
                            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                        ],
                    }
                ]
            },
            ("containers", 0, "env"),
            [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ),
        # ports merge by containerPort, schedulingGates by name
        (
            {"containers": [{"name": "node", "ports": [{"containerPort": 29500}]}]},
            ("containers", 0, "ports"),
            [{"containerPort": 29500}],
        ),
        (
            {"schedulingGates": [{"name": "a"}, {"name": "b"}]},
            ("schedulingGates",),
            [{"name": "a"}, {"name": "b"}],
        ),
        # a new key is added
        ({"subdomain": "j"}, ("subdomain",), "j"),
    ],
)
def test_merge(patch: dict[str, Any], path: tuple[Any, ...], expected: Any) -> None:
    out: Any = merge(BASE, patch)
    for key in path:
        if out is None:
            break
        out = out.get(key) if isinstance(out, dict) else out[key]
    assert out == expected
    assert BASE["containers"][0]["image"] == "old"  # the base is never changed
