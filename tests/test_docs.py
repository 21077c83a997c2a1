"""The README documents every job.yaml field and every CLI command."""

from __future__ import annotations

import pytest

from operator_client.cli.main import build_parser
from operator_client.spec.schema import job_schema

from .conftest import ROOT

README = (ROOT / "README.md").read_text()


def _fields() -> list[str]:
    schema = job_schema()
    names = set(schema["properties"])
    for definition in schema["$defs"].values():
        names.update(definition.get("properties", {}))
    return sorted(names)


@pytest.mark.parametrize("field", _fields())
def test_every_field_is_in_the_reference(field: str) -> None:
    assert f"`{field}`" in README


def test_every_command_is_in_the_readme() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command in sub.choices:  # type: ignore[union-attr]
        assert f"kctl-train {command}" in README
