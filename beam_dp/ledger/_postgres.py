"""The PostgreSQL backend (psycopg 3): one database shared by jobs on many machines.

The connection is opened with a connect timeout, so an unreachable server fails fast. Its
errors become one-line messages built from the redacted URL and a category; the driver's
own message (which may quote connection parameters) is never passed on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from beam_dp.ledger._backend import Backend, Transaction
from beam_dp.ledger._schema import schema
from beam_dp.ledger.errors import LedgerError, LedgerUnavailableError
from beam_dp.ledger.urls import LedgerURL

try:
    import psycopg
except ImportError:  # pragma: no cover - depends on the installation
    psycopg = None  # type: ignore[assignment]

# Any constants: the creating transaction holds the first advisory lock while it runs the DDL;
# a change of what datasets protect holds the second (two datasets never register one export).
_SCHEMA_LOCK = 7_413_219_044
_REGISTRATION_LOCK = 7_413_219_045


class _PostgresTransaction(Transaction):
    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._cursor.execute(sql.replace("?", "%s"), tuple(params))

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        self._cursor.execute(sql.replace("?", "%s"), tuple(params))
        row = self._cursor.fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cursor.execute(sql.replace("?", "%s"), tuple(params))
        return [tuple(row) for row in self._cursor.fetchall()]


def _connect_failure(error: Exception) -> str:
    """A category for a failed connection, read from the driver's message (never shown)."""
    text = str(error).lower()
    if "password" in text or "authentication" in text:
        return "the server refused the credentials"
    if "does not exist" in text:
        return "the database or role does not exist"
    if "timeout" in text or "timed out" in text:
        return "the connection timed out"
    if "refused" in text:
        return "the connection was refused (is the server running on that host and port?)"
    if "resolve host" in text or "translate host name" in text or "not known" in text:
        return "the host name does not resolve"
    if "ssl" in text:
        return "the TLS negotiation failed"
    return "the server could not be reached"


class PostgresBackend(Backend):
    """A ledger in a PostgreSQL database (tables ``beam_dp_*``)."""

    lock_clause = " FOR UPDATE"

    def __init__(self, url: LedgerURL, *, connect_timeout: float) -> None:
        self._url = url
        # A writer waits at most the timeout for a row lock, then fails (and a job retries).
        self.write_begin = (
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; "
            f"SET LOCAL lock_timeout = '{max(1, round(connect_timeout * 1000))}ms'"
        )
        if psycopg is None:
            raise LedgerUnavailableError(
                f"ledger {url} needs psycopg 3: pip install 'beam-dp[postgresql]'"
            )
        try:
            self._connection = psycopg.connect(
                url.secret,
                connect_timeout=max(1, round(connect_timeout)),
                autocommit=True,
                application_name="beam-dp-ledger",
            )
        except psycopg.Error as error:
            raise LedgerUnavailableError(
                f"cannot connect to the ledger {url}: {_connect_failure(error)}"
            ) from None
        except ValueError:  # malformed conninfo (psycopg.ProgrammingError is a psycopg.Error)
            raise LedgerUnavailableError(
                f"cannot connect to the ledger {url}: the URL's parameters are not valid"
            ) from None

    def _error(self, error: Exception) -> LedgerError:
        assert psycopg is not None
        if isinstance(error, psycopg.OperationalError):
            return LedgerUnavailableError(
                f"ledger {self._url}: the connection to the server failed; try again"
            )
        state = getattr(error, "sqlstate", None) or "unknown"
        return LedgerError(f"ledger {self._url}: the database refused an operation ({state})")

    read_begin = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

    @contextmanager
    def transaction(self, begin: str) -> Iterator[Transaction]:
        assert psycopg is not None
        try:
            with self._connection.transaction(), self._connection.cursor() as cursor:
                transaction = _PostgresTransaction(cursor)
                transaction.execute(begin)
                yield transaction
        except psycopg.Error as error:
            raise self._error(error) from None

    def server_time(self, transaction: Transaction) -> datetime:
        """The server's clock (never the client's), read when asked: after the dataset's lock
        was granted, so that the times of one dataset's changes follow their order."""
        row = transaction.one("SELECT clock_timestamp()")
        assert row is not None and isinstance(row[0], datetime)
        return row[0].astimezone(UTC)

    def has_table(self, transaction: Transaction, table: str) -> bool:
        row = transaction.one("SELECT to_regclass(?) IS NOT NULL", (table,))
        return bool(row and row[0])

    def prepare_schema(self, transaction: Transaction) -> None:
        transaction.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def lock_registrations(self, transaction: Transaction) -> None:
        transaction.execute("SELECT pg_advisory_xact_lock(?)", (_REGISTRATION_LOCK,))

    def ddl(self) -> list[str]:
        return schema("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.close()
