"""The errors the ledger raises: one line each, safe to print, never a library's message.

They subclass ``ValueError`` (through :class:`LedgerError`) so that a job's command-line
wrapper that prints ``ValueError`` as ``error: ...`` prints them as they are. No message
contains a password: URLs are always shown redacted (:func:`beam_dp.ledger.redact_url`).
"""

from __future__ import annotations

from beam_dp.errors import BeamDPError

__all__ = [
    "BudgetExceededError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerUnavailableError",
]


class LedgerError(BeamDPError, ValueError):
    """A ledger refused an operation or could not be used. The message is one line."""


class LedgerUnavailableError(LedgerError):
    """The ledger cannot be reached or opened (missing file, server down, bad credentials)."""


class LedgerCorruptError(LedgerError):
    """The ledger's storage is not a readable beam-dp ledger (corrupt file, foreign schema)."""


class BudgetExceededError(LedgerError):
    """A reservation does not fit in what the dataset has left; nothing was reserved."""
