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


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    return README[start : README.index("\n## ", start + 1)]


def test_the_layout_lists_every_package_and_module() -> None:
    """Every package and top-level module of operator_client has its line in the layout."""
    layout = _section("Repository layout")
    package = ROOT / "operator_client"
    for path in sorted(package.iterdir()):
        if path.name.startswith("_") or path.name == "py.typed":
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            assert f"operator_client/{path.name}/" in layout, path.name
        elif path.suffix == ".py":
            assert f"operator_client/{path.name}" in layout, path.name


def test_the_import_layers_in_the_readme_are_the_enforced_ones() -> None:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = contracts["contracts"][0]["layers"]
    shown = [
        " | ".join(p.removeprefix("operator_client.") for p in layer.split(" | "))
        for layer in layers
    ]
    assert "```\n" + "\n".join(shown) + "\n```" in _section("Repository layout")


def test_every_module_and_error_the_readme_names_imports() -> None:
    """`operator_client.x.y` paths import; each error the API section names lives where it
    says (`Name` ... in `operator_client.module`)."""
    import importlib
    import re

    for dotted in sorted(set(re.findall(r"`(operator_client(?:\.\w+)+)`", README))):
        importlib.import_module(dotted)
    errors = _section("The Python API").split("- Errors are", 1)[1].split("\n- ", 1)[0]
    checked = 0
    for part in errors.split(";"):  # "`A`, `B` ... in `operator_client.x`"
        module = re.findall(r"`(operator_client[\w.]*)`", part)[-1]
        for name in re.findall(r"`([A-Z]\w+)`", part):
            assert hasattr(importlib.import_module(module), name), f"{name} is not in {module}"
            checked += 1
    assert checked >= 10
    for path in sorted(set(re.findall(r"\b(docs/[A-Z_]+\.md)\b", README))):
        assert (ROOT / path).is_file(), path
