"""Quantile intervals are far from calibrated (issue 38 item 2), kept as a strict xfail.

Issue 38 asks that the coverage of a 0.90 (0.95) interval lie within [nominal, nominal + 0.03]
on continuous data, not at 1.000. The rank bracket's shift pays ``ln(n - 1)`` for the ``n``
candidates of each end (a union bound tight only when the data leave an empty stretch of the
grid just past the quantile), so on continuous data every interval covers: measured 300/300
at both levels, shifts 70 / 74 ranks of 2 000 where about 14 would give the nominal level
(benchmarks/RESULTS.md, "Real panels"). This test measures the upper side with an exact
binomial test and fails today; it passes, and the strict xfail then fails the suite, once the
intervals are calibrated: remove the marker then. The shift cannot simply be made smaller:
tests/test_interval_worst_case_issue38.py computes exactly that the plan's shift is attained on
the worst data, and that a shift nominal on continuous data fails on two-mode data.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles.intervals import (
    DEFAULT_INTERVAL_FRACTION,
    plan_intervals,
    select_intervals,
)

#: Releases per level: enough that full coverage is refuted at FPR (0.93^250, 0.98^800 < 1e-6).
RELEASES = {0.90: 250, 0.95: 800}
ROWS = 2000
GRID = Grid.uniform(0.0, 100.0, 10_001)  # minutes to the hundredth


def _median_set(values: np.ndarray) -> tuple[float, float]:
    ordered = np.sort(values)
    return float(ordered[-(-ordered.size // 2) - 1]), float(ordered[ordered.size // 2])


def not_above(covered: int, releases: int, highest: float) -> bool:
    """False only if ``covered`` is above what coverage ``highest`` gives w.p. ``FPR``."""
    return bool(stats.binom.sf(covered - 1, releases, highest) >= FPR)


@pytest.mark.xfail(strict=True, reason="issue 38 item 2: intervals cover ~1.000 at 0.90")
@pytest.mark.parametrize("confidence", [0.90, 0.95])
def test_continuous_coverage_at_most_nominal_plus_three_points(confidence: float) -> None:
    rng = np.random.default_rng(38)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        source = InsecureSeededRandom(38)
    plan = plan_intervals(
        [0.5], grid=GRID, epsilon=Fraction(1) * DEFAULT_INTERVAL_FRACTION, confidence=confidence
    )
    covered = 0
    for _ in range(RELEASES[confidence]):
        values = np.clip(np.round(rng.normal(30.0, 12.0, ROWS), 2), 0.0, 100.0)
        low, high = _median_set(values)
        release = select_intervals(GRID.histogram(values), GRID, plan, None, rng=source)
        ((lower, upper),) = release.bounds
        covered += lower <= low and high <= upper
    assert covered >= 1  # the run released intervals at all
    releases = RELEASES[confidence]
    assert not_above(covered, releases, confidence + 0.03), f"{covered}/{releases} covered"
