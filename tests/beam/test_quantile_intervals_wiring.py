"""Issue 27: every quantile release of every transform carries its interval, inside its budget.

Each variant's release holds ``lower <= value <= upper`` for every quantile (and the data's
quantile at a large epsilon); the interval's share comes out of the release's epsilon (rho
under zCDP), never on top; the Beam path's coverage passes the exact binomial check; the CDF's
quantiles carry intervals read from the KS bound at no epsilon.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.accounting import PrivacyBudget
from beam_dp.batching import VALUE
from beam_dp.beam.cdf import CDFValue, PrivateCDF, ks_quantile_interval
from beam_dp.beam.quantiles import PrivateMax, PrivateMedian, PrivateMin, PrivateQuantiles
from beam_dp.io.outputs import read_release_avro, write_outputs
from beam_dp.release import Release, ledger_entries_to_record, release_document
from beam_dp.summaries.histogram import Grid

HUGE = 1e5
VALUES = np.round(np.random.default_rng(27).normal(5.0, 1.0, 3000), 2)


def _run(collect: Any, transform: Any, batches: list[dict[str, Any]]) -> list[Release]:
    return [
        release
        for release, _ in collect(lambda p: p | beam.Create(batches, reshuffle=False) | transform)
    ]


def _batches(values: np.ndarray, keys: np.ndarray | None = None) -> list[dict[str, Any]]:
    batch: dict[str, Any] = {VALUE: values}
    if keys is not None:
        batch["key"] = keys
    return [batch]


def _data_quantiles(values: np.ndarray, alpha: float) -> tuple[float, float]:
    """The data's alpha-quantiles ``[x_(ceil(alpha N)), x_(floor(alpha N) + 1)]``."""
    ordered = np.sort(values)
    n = ordered.size
    return float(ordered[math.ceil(alpha * n) - 1]), float(ordered[math.floor(alpha * n)])


def _check_holds(release: Release, values: np.ndarray) -> None:
    interval = release.interval
    assert interval is not None and interval.method == "rank_bracket"
    points = release.value if isinstance(release.value, list) else [release.value]
    assert len(points) == len(interval.lower) == len(interval.quantiles)
    for alpha, point, lo, hi in zip(
        interval.quantiles, points, interval.lower, interval.upper, strict=True
    ):
        assert lo <= point <= hi
        low, high = _data_quantiles(np.clip(values, 0.0, 10.0), alpha)
        assert lo <= low and high <= hi  # at epsilon 1e5 the bracket misses w.p. ~0
    written = release.to_dict()["interval"]
    assert written["confidence"] == 0.95 and written["method"] == "rank_bracket"
    scalar = not isinstance(release.value, list)
    assert isinstance(written["lower"], float) == scalar
    assert written["quantiles"] == [float(q) for q in interval.quantiles]


COMMON: dict[str, Any] = {
    "lower": 0.0,
    "upper": 10.0,
    "epsilon": HUGE,
    "record_level": True,
    "num_points": 1001,
}
VARIANTS = {
    "quantiles, joint (default)": lambda **o: PrivateQuantiles.Globally([0.25, 0.5, 0.75], **o),
    "quantiles, recursive": lambda **o: PrivateQuantiles.Globally(
        [0.1, 0.5, 0.9], split="recursive", **o
    ),
    "quantiles, independent": lambda **o: PrivateQuantiles.Globally(
        [0.3, 0.6], split="independent", **o
    ),
    "median": lambda **o: PrivateMedian.Globally(**o),
    "min": lambda **o: PrivateMin.Globally(tail=0.05, **o),
    "max": lambda **o: PrivateMax.Globally(tail=0.05, **o),
    "coarse to fine": lambda **o: PrivateQuantiles.Globally(
        [0.25, 0.75], refine=True, refine_points=101, **{**o, "num_points": 101}
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_globally_variant_releases_its_interval(collect: Any, variant: str) -> None:
    (release,) = _run(collect, VARIANTS[variant](**COMMON), _batches(VALUES))
    _check_holds(release, VALUES)
    # the interval's share comes out of the release's epsilon
    assert release.ledger.epsilon == HUGE
    spent = release.interval.epsilon + release.ledger.accuracy["epsilon_quantiles"]  # type: ignore[union-attr]
    assert spent == pytest.approx(HUGE, rel=1e-15)
    assert release.interval.share == pytest.approx(1 / 3)  # type: ignore[union-attr]


def test_per_key_releases_carry_one_interval_each(collect: Any) -> None:
    keys = np.where(np.arange(VALUES.size) % 3 == 0, "a", "b")
    shifted = np.where(keys == "a", VALUES - 2.0, VALUES)
    releases = _run(
        collect,
        PrivateQuantiles.PerKey([0.25, 0.75], keys=["a", "b"], **COMMON),
        _batches(shifted, keys),
    )
    assert sorted(r.key for r in releases) == ["a", "b"]
    for release in releases:
        _check_holds(release, shifted[keys == release.key])


def test_auto_bound_releases_the_interval_at_the_chosen_bound(collect: Any) -> None:
    units = np.arange(VALUES.size) // 3  # three rows per unit
    transform = PrivateMedian.Globally(
        lower=0.0, upper=10.0, epsilon=HUGE, unit_column="u", value_column="v",
        max_contributions="auto", num_points=1001,
    )  # fmt: skip
    rows = [{"u": int(u), "v": float(v)} for u, v in zip(units, VALUES, strict=True)]
    (release,) = [r for r, _ in collect(lambda p: p | beam.Create(rows) | transform)]
    _check_holds(release, VALUES)
    chosen = release.ledger.contribution_bounds["max_contributions_per_unit"]
    assert chosen == 4  # three rows per unit: bucket (2, 4]
    plan, parts = transform._spec.intervals_at[chosen]  # type: ignore[index]
    assert plan.max_contributions == chosen
    assert release.interval.epsilon == float(parts.interval_epsilon)  # type: ignore[union-attr]


def test_interval_false_gives_the_whole_epsilon_to_the_quantiles(collect: Any) -> None:
    transform = PrivateMedian.Globally(interval=False, **COMMON)
    assert transform.rounds == 1 and transform.plan.epsilon == Fraction(HUGE)
    (release,) = _run(collect, transform, _batches(VALUES))
    assert release.interval is None and "interval" not in release.to_dict()
    with pytest.raises(ValueError, match="'interval_share' applies only with interval=True"):
        PrivateMedian.Globally(interval=False, interval_share=0.5, **COMMON)
    with pytest.raises(ValueError, match="'interval_share'"):
        PrivateMedian.Globally(interval_share=1.0, **COMMON)
    with pytest.raises(TypeError, match="'interval' must be a bool"):
        PrivateMedian.Globally(interval="yes", **COMMON)  # type: ignore[arg-type]
    chosen = PrivateMedian.Globally(interval_share=0.25, **COMMON)
    assert chosen.plan.epsilon == Fraction(HUGE) * Fraction(3, 4) and chosen.rounds == 3


def test_the_budget_spent_is_the_epsilon_given() -> None:
    budget = PrivacyBudget(2.0)
    probe = PrivateQuantiles.Globally([0.25, 0.5, 0.75], **{**COMMON, "epsilon": 1.0})
    assert probe.rounds == probe.plan.rounds + 6  # two ends per quantile
    share = budget.spend("q", mechanism="permute_and_flip", epsilon=2.0, rounds=probe.rounds)
    transform = PrivateQuantiles.Globally([0.25, 0.5, 0.75], **{**COMMON, "epsilon": share})
    spec = transform._spec
    assert spec.interval_budget is not None and spec.interval is not None
    assert spec.interval_budget.interval_epsilon + spec.plan.epsilon == Fraction(2)
    assert spec.interval.epsilon == spec.interval_budget.interval_epsilon
    release = spec.release_merged(spec.grid.histogram(VALUES))
    for entry in ledger_entries_to_record([release]):
        budget.record(entry)
    assert budget.spent() == (2.0, 0.0)


@pytest.mark.parametrize("method", ["exponential", "permute_and_flip"])
def test_under_zcdp_the_two_parts_spend_the_release_rho(method: str) -> None:
    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    probe = PrivateMedian.PerKey(keys=["a", "b"], method=method, **{**COMMON, "epsilon": 1.0})
    share = budget.spend("m", mechanism=method, epsilon=1.0, rounds=probe.rounds)
    transform = PrivateMedian.PerKey(keys=["a", "b"], method=method, **{**COMMON, "epsilon": share})
    spec = transform._spec
    parts = spec.interval_budget
    assert parts is not None and parts.interval_rho is not None and parts.quantile_rho is not None
    rate = Fraction(1, 8) if method == "exponential" else Fraction(1, 2)
    assert spec.rho is not None and parts.quantile_rho + parts.interval_rho <= Fraction(spec.rho)
    assert parts.interval_rho == (parts.quantile_rho + parts.interval_rho) / 3
    # each part's selections cost no more than its rho
    assert rate * spec.plan.epsilon**2 / spec.plan.rounds <= parts.quantile_rho
    assert rate * parts.interval_epsilon**2 / 2 <= parts.interval_rho
    releases = [
        dataclass_key(spec.release_merged(spec.grid.histogram(VALUES)), key) for key in "ab"
    ]
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)  # the ledger's checks of rho against epsilon and rounds pass
    assert releases[0].interval is not None and releases[0].interval.rho is not None


def dataclass_key(release: Release, key: str) -> Release:
    import dataclasses

    return dataclasses.replace(release, key=key)


def test_coverage_through_the_transform_passes_the_binomial_check(collect: Any) -> None:
    """300 keys with the same tied, skewed data: each key's median and interval is one
    independent draw of the Beam path; every interval must hold the data's median with the
    stated 95% (exact binomial, false-positive rate 1e-6)."""
    num_keys = 300
    data = np.array([0, 0, 1, 1, 1, 2, 2, 3, 5, 8, 8, 8, 8, 13, 21, 34], dtype=np.float64)
    values = np.tile(data, num_keys)
    keys = np.repeat(np.arange(num_keys), data.size)
    releases = _run(
        collect,
        PrivateMedian.PerKey(
            lower=0.0,
            upper=40.0,
            epsilon=2.0,
            record_level=True,
            keys=list(range(num_keys)),
            num_points=41,
        ),
        _batches(values, keys),
    )
    assert len(releases) == num_keys
    low, high = _data_quantiles(data, 0.5)
    covered = 0
    for release in releases:
        assert release.interval is not None
        lo, hi = release.interval.lower[0], release.interval.upper[0]
        assert lo <= release.value <= hi
        covered += int(lo <= low and high <= hi)
    assert stats.binom.cdf(covered, num_keys, 0.95) >= FPR


def test_a_cdf_quantile_interval_holds_the_data_quantile_when_the_ks_bound_does() -> None:
    grid = Grid.explicit([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    data = np.array([0.5, 1.0, 1.5, 2.2, 2.9, 3.0, 4.1, 4.4, 4.8, 5.0])
    rng = np.random.default_rng(3)
    for _ in range(300):
        # any step CDF within D of the data's (snapped up) CDF at every grid point
        truth = np.array([np.sum(data <= g) for g in grid.points]) / data.size
        k = 20
        distance = 0.15
        noisy = np.clip(truth + rng.uniform(-distance, distance, truth.size), 0, 1)
        counts = np.maximum.accumulate(np.round(noisy * k).astype(int))
        counts[-1] = k
        distance += 1 / (2 * k)  # rounding to k points
        before = [0, *counts[:-1]]
        steps = [float(g) for g, c, p in zip(grid.points, counts, before, strict=True) if c > p]
        kept = [int(c) for c, p in zip(counts, before, strict=True) if c > p]
        value = CDFValue(
            points=(), steps=tuple(steps), counts=tuple(kept), quantiles=(), lower=0.0,
            upper=5.0, k=k, n_hat=data.size, count_released=False,
        )  # fmt: skip
        for alpha in (0.1, 0.3, 0.5, 0.7, 0.9):
            lo, hi = ks_quantile_interval(value, grid, alpha, distance)
            low, high = _data_quantiles(data, alpha)
            assert lo <= low and high <= hi, (alpha, lo, hi, low, high)
            assert lo <= value.quantile(alpha) <= hi


def test_the_cdf_release_carries_its_quantiles_intervals_at_no_epsilon(
    collect: Any, tmp_path: Any
) -> None:
    (release,) = _run(
        collect,
        PrivateCDF.Globally(
            lower=0.0,
            upper=10.0,
            num_points=101,
            epsilon=HUGE,
            record_level=True,
            quantiles=[0.1, 0.5, 0.9],
            n=VALUES.size,
            k=400,
        ),
        _batches(VALUES),
    )
    interval = release.interval
    assert interval is not None and interval.method == "ks_band" and interval.epsilon == 0.0
    for (alpha, point), lo, hi in zip(
        release.value.quantiles, interval.lower, interval.upper, strict=True
    ):
        assert lo <= point <= hi
        low, high = _data_quantiles(np.clip(VALUES, 0, 10), alpha)
        assert lo <= low and high <= hi
    # release.json, release.avro and the report all carry it
    document = release_document([release], PrivacyBudget(HUGE).to_json())
    write_outputs(document, tmp_path / "out")
    back = read_release_avro(tmp_path / "out" / "release.avro")
    assert back["releases"][0]["interval"] == document["releases"][0]["interval"]
    assert "ks_band" in (tmp_path / "out" / "report.html").read_text()


def test_json_avro_and_report_carry_every_quantile_interval(collect: Any, tmp_path: Any) -> None:
    keys = np.where(np.arange(VALUES.size) % 2 == 0, "a", "b")
    median = _run(collect, PrivateMedian.Globally(**COMMON), _batches(VALUES))
    quartiles = _run(
        collect,
        PrivateQuantiles.PerKey([0.25, 0.75], keys=["a", "b"], **{**COMMON, "name": "q"}),
        _batches(VALUES, keys),
    )
    document = release_document([*median, *quartiles], PrivacyBudget(3 * HUGE).to_json())
    write_outputs(document, tmp_path / "out")
    back = read_release_avro(tmp_path / "out" / "release.avro")
    assert back["releases"] == document["releases"]
    first = document["releases"][0]["interval"]
    assert isinstance(first["lower"], float) and first["method"] == "rank_bracket"
    assert isinstance(document["releases"][1]["interval"]["lower"], list)
    page = (tmp_path / "out" / "report.html").read_text()
    # one bar per quantile: the median's and two per key
    assert page.count('class="ci"') == 1 + 2 * 2
