"""Smoke run of benchmarks/quantile_intervals.py at --quick, and the two anchors' basics."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import drechsler, postri, quantile_intervals  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::beam_dp.mechanisms.InsecureRandomWarning")


def test_quick_run_prints_every_method_and_a_verdict_per_cell() -> None:
    lines = quantile_intervals.main(["--quick"])
    rows = [
        line for line in lines if line.startswith("| continuous") or line.startswith("| integer")
    ]
    methods = {line.split(" | ")[2] for line in rows}
    assert {"PostRI, even split", "PostRI, optimal split", "Drechsler et al."} <= methods
    assert any(name.startswith("ours, f = 1/2 (replace)") for name in methods)
    assert sum(line.startswith("- ") for line in lines) == 2 * 3  # two cells, three verdicts


def test_median_set_holds_both_middle_values() -> None:
    assert quantile_intervals.median_set(np.array([5, 1, 3, 9])) == (3.0, 5.0)
    assert quantile_intervals.median_set(np.array([5, 1, 3])) == (3.0, 3.0)
    assert quantile_intervals.distance(4.0, (3.0, 5.0)) == 0.0
    assert quantile_intervals.distance(7.0, (3.0, 5.0)) == 2.0


def test_postri_brackets_the_median_and_maps_ties_back() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 50, 400)
    medians = quantile_intervals.median_set(values)
    covered = 0
    for _ in range(20):
        result = postri.postri(values, 0, 100, epsilon=2.0, rng=rng)
        assert 0 <= result.lower <= result.median <= result.upper <= 100
        covered += result.lower <= medians[0] and medians[1] <= result.upper
    assert covered >= 18


def test_postri_optimal_split_gives_the_median_the_larger_share() -> None:
    eps_1 = postri.optimal_split(1.0, 10**6, 0.05)
    assert 0.5 < eps_1 < 0.6
    step = max(int(2 / (1.0 - eps_1)), 1)
    ratio = math.sqrt(math.log(10**6 / 0.025) / math.log(10**6 / (step * 0.025)))
    assert eps_1 == pytest.approx((1.0 - eps_1) * ratio)


def test_drechsler_interval_brackets_the_median() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(50, 10, 500)
    medians = (float(np.sort(values)[249]), float(np.sort(values)[250]))
    for _ in range(10):
        result = drechsler.drechsler_interval(values, 0.0, 100.0, epsilon=2.0, rng=rng)
        assert 0.0 <= result.lower <= medians[0] and medians[1] <= result.upper <= 100.0
