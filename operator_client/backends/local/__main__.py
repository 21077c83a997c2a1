"""`python -m operator_client.backends.local JOB_DIR`: the supervisor of one local job
(supervisor.py). Run through the package: as `-m ...local.supervisor` the module runs a
second time after the package imported it, and runpy said so in every supervisor.log."""

import sys

from .supervisor import main

sys.exit(main())
