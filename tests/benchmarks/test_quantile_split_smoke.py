"""Smoke run of benchmarks/quantile_split.py at --quick: one stand-in column, m = 3, epsilon 1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import quantile_split


def test_quick_run_prints_one_row_per_split(capsys: pytest.CaptureFixture[str]) -> None:
    quantile_split.main(["--quick"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header, row = rows  # (the separator line starts "|-")
    assert header.split("|")[8:11] == [" joint ", " recursive ", " independent "]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:7] == ["1", "3"]  # epsilon, m
    errors = [float(cell.split(" ")[0]) for cell in cells[7:10]]
    assert all(0 <= e <= 1 for e in errors)  # rank errors as a fraction of the rows
    assert cells[10] in quantile_split.SPLITS
