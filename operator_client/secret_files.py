"""Files that hold secrets by their name: never in a built image (image/workspace.py),
never shown to a local pod from the working directory it runs in (backends/local/sandbox/).

gitignore patterns, matched at any depth. Content is scanned too where an image is built
(image/secrets.py); names are what can be checked everywhere, at once.
"""

from __future__ import annotations

SECRET_NAMES = (
    ".git",
    ".env",
    ".env.*",
    ".envrc",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".pgpass",
    ".git-credentials",
    ".ssh/",
    ".aws/",
    ".azure/",
    ".docker/",
    ".kube/",
    ".gnupg/",
    ".config/gcloud/",
    ".terraform/",
    "credentials",
    "credentials.json",
    "service-account*.json",
    "*-key.json",
    "*_key.json",
    "key.json",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "kubeconfig",
    "*.kubeconfig",
    "*.tfstate",
    "*.tfstate.backup",
)

# What a shell, an editor or a tool keeps about its user: not a secret in an image's
# sense, but nothing a pod has any business reading from a working directory that is a
# home directory.
PRIVATE_NAMES = (
    ".*_history",
    ".gitconfig",
    ".viminfo",
    ".lesshst",
    ".config/",
    ".local/",
    ".cache/",
    ".mozilla/",
)
