"""The two storage backends behind one small interface: SQL with ``?`` placeholders.

Both keep the same tables (:mod:`beam_dp.ledger._schema`). A *write* transaction serialises
every writer of the ledger's datasets (:meth:`Backend.write`, used by every change in
:mod:`beam_dp.ledger._runs` and :mod:`beam_dp.ledger._datasets`):

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
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

__all__ = ["Backend", "Transaction"]


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
    #: The first statement of a write transaction (see the module docstring).
    write_begin: str
    #: The first statement of a read-only transaction that sees one consistent state.
    read_begin: str

    def write(self) -> AbstractContextManager[Transaction]:
        """A transaction that serialises with every other writer (see the module docstring)."""
        return self.transaction(self.write_begin)

    def read(self) -> AbstractContextManager[Transaction]:
        """A read-only transaction that sees one consistent state."""
        return self.transaction(self.read_begin)

    @abc.abstractmethod
    def transaction(self, begin: str) -> AbstractContextManager[Transaction]:
        """A transaction opened by the statement ``begin``: committed when the block ends,
        rolled back if it raises; a driver's error becomes a one-line ledger error."""

    def server_time(self, transaction: Transaction) -> datetime | None:
        """The database server's clock in ``transaction`` (None: the backend has no server)."""
        return None

    @abc.abstractmethod
    def has_table(self, transaction: Transaction, table: str) -> bool:
        """Whether ``table`` exists."""

    @abc.abstractmethod
    def ddl(self) -> list[str]:
        """The schema for this backend."""

    def prepare_schema(self, transaction: Transaction) -> None:  # noqa: B027 - optional hook
        """Run before the DDL in the creating transaction (PostgreSQL takes a lock)."""

    def lock_registrations(self, transaction: Transaction) -> None:  # noqa: B027 - optional hook
        """Serialise the changes of what datasets protect (SQLite: every writer already is)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection."""
