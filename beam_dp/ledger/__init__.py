"""A privacy budget that outlives a process: a persistent, concurrent-safe ledger.

A ledger (a SQLite file, or a PostgreSQL database for jobs started on many machines) holds
*datasets*, each a population of privacy units with a total (ε, δ), or ρ under zCDP, and an
optional renewal rule. A job reserves its whole planned spend before it reads any data,
commits the reservation with its ledger entries once its outputs are written, and may give
it back only if it failed before any release could escape. See :mod:`beam_dp.ledger._runs`
for the state machine and :mod:`beam_dp.ledger.periods` for renewal.

Example::

    from beam_dp.ledger import Plan, RunInfo, open_ledger

    with open_ledger("sqlite:///var/lib/beam-dp/budget.db") as ledger:
        run = RunInfo(job="nightly", inputs=files, output_location="gs://bucket/out")
        reservation = ledger.reserve("survey_users", Plan.from_budget(budget), run)
        reservation.start()  # then read, release
        reservation.commit(budget.ledger, output_location="gs://bucket/out")
        ...  # write the outputs

Pure Python (``sqlite3``; ``psycopg`` for PostgreSQL); no Apache Beam.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from beam_dp.ledger._amounts import show_amount
from beam_dp.ledger._backend import Backend
from beam_dp.ledger._runs import COMMIT_ATTEMPTS
from beam_dp.ledger.errors import (
    BudgetExceededError,
    LedgerCorruptError,
    LedgerError,
    LedgerUnavailableError,
)
from beam_dp.ledger.periods import RENEWALS, Renewal, period_containing, renewal_phrase
from beam_dp.ledger.plan import Cost, Plan, RunInfo, config_digest
from beam_dp.ledger.store import (
    DatasetStatus,
    Event,
    Ledger,
    Period,
    Reservation,
    RunRecord,
    RunState,
)
from beam_dp.ledger.urls import parse_ledger_url, redact_url

__all__ = [
    "COMMIT_ATTEMPTS",
    "RENEWALS",
    "BudgetExceededError",
    "Cost",
    "DatasetStatus",
    "Event",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerUnavailableError",
    "Period",
    "Plan",
    "Renewal",
    "Reservation",
    "RunInfo",
    "RunRecord",
    "RunState",
    "config_digest",
    "open_ledger",
    "period_containing",
    "redact_url",
    "renewal_phrase",
    "show_amount",
]


def open_ledger(
    url: str,
    *,
    create: bool = False,
    timeout: float = 30.0,
    clock: Callable[[], datetime] | None = None,
) -> Ledger:
    """Open the ledger at ``url`` (see :mod:`beam_dp.ledger.urls` for the forms).

    Args:
        url: ``sqlite:///path/budget.db`` or ``postgresql://user:password@host/db``.
        create: Create the ledger (file with permissions 0600, or tables) if it does not
            exist. Jobs leave it False, so a mistyped URL is an error, not a fresh budget.
        timeout: Seconds to wait for the SQLite write lock, or to connect to PostgreSQL.
        clock: For tests only: returns the current time (timezone-aware). By default the
            ledger keeps its own time: the server's ``now()`` on PostgreSQL, this host's clock
            in UTC on SQLite (:meth:`beam_dp.ledger._tables.Tables.time`).

    Raises:
        LedgerUnavailableError: the file is missing or the server cannot be reached.
        LedgerCorruptError: the storage is not a readable beam-dp ledger.
        LedgerError: a malformed URL. No message contains a password.
    """
    parsed = parse_ledger_url(url)
    if not timeout > 0:
        raise LedgerError(f"'timeout' must be > 0 seconds; received {timeout!r}")
    if parsed.backend == "sqlite":
        from beam_dp.ledger._sqlite import SqliteBackend

        backend: Backend = SqliteBackend(parsed, create=create, busy_timeout=timeout)
    else:
        from beam_dp.ledger._postgres import PostgresBackend

        backend = PostgresBackend(parsed, connect_timeout=timeout)
    return Ledger(
        backend,
        parsed,
        create=create,
        clock=clock,
        reopen=lambda: open_ledger(url, timeout=timeout, clock=clock),
    )
