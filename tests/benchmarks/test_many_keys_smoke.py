"""Smoke run of benchmarks/many_keys.py at --quick, without peers: it runs and prints its tables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import many_keys  # noqa: E402


def test_quick_run_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    many_keys.main(["--quick", "--no-opendp"])

    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for d in many_keys.KEY_SIZES:
        for method in many_keys.METHODS:
            assert any(line.startswith(f"| {d} | {method} | ") for line in rows)
    assert "Single select() call" in out
    assert "Grid: 10,000 prices" in out
    assert any(line.startswith(("PASS: grid", "FAIL: grid")) for line in out.splitlines())


def test_grid_prices_read_start_stop_step_as_the_jobs_do() -> None:
    assert many_keys.grid_prices("0.01:0.05:0.01") == [0.01, 0.02, 0.03, 0.04]
    assert len(many_keys.grid_prices(many_keys.GRID_SPEC)) == 10**6
