"""The one exception type of the analysis stage, so callers can turn any bad input into a one-line error."""

from __future__ import annotations


class AnalysisError(Exception):
    """Bad or unusable input to the analysis stage; str(exc) is a one-line message for a person."""


class PcapError(AnalysisError):
    """A capture that cannot be read (missing, empty, not pcap or pcapng, malformed, truncated, no TCP)."""


class TruncatedPcapError(PcapError):
    """The file ends inside a record; `record` is the 1-based number of the cut record."""

    def __init__(self, message: str, record: int) -> None:
        super().__init__(message)
        self.record = record


class NoTcpError(PcapError):
    """A well-formed capture that holds no TCP packet (over IPv4 or IPv6)."""
