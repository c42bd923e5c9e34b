"""Fixtures for the ledger tests: a ledger URL on each backend, a real PostgreSQL server.

PostgreSQL tests run against a server this suite starts (``ledger_pg_server``). If it cannot
start, they fail when ``CI`` is set (CI must exercise them) and skip with the reason locally.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Helper modules here (the server, the workers that spawned processes import) by name.
sys.path.insert(0, str(Path(__file__).parent))

from ledger_pg_server import PostgresServer, ServerUnavailableError

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401

        server = PostgresServer().start()
    except (ImportError, ServerUnavailableError, OSError) as error:
        reason = f"PostgreSQL server unavailable: {str(error)[:500]}"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI must run the PostgreSQL tests; make test installs it)")
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A URL (with its password) of a fresh, empty database on the test server."""
    return postgres_server.create_database("ledger_" + uuid.uuid4().hex[:12])


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for a new ledger, on each backend in turn (the ledger is not created yet)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'budget.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
