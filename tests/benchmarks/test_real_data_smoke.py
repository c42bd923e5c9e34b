"""Smoke run of benchmarks/real_data.py at --quick (no peers, synthetic stand-in for flights)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import real_data  # noqa: E402


def test_quick_run_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    lines = real_data.main(["--quick"])
    out = capsys.readouterr().out
    assert "### Auto-bound rules" in out and "### Median and quartiles" in out
    assert "### Mean" in out
    assert "### KS CDF" in out and "### Median with defaults" in out
    means = [line for line in lines if line.startswith("| synthetic integer (mean")]
    assert len(means) == 1 and means[0].count("bias") == len(real_data.MEAN_BOUNDS)
    for name in ("flights-like arr_delay", "synthetic lognormal", "synthetic integer"):
        assert any(line.startswith(f"#### {name}") for line in lines)
    ours = [line for line in lines if line.startswith("| beam-dp median | auto | resolution")]
    assert len(ours) == 2  # the two integer datasets
    for line in ours:  # the auto bounds chosen, one per run (two runs at --quick)
        chosen = line.rstrip(" |").rsplit("|", 1)[1].split(",")
        assert sum(int(item.split("x")[1]) for item in chosen) == 2


def test_uniform_bounding_keeps_at_most_the_bound_per_unit() -> None:
    units = np.repeat(np.arange(5), [1, 3, 10, 2, 7])
    data = real_data.Dataset("t", units, np.arange(units.size, dtype=float), 0, 100, True)
    rng = np.random.default_rng(0)
    kept = real_data.bound_uniformly(data, 3, rng)
    assert np.bincount(units[kept]).tolist() == [1, 3, 3, 2, 3]
    # Uniform over a unit's rows: each of unit 2's ten rows is kept about 3/10 of the time.
    hits = np.zeros(units.size)
    for _ in range(2000):
        hits[real_data.bound_uniformly(data, 3, rng)] += 1
    assert np.all(np.abs(hits[units == 2] / 2000 - 0.3) < 0.05)


def test_rank_error_counts_ties() -> None:
    data = real_data.Dataset("t", np.arange(6), np.array([1, 2, 2, 2, 2, 9.0]), 0, 10, True)
    assert data.truth(0.5) == 2 and data.rank_error(2.0, 0.5) == 0
    assert data.rank_error(9.0, 0.5) == 2  # #(x < 9) = 5, target 3
