"""Smoke run of benchmarks/real_panels.py at --quick: stand-in panels, no peers (it says so)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import real_panels  # noqa: E402

BOUNDS_CHOSEN = r" ?\d+x\d+(, \d+x\d+)* ?"  # "1x2" or "1x1, 2x1": bound x runs


def test_quick_run_prints_every_table_without_peers(capsys: pytest.CaptureFixture[str]) -> None:
    lines = real_panels.main(["--quick"])
    out = capsys.readouterr().out
    assert "Peers skipped" in out
    columns = real_panels.QUICK_COLUMNS.split(",")
    rows = [line for line in lines if line.startswith("| ")]
    for column in columns:
        for statistic in ("q0.25", "q0.5", "q0.75", "mean"):
            (row,) = [r for r in rows if r.startswith(f"| {column} | 1 | {statistic} |")]
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert cells[4] != "-"  # beam-dp's default released
            assert cells[5:8] == ["-", "-", "-"]  # the peers skipped
        chosen_cells = [  # the interval table's auto bounds, one per run: "1x2", "1x1, 2x1"
            r.split("|")[3]
            for r in rows
            if r.startswith(f"| {column} | 1 | ") and re.fullmatch(BOUNDS_CHOSEN, r.split("|")[3])
        ]
        (chosen,) = chosen_cells
        assert sum(int(part.split("x")[1]) for part in chosen.split(",")) == 2


def test_stand_ins_have_the_panels_shape() -> None:
    hours = real_panels.load(real_panels.COLUMNS[0], quick=True)
    assert hours.per_unit.max() == hours.per_unit.min() == 8
    assert hours.note.startswith("synthetic stand-in")
