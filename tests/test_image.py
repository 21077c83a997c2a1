"""The trainer image and the renderer agree on the user and the entrypoint."""

from __future__ import annotations

import json
import re

from operator_client.contract import RUNTIME_COMMAND
from operator_client.render.security import RUN_AS_GROUP, RUN_AS_USER

from .conftest import ROOT

DOCKERFILE = (ROOT / "images" / "trainer" / "Dockerfile").read_text()


def instruction(name: str) -> str:
    found = re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, re.MULTILINE)
    assert found, f"no {name} in the Dockerfile"
    return str(found[-1]).strip()


def test_user_matches_the_pod_security_context() -> None:
    assert instruction("USER") == f"{RUN_AS_USER}:{RUN_AS_GROUP}"


def test_entrypoint_is_the_rendered_command() -> None:
    assert json.loads(instruction("ENTRYPOINT")) == list(RUNTIME_COMMAND)


def test_entrypoint_is_an_installed_console_script() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[RUNTIME_COMMAND[0]] == "operator_client.runtime.main:main"
