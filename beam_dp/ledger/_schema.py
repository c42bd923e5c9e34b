"""The ledger's tables, and the check that a database holds a ledger this code can read.

Both backends keep the same tables (:func:`schema`; exact amounts and times are text). A
ledger is created only when asked (``create=True``, the budget CLI's ``create``): a job opening
a mistyped URL gets an error, never a fresh ledger with a full budget. Creation runs in a
write transaction, and PostgreSQL first takes an advisory lock
(:meth:`~beam_dp.ledger._backend.Backend.prepare_schema`), so two processes creating the same
ledger at once make one set of tables. Every open reads ``beam_dp_meta``: another program's
tables, a partial schema or another schema version stop the job before it reads any data.
Version 2 added what a dataset protects (``beam_dp_datasets.inputs``, :mod:`beam_dp.ledger.inputs`)
and when a run began reading data (``beam_dp_runs.started_at``); a version-1 ledger is migrated
in place, in one write transaction, the first time this code opens it (its datasets then protect
no input until an owner registers one, and its runs count as never started).
"""

from __future__ import annotations

from collections.abc import Callable

from beam_dp.ledger._backend import Backend
from beam_dp.ledger.errors import LedgerCorruptError, LedgerError
from beam_dp.ledger.urls import LedgerURL

__all__ = ["LEDGER_FORMAT", "SCHEMA_VERSION", "TABLES", "check_schema", "damaged", "schema"]

SCHEMA_VERSION = "2"
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
        " note TEXT NOT NULL,"
        " inputs TEXT NOT NULL DEFAULT '[]')",
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
        " entries TEXT NOT NULL, note TEXT NOT NULL,"
        " started_at TEXT)",
        "CREATE INDEX IF NOT EXISTS beam_dp_runs_period ON beam_dp_runs (period_id, state)",
        "CREATE INDEX IF NOT EXISTS beam_dp_runs_output ON beam_dp_runs (output_location)",
        "CREATE TABLE IF NOT EXISTS beam_dp_events ("
        f" id {id_column},"
        " dataset TEXT NOT NULL, at TEXT NOT NULL, action TEXT NOT NULL, detail TEXT NOT NULL)",
    ]


#: Version 1 to 2: what a dataset protects, and when a run began reading data.
_MIGRATE_1_TO_2 = (
    "ALTER TABLE beam_dp_datasets ADD COLUMN inputs TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE beam_dp_runs ADD COLUMN started_at TEXT",
    "UPDATE beam_dp_meta SET value = '2' WHERE key = 'schema_version'",
)


def damaged(url: LedgerURL, what: str) -> LedgerCorruptError:
    """The error for a ledger whose storage cannot be trusted (``what`` names the part)."""
    return LedgerCorruptError(
        f"ledger {url} is damaged: {what}; restore it from a backup before running any job"
    )


def check_schema(backend: Backend, url: LedgerURL, *, create: bool, now: Callable[[], str]) -> None:
    """Check that ``backend`` holds a beam-dp ledger of this schema version (create it first
    if ``create`` and the database holds none of its tables; ``now()`` is the creation time).

    Raises:
        LedgerError: no ledger there (and ``create`` is False), or another schema version.
        LedgerCorruptError: some tables missing, or tables of another format.
    """
    with backend.write() if create else backend.read() as transaction:
        present = [t for t in TABLES if backend.has_table(transaction, t)]
        if not present and create:
            backend.prepare_schema(transaction)
            if not backend.has_table(transaction, "beam_dp_meta"):
                for statement in backend.ddl():
                    transaction.execute(statement)
                transaction.execute(
                    "INSERT INTO beam_dp_meta (key, value) VALUES (?, ?), (?, ?), (?, ?)",
                    [
                        "format",
                        LEDGER_FORMAT,
                        "schema_version",
                        SCHEMA_VERSION,
                        "created_at",
                        now(),
                    ],
                )
            present = list(TABLES)
        if not present:
            raise LedgerError(
                f"{url} holds no beam-dp ledger yet (create one and its dataset "
                "with: python -m pipelines.budget create --ledger URL ...)"
            )
        if len(present) != len(TABLES):
            raise damaged(url, "some of its tables are missing")
        rows = dict(transaction.all("SELECT key, value FROM beam_dp_meta"))
    if rows.get("format") != LEDGER_FORMAT:
        raise damaged(url, "its tables do not carry the beam-dp ledger format")
    if rows.get("schema_version") == "1":
        with backend.write() as transaction:
            backend.prepare_schema(transaction)  # PostgreSQL: one migrating process at a time
            version = transaction.one("SELECT value FROM beam_dp_meta WHERE key = 'schema_version'")
            if version is not None and version[0] == "1":  # not migrated meanwhile by another
                for statement in _MIGRATE_1_TO_2:
                    transaction.execute(statement)
        return
    if rows.get("schema_version") != SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {url} has schema version {rows.get('schema_version')!r}; this "
            f"beam-dp reads version {SCHEMA_VERSION!r} (upgrade beam-dp)"
        )
