"""The `kctl-train` command line."""

import os

# pydantic reads every installed distribution's entry points looking for plugins when the
# first model class is built; the CLI uses none, and the scan dominates its start-up.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
