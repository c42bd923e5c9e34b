"""A ledger that is missing, damaged, foreign or unreachable stops a job with one clear line."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from ledger_pg_server import PostgresServer, free_port

from beam_dp.ledger import (
    LedgerCorruptError,
    LedgerError,
    LedgerUnavailableError,
    Plan,
    RunInfo,
    open_ledger,
    redact_url,
)


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message and message
    # No library's message rides along: nothing chained, or raised `from None`.
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    return message


def _ledger(path: Path) -> str:
    url = f"sqlite://{path}"
    with open_ledger(url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        ledger.reserve("d", Plan.basic("0.25"), RunInfo(job="j", inputs=("/data/d/x",))).commit(
            [], "out"
        )
    return url


def test_a_new_sqlite_ledger_is_private_to_its_owner(tmp_path: Path) -> None:
    old = os.umask(0)  # even with a permissive umask
    try:
        url = _ledger(tmp_path / "new" / "dir" / "budget.db")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "dir" / "budget.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new" / "dir").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert url.startswith("sqlite:///")


def test_a_missing_ledger_is_an_error_not_a_fresh_budget(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(LedgerUnavailableError) as error:
        open_ledger(f"sqlite://{path}")
    assert "does not exist" in _one_line(error.value)
    assert not path.exists()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"this is not a database at all\n" * 100, id="garbage"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(
            lambda data: data[: 4096 + 100] + os.urandom(8000) + data[4096 + 8100 :], id="pages"
        ),
    ],
)
def test_a_damaged_sqlite_ledger_is_refused(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "budget.db"
    url = _ledger(path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    before = path.read_bytes()
    with pytest.raises(LedgerCorruptError) as error, open_ledger(url) as ledger:
        ledger.status("d")
    message = _one_line(error.value)
    assert "restore it from a backup" in message and str(path) in message
    assert path.read_bytes() == before  # nothing was written


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE beam_dp_datasets (x)")
    with pytest.raises(LedgerCorruptError, match="tables are missing"):
        open_ledger(f"sqlite://{path}")
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(LedgerError, match="holds no beam-dp ledger yet"):
        open_ledger(f"sqlite://{empty}")


def test_bad_urls_are_refused_with_their_password_redacted() -> None:
    for url, rule in [
        ("mysql://root:hunter2@db/ledger", "unknown scheme"),
        ("sqlite://host/path.db", "no host"),
        ("sqlite:///tmp/x.db?mode=memory", "no query"),
        ("postgresql://user:hunter2@/db", "needs a host"),
        ("", "must be a URL"),
    ]:
        with pytest.raises(LedgerError, match=rule) as error:
            open_ledger(url)
        assert "hunter2" not in str(error.value)
    assert redact_url("postgresql://u:hunter2@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "hunter2" not in redact_url("postgresql://u@h/db?sslmode=require&password=hunter2")
    assert (
        redact_url("postgresql://u@h/db?sslmode=require") == "postgresql://u@h/db?sslmode=require"
    )
    assert redact_url("sqlite:///var/budget.db") == "sqlite:///var/budget.db"


def test_an_unreachable_postgresql_ledger_is_refused_without_its_password() -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://beam:s3cret-hunter2@127.0.0.1:{free_port()}/ledger"
    with pytest.raises(LedgerUnavailableError) as error:
        open_ledger(url, timeout=5)
    message = _one_line(error.value)
    assert "s3cret-hunter2" not in message
    assert "postgresql://beam:***@127.0.0.1" in message
    assert "connection was refused" in message


def test_wrong_credentials_and_a_missing_ledger_on_a_real_server(
    postgres_server: PostgresServer,
) -> None:
    wrong = postgres_server.url.replace(postgres_server.password, "not-the-password")
    with pytest.raises(LedgerUnavailableError) as error:
        open_ledger(wrong)
    message = _one_line(error.value)
    assert "refused the credentials" in message and "not-the-password" not in message
    url = postgres_server.create_database("never_created_ledger")
    with pytest.raises(LedgerError) as missing:
        open_ledger(url)
    assert "holds no beam-dp ledger yet" in _one_line(missing.value)
    assert postgres_server.password not in str(missing.value)
    with open_ledger(url, create=True) as ledger:
        assert postgres_server.password not in repr(ledger) + ledger.url
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        reservation = ledger.reserve(
            "d", Plan.basic("0.5"), RunInfo(job="j", inputs=("/data/d/x",))
        )
        assert postgres_server.password not in str(reservation.describe())


def test_a_damaged_run_amount_is_named_and_its_text_is_not_quoted(tmp_path: Path) -> None:
    path = tmp_path / "budget.db"
    url = _ledger(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE beam_dp_runs SET epsilon = ?", ("secret-amount-7731",))
    with pytest.raises(LedgerCorruptError) as error, open_ledger(url) as ledger:
        ledger.status("d")
    message = _one_line(error.value)
    assert "a run's amount is not a valid stored amount" in message
    assert "restore it from a backup" in message and "7731" not in message


@pytest.mark.parametrize(
    ("table", "column", "stored", "field"),
    [
        ("beam_dp_datasets", "renewal", "secret-renewal-7731", "renewal"),
        ("beam_dp_datasets", "relation", "secret-relation-7731", "relation"),
        ("beam_dp_datasets", "epsilon", "secret-amount-7731", "epsilon"),
        ("beam_dp_datasets", "created_at", "secret-time-7731", "created_at"),
        ("beam_dp_periods", "epsilon", "secret-amount-7731", "period"),
        ("beam_dp_periods", "starts_at", "secret-time-7731", "period"),
    ],
)
def test_a_damaged_stored_field_is_named_and_its_text_is_not_quoted(
    tmp_path: Path, table: str, column: str, stored: str, field: str
) -> None:
    path = tmp_path / "budget.db"
    url = _ledger(path)
    with sqlite3.connect(path) as connection:
        connection.execute(f"UPDATE {table} SET {column} = ?", (stored,))
    with pytest.raises(LedgerCorruptError) as error, open_ledger(url) as ledger:
        ledger.status("d")
    message = _one_line(error.value)
    assert "dataset 'd'" in message and field in message and "restore it from a backup" in message
    assert "7731" not in message  # the stored text is not quoted
