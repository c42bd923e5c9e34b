"""The SQLite backend (standard library ``sqlite3``): one file, many processes on one host.

The file is created with owner-only permissions (0600); SQLite gives its journal the same
permissions. An existing ledger is opened with ``mode=rw``, so a mistyped path is an error,
never a fresh ledger with a full budget. ``PRAGMA quick_check`` runs at open, so a damaged
file stops a job before it reads any data.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from beam_dp.ledger._backend import Backend, Transaction
from beam_dp.ledger._schema import schema
from beam_dp.ledger.errors import (
    LedgerCorruptError,
    LedgerError,
    LedgerUnavailableError,
)
from beam_dp.ledger.urls import LedgerURL, sqlite_uri

_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


class _SqliteTransaction(Transaction):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._connection.execute(sql, tuple(params))

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self._connection.execute(sql, tuple(params)).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._connection.execute(sql, tuple(params)).fetchall()]


class SqliteBackend(Backend):
    """A ledger in a SQLite file."""

    def __init__(self, url: LedgerURL, *, create: bool, busy_timeout: float) -> None:
        assert url.path is not None
        self._url = url
        self._busy_timeout = busy_timeout
        path = url.path
        if not path.exists():
            if not create:
                raise LedgerUnavailableError(
                    f"no ledger at {url}: the file does not exist (create the ledger and its "
                    "dataset with: python -m pipelines.budget create --ledger URL ...)"
                )
            _create_private_file(path, url)
        elif not path.is_file():
            raise LedgerUnavailableError(f"ledger {url} is not a regular file")
        try:
            self._connection = sqlite3.connect(
                sqlite_uri(path, mode="rw"),
                uri=True,
                timeout=busy_timeout,
                isolation_level=None,
            )
        except sqlite3.Error as error:
            raise self._error(error) from None
        try:
            row = self._connection.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                raise LedgerCorruptError(
                    f"ledger {url} failed SQLite's integrity check (the file is damaged); "
                    "restore it from a backup before running any job"
                )
            self._connection.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as error:
            self._connection.close()
            raise self._error(error) from None
        except LedgerError:
            self._connection.close()
            raise

    def _error(self, error: sqlite3.Error) -> LedgerError:
        code = getattr(error, "sqlite_errorname", "")
        if code in _CORRUPT or (not code and isinstance(error, sqlite3.DatabaseError)):
            return LedgerCorruptError(
                f"ledger {self._url} is not a readable SQLite database (corrupt or another kind "
                "of file); restore it from a backup before running any job"
            )
        if code in _BUSY:
            return LedgerUnavailableError(
                f"ledger {self._url} stayed locked by another process for more than "
                f"{self._busy_timeout:g} s; try again"
            )
        if code.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_READONLY", "SQLITE_AUTH")):
            return LedgerUnavailableError(
                f"ledger {self._url} cannot be opened for writing (check the file's and its "
                "directory's permissions)"
            )
        if code.startswith(("SQLITE_IOERR", "SQLITE_FULL")):
            return LedgerUnavailableError(
                f"ledger {self._url}: the disk refused a read or write ({code}); check the "
                "file system"
            )
        return LedgerError(f"ledger {self._url}: SQLite failed ({code or 'unknown error'})")

    write_begin = "BEGIN IMMEDIATE"
    read_begin = "BEGIN DEFERRED"

    @contextmanager
    def transaction(self, begin: str) -> Iterator[Transaction]:
        try:
            self._connection.execute(begin)
        except sqlite3.Error as error:
            raise self._error(error) from None
        try:
            yield _SqliteTransaction(self._connection)
        except sqlite3.Error as error:
            self._rollback()
            raise self._error(error) from None
        except BaseException:
            self._rollback()
            raise
        try:
            self._connection.execute("COMMIT")
        except sqlite3.Error as error:
            self._rollback()
            raise self._error(error) from None

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._connection.execute("ROLLBACK")

    def has_table(self, transaction: Transaction, table: str) -> bool:
        row = transaction.one(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        )
        return bool(row and row[0])

    def ddl(self) -> list[str]:
        return schema("INTEGER PRIMARY KEY")

    def close(self) -> None:
        self._connection.close()


def _create_private_file(path: Path, url: LedgerURL) -> None:
    """Create ``path`` (and missing parent directories, 0700) with permissions 0600."""
    try:
        missing = [parent for parent in path.parents if not parent.exists()]
        for parent in reversed(missing):
            parent.mkdir(mode=0o700)
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return  # another process created it first: open it as it is
    except (OSError, ValueError):  # ValueError: a path the OS cannot take
        raise LedgerUnavailableError(
            f"cannot create the ledger {url} (check that its directory is writable)"
        ) from None
    try:
        os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)
