"""`kctl-train schema` comes from the model and agrees with the loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from operator_client.spec import load_job
from operator_client.spec.schema import job_schema

from .conftest import EXAMPLES


def validator() -> Draft202012Validator:
    schema = job_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_satisfy_the_schema(example: Path) -> None:
    load_job(example)
    assert list(validator().iter_errors(yaml.safe_load(example.read_text()))) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "nodse"), 3),  # unknown field
        (("spec", "nodes"), 0),
        (("spec", "resources", "memory"), "64GB"),
        (("spec", "checkpoint", "every"), "5 epochs"),
        (("spec", "nodePool", "preset"), "gek"),
        (("metadata", "name"), "Bad_Name"),
    ],
)
def test_schema_rejects_what_the_loader_rejects(path: tuple[str, ...], value: object) -> None:
    doc = yaml.safe_load(EXAMPLES[0].read_text())
    target = doc
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    assert list(validator().iter_errors(doc))


def test_schema_shows_defaults_as_users_write_them() -> None:
    defs = job_schema()["$defs"]
    assert defs["Resources"]["properties"]["memory"]["default"] == "8Gi"
    assert defs["CheckpointPolicy"]["properties"]["every"]["default"] == "30m"
    assert defs["Cleanup"]["properties"]["ttlAfterFinished"]["default"] == "24h"


def test_schema_is_deterministic() -> None:
    assert job_schema() == job_schema()
