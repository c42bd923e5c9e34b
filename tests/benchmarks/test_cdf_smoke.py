"""Smoke run of benchmarks/cdf.py at --quick: every section prints its table (no timings)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import cdf  # noqa: E402


def test_quick_run_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    cdf.main(["--quick"])
    out = capsys.readouterr().out
    for heading in ("## Speed", "## Scaling", "## Utility"):
        assert heading in out
    rows = [line for line in out.splitlines() if line.startswith("| lognormal |")]
    assert len(rows) == 2 + 1  # two sizes of n, and the slope row
    for header in ("KS mechanism", "noisy histogram (isotonic)", "recursive quantiles"):
        assert header in out
    skipped = "OpenDP not importable" in out
    assert skipped == (importlib.util.find_spec("opendp") is None)


def test_cumulative_counts_snap_values_up_to_the_grid() -> None:
    # grid 0, 5, 10, 15, 20: 2.5 counts at 5, 20.0 and values above at 20, below 0 at 0
    counts = cdf.cumulative_counts(np.array([-1.0, 0.0, 2.5, 5.0, 19.0, 25.0]), 5)
    assert counts == [2, 4, 4, 4, 6]


def test_noisy_histogram_is_a_cdf() -> None:
    released = cdf.noisy_histogram_cdf([3, 3, 10, 12], epsilon=1.0)
    assert np.all(np.diff(released) >= 0) and released[-1] == pytest.approx(1.0)
    assert cdf.ks_at_grid([3, 3, 10, 12], np.array([0.25, 0.25, 10 / 12, 1.0])) == 0.0


def test_isotonic_fit_is_the_monotone_least_squares_fit() -> None:
    fitted = cdf.isotonic(np.array([0.1, 0.3, 0.2, 0.6, 0.5, 0.5, 0.9]))
    np.testing.assert_allclose(fitted, [0.1, 0.25, 0.25, 8 / 15, 8 / 15, 8 / 15, 0.9])
    released = cdf.noisy_isotonic_cdf([3, 3, 10, 12], epsilon=1.0)
    assert np.all(np.diff(released) >= 0) and released[-1] == 1.0 and released[0] >= 0.0


def test_quantiles_read_as_a_cdf() -> None:
    grid = cdf.Grid.uniform(cdf.LOWER, cdf.UPPER, 21)
    values = np.random.default_rng(2).uniform(2.0, 18.0, 3_000)
    counts = cdf.cumulative_counts(values, 21)
    q = cdf.quantile_count(21, 3_000, 1.0)
    assert q + 1 in {2**h for h in cdf.QUANTILE_DEPTHS}
    released = cdf.quantiles_cdf(cdf.snapped_slots(counts, grid), q, 1.0, grid)
    assert np.all(np.diff(released) >= 0) and released[-1] == 1.0
    levels = {(2 * j + 1) / (2 * (q + 1)) for j in range(q + 1)}
    assert all(any(abs(v - level) < 1e-12 for level in levels) for v in released[:-1])
    assert cdf.ks_at_grid(counts, released) < 0.5
