"""This machine's pip configuration, for pip inside an image build: the pip.conf files and
the local directories they name (a mirror, a wheel directory, a CA bundle), mounted
read-only into RUN steps so a build works where only a mirror is reachable.

Also a script (stdlib only; the image scripts run it with any python3):
    python3 operator_client/image/pip_config.py     one path a line
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONFIG_FILES = ("/etc/pip.conf", "/etc/xdg/pip")


def pip_paths(python: str = sys.executable) -> list[str]:
    """The configuration files and the directories the configuration names."""
    paths = [p for p in CONFIG_FILES if Path(p).exists()]
    try:
        listed = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        listed = ""
    named = {m.removeprefix("file://") for m in re.findall(r"(?:file://)?/[^' ]+", listed)}
    paths += sorted(p for p in named if Path(p).is_dir())
    return paths


if __name__ == "__main__":
    print("\n".join(pip_paths()))
