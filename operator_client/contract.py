"""Names and numbers shared by the layers (runtime, backends, collect): defined once here.

Pure constants: importing this module costs nothing.
"""

from __future__ import annotations

# Where a container writes why it failed: Kubernetes' default terminationMessagePath. The
# kubelet reports its content as the container's terminated.message; the local backend
# points the runtime at a file of its own through TERMINATION_LOG_ENV.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_ENV = "KCTL_TRAIN_TERMINATION_LOG"

# 128 + SIGTERM: retried by restartPolicy ExitCode and OnFailure, never taken for success.
EXIT_PREEMPTED = 143
# A worker whose attempt was superseded by a newer one (a second writer): it stops
# without committing anything more.
EXIT_SUPERSEDED = 3
# A worker that could not write (a full disk, a read-only store): retried like any failure.
EXIT_IO_ERROR = 4
