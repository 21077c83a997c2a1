"""The README documents every job.yaml field and every CLI command."""

from __future__ import annotations

import re

import pytest

from operator_client.cli.grammar import parser as build_parser
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
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else len(README)]


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


def test_every_error_a_user_can_meet_is_named_in_the_api_section() -> None:
    """Each KctlTrainError subclass in the package (found in the source, so modules that
    need torch count too) is in the README's list of errors."""
    import re

    errors = _section("The Python API").split("- Errors are", 1)[1].split("\n- ", 1)[0]
    classes = [
        found
        for path in sorted((ROOT / "operator_client").rglob("*.py"))
        for found in re.findall(r"^class (\w+)\((\w+)\):", path.read_text(), re.MULTILINE)
    ]
    ours, grown = {"KctlTrainError"}, True
    while grown:
        before = len(ours)
        ours |= {name for name, base in classes if base in ours}
        grown = len(ours) > before
    assert len(ours) > 15
    missing = sorted(name for name in ours - {"KctlTrainError"} if f"`{name}`" not in errors)
    assert not missing, f"errors the README's API section does not name: {missing}"


def test_the_benchmark_table_names_every_script_there_is() -> None:
    """Every bench/ script has a row (heavy_model.py is the model some of them load), and
    every script a row names exists."""
    import re

    section = _section("Benchmarks")
    named = set(re.findall(r"`bench/(\w+\.py)`", section))
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")} - {"heavy_model.py"}
    assert named == scripts, (sorted(named - scripts), sorted(scripts - named))


def test_the_layout_names_every_manifests_directory() -> None:
    layout = _section("Repository layout")
    entry = layout.split("\nmanifests/", 1)[1].split("\ncharts/", 1)[0]
    for directory in sorted(p.name for p in (ROOT / "manifests").iterdir() if p.is_dir()):
        assert f"{directory}/" in entry, f"manifests/{directory}/ is not in the layout"


def test_the_backend_contract_is_numbered_in_order() -> None:
    """Backend's methods say their place in the contract (`1.` to `N.`), in the order they
    are written, so an implementation's `# N.` comments point to one."""
    import re

    text = (ROOT / "operator_client/backends/base.py").read_text()
    numbers = [int(n) for n in re.findall(r'^        """(\d+)\. ', text, re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    for backend in (ROOT / "operator_client/backends").rglob("backend.py"):
        for comment in re.findall(r"^    # ([\d, ]+)\. (.+)$", backend.read_text(), re.MULTILINE):
            assert all(int(n) <= len(numbers) for n in comment[0].split(", ")), comment


def test_every_doc_the_code_points_to_is_there() -> None:
    pointed = set()
    for path in [*(ROOT / "operator_client").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        pointed.update(re.findall(r"\bdocs/[A-Z_0-9]+\.md\b", path.read_text()))
    assert pointed, "no pointer found: the pattern is wrong"
    assert sorted(p for p in pointed if not (ROOT / p).is_file()) == []


def test_every_file_the_help_names_is_there() -> None:
    """A path of this repository in any command's help or description (one read
    `values.cmd.json` after a rename) names a file or directory that exists."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    texts = []
    for command in sub.choices.values():  # type: ignore[union-attr]
        texts.append(command.description or "")
        texts.extend(a.help or "" for a in command._actions)
    named = set(re.findall(r"\b(?:charts|manifests|images|docs)/[\w./-]*\w", " ".join(texts)))
    assert named, "no path found: the pattern is wrong"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
