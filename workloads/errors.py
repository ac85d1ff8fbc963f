"""How a workload process ends: the one exception type it turns into its single stderr line and
non-zero exit, and the exit itself."""

import os
import sys
from typing import NoReturn

# Connecting to the PS may take at least this long whatever --timeout says: N processes importing
# torch at once on a shared CPU can need many seconds before they even try to connect.
STARTUP_GRACE_S = 30.0


class WorkloadError(Exception):
    """An expected failure (peer lost, timeout, bad arguments): reported without a traceback."""


def exit_flushed(code: int) -> NoReturn:
    """Flush stdout and stderr, then leave without interpreter teardown: a gloo group that failed
    cannot be torn down cleanly (its destructor may block or warn), and every result is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
