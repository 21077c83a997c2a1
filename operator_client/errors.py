"""The errors kctl-train raises, for Python callers and the CLI alike. Each message says
what is wrong and what to do; `exit_code` is what the CLI exits with. Importing this
module costs nothing (no backend is imported to catch its errors)."""

from __future__ import annotations

from typing import Any

# The CLI's exit codes: 0 success, 1 the operation or the job failed, 2 bad input (job
# file, flags), 130 interrupted (Ctrl-C).
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class KctlTrainError(Exception):
    """Base of every error with an actionable message."""

    exit_code = EXIT_FAILED


class BadInput(KctlTrainError):
    """An argument or job that cannot be used as given (a flag, a replica name)."""

    exit_code = EXIT_BAD_INPUT


class BackendError(KctlTrainError):
    """The backend failed to do what was asked; `code` is the HTTP status of a cluster's
    answer (0: none)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class ClusterError(BackendError):
    """A Kubernetes API call failed."""


class LocalJobError(BackendError):
    """A local job cannot be submitted, found or stopped."""


class RenderBug(KctlTrainError):
    """kctl-train rendered a manifest the operator's webhook would refuse: a bug in
    kctl-train, never in the job (report it, with the job file)."""


class JobNotFound(KctlTrainError):
    """No job of that name in that namespace."""


class NoStorage(KctlTrainError):
    """The job keeps no objects to collect (rendered without storage)."""


class NothingStored(NoStorage):
    """The job's store holds nothing for it (a `command:` job that writes no
    checkpoints, or a job that never started)."""


class PreflightFailed(KctlTrainError):
    """Checks before a submit found errors; `findings` has each (warnings too)."""

    def __init__(self, name: str, findings: list[Any]) -> None:
        errors = [f for f in findings if f.level == "error"]
        super().__init__(
            f"{name} not applied: "
            + ("; ".join(f.message for f in errors) if errors else "fix the errors above")
        )
        self.findings = findings
        if errors and all(f.bad_input for f in errors):
            self.exit_code = EXIT_BAD_INPUT


class WaitTimeout(KctlTrainError):
    """The job had not ended when a wait gave up; it goes on."""


class BuildError(KctlTrainError):
    """An image build or push failed (the builder's own words are in its output)."""


class NoBuilder(BuildError):
    """No image builder can run here (Docker engine, podman, buildah)."""

    exit_code = EXIT_BAD_INPUT


class BadBaseImage(BuildError):
    """The image to build on does not have the kctl-train runtime."""

    exit_code = EXIT_BAD_INPUT


class RegistryError(BuildError):
    """A registry refused or failed a request; `status` is its HTTP answer (0: none)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
