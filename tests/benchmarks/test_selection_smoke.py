"""Smoke run of benchmarks/selection.py at --quick: it runs and prints its table (no timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import selection  # noqa: E402


def test_quick_run_prints_a_row_per_shape_and_method(capsys: pytest.CaptureFixture[str]) -> None:
    rows = selection.main(["--quick"])

    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    expected = {(shape, method) for shape in ("counts", "median") for method in selection.METHODS}
    assert {(row.shape, row.method) for row in rows} == expected
    assert all(row.d == selection.QUICK_D and row.ours > 0 for row in rows)
    assert len(table) == 1 + len(expected)  # header and one row each
    for shape, method in expected:
        assert any(
            line.startswith(f"| {shape} | {selection.QUICK_D:,d} | {method} |") for line in table
        )


def test_median_utilities_match_direct_counts() -> None:
    grid = np.linspace(0.0, 4.0, 9)
    # Ties with grid points, both bounds and repeated values are the cases the histogram must get.
    values = np.array([0.0, 0.0, 0.3, 0.5, 1.0, 1.0, 1.2, 2.5, 3.99, 4.0])

    scores = selection.median_utilities(values, grid)

    less = (values[None, :] < grid[:, None]).sum(axis=1)
    greater = (values[None, :] > grid[:, None]).sum(axis=1)
    assert scores.dtype == np.int64
    assert scores.tolist() == (-np.abs(less - greater)).tolist()


def test_median_scores_peak_inside_the_grid() -> None:
    scores = selection.median_scores(101, num_values=1_001)

    assert scores.shape == (101,) and scores.max() <= 0
    assert 0 < int(scores.argmax()) < 100
