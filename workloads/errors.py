"""The one exception type a workload turns into its single stderr line and non-zero exit."""

# Connecting to the PS may take at least this long whatever --timeout says: N processes importing
# torch at once on a shared CPU can need many seconds before they even try to connect.
STARTUP_GRACE_S = 30.0


class WorkloadError(Exception):
    """An expected failure (peer lost, timeout, bad arguments): reported without a traceback."""
