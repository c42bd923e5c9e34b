"""The two storage backends behind one small interface: SQL with ``?`` placeholders.

Both keep the same tables (see ``SCHEMA``); exact amounts and times are text. A *write*
transaction serialises every writer of the ledger's datasets:

- SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock before the first read, so the
  check of the remaining budget and the insert of the reservation are one atomic step across
  processes (others wait up to the busy timeout).
- PostgreSQL: ``READ COMMITTED`` plus ``SELECT ... FOR UPDATE`` on the dataset's row (the
  store does that first in every write): writers of one dataset queue on that row lock, and
  each statement after it sees every transaction committed before the lock was granted.

Errors from the drivers are turned into one-line :mod:`beam_dp.ledger.errors` built from the
redacted URL and a category, never from the driver's message.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["SCHEMA_VERSION", "Backend", "Transaction", "schema"]

SCHEMA_VERSION = "1"
LEDGER_FORMAT = "beam-dp ledger"
TABLES = ("beam_dp_meta", "beam_dp_datasets", "beam_dp_periods", "beam_dp_runs", "beam_dp_events")


def schema(id_column: str) -> list[str]:
    """The DDL, with ``id_column`` the backend's auto-increment primary key declaration."""
    return [
        "CREATE TABLE IF NOT EXISTS beam_dp_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS beam_dp_datasets ("
        " name TEXT PRIMARY KEY,"
        " composition TEXT NOT NULL CHECK (composition IN ('basic', 'zcdp')),"
        " relation TEXT NOT NULL,"
        " epsilon TEXT NOT NULL, delta TEXT NOT NULL, rho TEXT NOT NULL,"
        " renewal TEXT NOT NULL,"
        " created_at TEXT NOT NULL,"
        " note TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS beam_dp_periods ("
        f" id {id_column},"
        " dataset TEXT NOT NULL REFERENCES beam_dp_datasets (name),"
        " starts_at TEXT NOT NULL, ends_at TEXT,"
        " epsilon TEXT NOT NULL, delta TEXT NOT NULL, rho TEXT NOT NULL,"
        " UNIQUE (dataset, starts_at))",
        "CREATE TABLE IF NOT EXISTS beam_dp_runs ("
        f" id {id_column},"
        " dataset TEXT NOT NULL REFERENCES beam_dp_datasets (name),"
        " period_id BIGINT NOT NULL REFERENCES beam_dp_periods (id),"
        " state TEXT NOT NULL CHECK (state IN"
        " ('reserved', 'committed', 'returned', 'abandoned', 'released')),"
        " reserved_at TEXT NOT NULL, closed_at TEXT,"
        " epsilon TEXT NOT NULL, delta TEXT NOT NULL, rho TEXT NOT NULL,"
        " job TEXT NOT NULL, config_digest TEXT NOT NULL, statistics TEXT NOT NULL,"
        " host TEXT NOT NULL, pid BIGINT NOT NULL, details TEXT NOT NULL,"
        " output_location TEXT, overwrite INTEGER NOT NULL, overwrites TEXT NOT NULL,"
        " entries TEXT NOT NULL, note TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS beam_dp_runs_period ON beam_dp_runs (period_id, state)",
        "CREATE INDEX IF NOT EXISTS beam_dp_runs_output ON beam_dp_runs (output_location)",
        "CREATE TABLE IF NOT EXISTS beam_dp_events ("
        f" id {id_column},"
        " dataset TEXT NOT NULL, at TEXT NOT NULL, action TEXT NOT NULL, detail TEXT NOT NULL)",
    ]


class Transaction(abc.ABC):
    """One open transaction. SQL uses ``?`` placeholders."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement."""

    @abc.abstractmethod
    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """Run a query and return its first row (or None)."""

    @abc.abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query and return every row."""

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an ``INSERT ... RETURNING id`` and return the id."""
        row = self.one(sql + " RETURNING id", params)
        assert row is not None
        return int(row[0])


class Backend(abc.ABC):
    """A connection to one ledger database."""

    #: Appended to the ``SELECT`` that reads a dataset's row in a write transaction.
    lock_clause: str = ""

    @abc.abstractmethod
    @contextmanager
    def write(self) -> Iterator[Transaction]:
        """A transaction that serialises with every other writer (see the module docstring)."""

    @abc.abstractmethod
    @contextmanager
    def read(self) -> Iterator[Transaction]:
        """A read-only transaction that sees one consistent state."""

    @abc.abstractmethod
    def has_table(self, transaction: Transaction, table: str) -> bool:
        """Whether ``table`` exists."""

    @abc.abstractmethod
    def ddl(self) -> list[str]:
        """The schema for this backend."""

    def prepare_schema(self, transaction: Transaction) -> None:  # noqa: B027 - optional hook
        """Run before the DDL in the creating transaction (PostgreSQL takes a lock)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection."""
