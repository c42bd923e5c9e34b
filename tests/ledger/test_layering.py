"""The ledger is a pure layer: importing it (or the budget CLI) never loads Apache Beam."""

from __future__ import annotations

import subprocess
import sys


def test_the_ledger_and_its_cli_do_not_import_beam() -> None:
    code = (
        "import sys, beam_dp.ledger, pipelines.budget\n"
        "assert 'apache_beam' not in sys.modules, 'apache_beam was imported'\n"
        "assert 'psycopg' not in sys.modules, 'psycopg is loaded only for PostgreSQL URLs'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
