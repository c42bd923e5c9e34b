"""``max_contributions="auto"`` on the quantile transforms: validation, wiring, privacy."""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import uuid
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

import beam_dp.beam._grid as combiners
from beam_dp.beam._grid import rebound_rows, rows_per_unit_histogram
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMax, PrivateMedian, PrivateMin, PrivateQuantiles
from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, selection_probabilities
from beam_dp.release import Release
from beam_dp.summaries.contribution_bounds import bound_scores, count_histogram
from beam_dp.summaries.quantiles import plan_mean, plan_quantiles

HUGE = 1e5  # test-only epsilon: the selections are (almost surely) the best candidates

pytestmark = pytest.mark.filterwarnings("ignore", category=InsecureRandomWarning)


class _Collect(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Release) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def _load(directory: str) -> list[Any]:
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            out.append(pickle.load(handle))
    return out


def run(build: Any) -> list[Release]:
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = build(pipeline) | beam.ParDo(_Collect(directory))
        return _load(directory)


def unit_batches(
    values: np.ndarray, users: np.ndarray, size: int = 500, **columns: np.ndarray
) -> list[pa.RecordBatch]:
    order = np.random.default_rng(0).permutation(values.size)
    out = []
    for start in range(0, values.size, size):
        rows = order[start : start + size]
        data = {"value": values[rows], "user": users[rows]}
        data.update({name: column[rows] for name, column in columns.items()})
        out.append(pa.record_batch(data))
    return out


def median(**options: Any) -> PrivateMedian.Globally:
    base: dict[str, Any] = {"lower": 0.0, "upper": 10.0, "unit_column": "user", "epsilon": 1.0}
    return PrivateMedian.Globally(**{**base, **options})


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_contributions": "Auto"}, "'max_contributions' must be an integer >= 1 or 'auto'"),
        ({"max_contributions": "auto", "bound_share": 0.0}, "'bound_share' must be strictly"),
        ({"max_contributions": "auto", "bound_share": 1}, "'bound_share' must be strictly"),
        ({"max_contributions": "auto", "bound_share": math.nan}, "'bound_share' must be"),
        ({"max_contributions": "auto", "bound_alpha": 1.5}, "'bound_alpha' must be strictly"),
        ({"max_contributions": "auto", "bound_cap": 1}, "'bound_cap' must be >= 2"),
        ({"max_contributions": "auto", "bound_cap": 0}, "'bound_cap' must be an integer >= 1"),
        ({"max_contributions": "auto", "bound_rule": "mean"}, "'bound_rule' must be one of"),
        ({"max_contributions": "auto", "bound_rule": "tradeoff"}, "'bound_rule' must be 'quant"),
        ({"max_contributions": 4, "bound_share": 0.2}, "'bound_share' applies only with"),
        ({"bound_cap": 64}, "'bound_cap' applies only with max_contributions='auto'"),
        (
            {"max_contributions": "auto", "unit_column": None, "record_level": True},
            "'auto' needs a 'unit_column'",
        ),
        ({"max_contributions": "auto", "refine": True}, "does not combine with refine=True"),
    ],
)
def test_auto_options_are_validated_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        median(**options)


def test_mean_auto_keeps_the_plans_at_every_bound_and_fixed_stays_as_before() -> None:
    base: dict[str, Any] = {"lower": 0.0, "upper": 10.0, "unit_column": "user", "epsilon": 1.0}
    fixed = PrivateMean.Globally(**base, max_contributions=4)
    assert fixed._spec.auto is None
    assert fixed._spec.plan == plan_mean(
        fixed._spec.plan.grid, epsilon=Fraction(1), relation="add_remove", max_contributions=4
    )
    auto = PrivateMean.Globally(**base, max_contributions="auto")
    spec = auto._spec.auto
    assert spec is not None
    assert (spec.bound_epsilon, spec.statistic_epsilon) == (Fraction(1, 10), Fraction(9, 10))
    for bound, plan in spec.plans.items():
        assert plan == plan_mean(
            auto._spec.plan.grid,
            epsilon=Fraction(9, 10),
            relation="add_remove",
            max_contributions=bound,
        )
    assert auto.display_data()["max_contributions"] == "auto"
    with pytest.raises(ValueError, match="needs a 'unit_column'"):
        PrivateMean.Globally(
            **{**base, "unit_column": None, "record_level": True}, max_contributions="auto"
        )


def test_mean_auto_bounds_the_flooder_and_records_the_choice() -> None:
    """300 units of 8 rows in [0, 2) and one unit with 5000 rows of 9.0: auto chooses 8, so
    the mean stays near 1 (bounded at the cap of 1024 the flooder would pull it to ~3.4)."""
    honest = np.random.default_rng(7).uniform(0, 2, 300 * 8)
    values = np.concatenate([honest, np.full(5000, 9.0)])
    users = np.concatenate([np.repeat(np.arange(300), 8), np.full(5000, 10**6)])
    (release,) = run(
        lambda p: (
            p
            | beam.Create(unit_batches(values, users, size=700))
            | PrivateMean.Globally(
                lower=0.0,
                upper=10.0,
                unit_column="user",
                epsilon=HUGE,
                max_contributions="auto",
                num_points=10_001,
            )
        )
    )
    ledger = release.ledger
    assert ledger.statistic == "mean"
    assert ledger.contribution_bounds["max_contributions_per_unit"] == 8
    assert ledger.contribution_bounds["max_contributions_cap"] == 1024
    truth = (honest.sum() + 8 * 9.0) / (honest.size + 8)
    assert abs(release.value - truth) < 0.01
    assert ledger.epsilon == HUGE
    assert ledger.accuracy["epsilon_bound_choice"] == pytest.approx(HUGE / 10)
    assert ledger.accuracy["epsilon_bound_choice"] + ledger.accuracy[
        "epsilon_statistic"
    ] == pytest.approx(HUGE, rel=1e-12)
    # the sensitivity is that of the plan at the chosen bound (8 values per unit): the noisy
    # centred sum's, 8 values of at most (upper - lower) / 2 each
    assert ledger.sensitivity == pytest.approx(8 * 10.0 / 2)


def test_mean_per_key_auto_releases_every_key_at_one_chosen_bound() -> None:
    rng = np.random.default_rng(8)
    users = np.repeat(np.arange(200), 6)
    keys = np.where(np.arange(users.size) % 2 == 0, "a", "b")
    values = rng.uniform(0, 4, users.size)
    releases = run(
        lambda p: (
            p
            | beam.Create(unit_batches(values, users, size=300, key=keys))
            | PrivateMean.PerKey(
                lower=0.0,
                upper=10.0,
                unit_column="user",
                keys=["a", "b", "c"],
                max_keys_per_unit=2,
                epsilon=HUGE,
                max_contributions="auto",
            )
        )
    )
    by_key = {release.key: release for release in releases}
    assert sorted(by_key) == ["a", "b", "c"]
    chosen = {r.ledger.contribution_bounds["max_contributions_per_unit"] for r in releases}
    assert chosen == {4}  # 3 rows per (unit, key): one choice per window, bucket (2, 4]
    for key in ("a", "b"):
        truth = values[keys == key].mean()
        assert abs(by_key[key].value - truth) < 0.05


def test_fixed_bound_keeps_the_plan_and_record_of_before() -> None:
    fixed = median(max_contributions=4, num_points=101)
    assert fixed._spec.auto is None
    assert fixed._spec.bounds == {"max_contributions_per_unit": 4, "max_windows_per_unit": 1}
    assert fixed.plan == plan_quantiles(  # the median's part: its interval took a third
        [Fraction(1, 2)], epsilon=Fraction(2, 3), num_candidates=101, max_contributions=4
    )
    auto = median(max_contributions="auto", num_points=101)
    assert auto._spec.auto is not None
    assert auto._spec.auto.bound_epsilon == Fraction(1, 10)
    assert auto._spec.auto.statistic_epsilon == Fraction(9, 10)
    assert sorted(auto._spec.auto.plans) == [1 << i for i in range(11)]
    assert auto.display_data()["max_contributions"] == "auto"


# -------------------------------------------------------------------- pieces of the graph


def test_rows_per_unit_histogram_counts_unit_key_groups_capped() -> None:
    units = np.array([1, 1, 1, 2, 2, 3, 3, 3, 3, 3], dtype=np.uint64)
    keys = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0, 0], dtype=np.int64)
    histogram = rows_per_unit_histogram({"unit": units, "key": keys}, cap=4)
    # groups: (1,0)=2, (1,1)=1, (2,0)=2, (3,0)=5 -> capped at 4
    assert histogram.tolist() == [0, 1, 2, 0, 1]
    assert rows_per_unit_histogram({"unit": units}, cap=4).tolist() == [0, 0, 1, 1, 1]
    assert rows_per_unit_histogram({}, cap=4).tolist() == [0] * 5


def test_rebound_rows_keeps_b_rows_per_unit_key() -> None:
    units = np.repeat(np.arange(5, dtype=np.uint64), 40)
    batch = {"unit": units, "value": np.arange(200, dtype=np.float64)}
    kept = rebound_rows(batch, 8, salt=3)
    assert np.bincount(kept["unit"].astype(np.int64)).tolist() == [8] * 5
    assert rebound_rows({}, 8, salt=3) == {}


# ----------------------------------------------------------------------------- pipelines


def test_bound_is_chosen_from_the_rows_per_unit_histogram() -> None:
    """Units of 8 rows choose 8; units of 20 rows choose 32 (their bucket (16, 32])."""
    for rows, expected in ((8, 8), (20, 32)):
        users = np.repeat(np.arange(300), rows)
        values = np.random.default_rng(rows).uniform(0, 10, users.size)
        (release,) = run(
            lambda p, values=values, users=users: (
                p
                | beam.Create(unit_batches(values, users))
                | median(epsilon=HUGE, max_contributions="auto", num_points=1001)
            )
        )
        bounds = release.ledger.contribution_bounds
        assert bounds["max_contributions_per_unit"] == expected
        assert bounds["max_contributions_cap"] == 1024


def test_chosen_bound_bounds_the_rows_and_the_epsilon_parts_sum() -> None:
    """300 units of 8 rows in [0, 2) and one unit with 5000 rows of 9.0: auto chooses 8, so
    the flooder keeps 8 rows and the 0.99-quantile stays below 2 (24 or more rows of 9.0
    would put it at 9.0; bounded at the cap of 1024 it would be 9.0)."""
    honest = np.random.default_rng(6).uniform(0, 2, 300 * 8)
    values = np.concatenate([honest, np.full(5000, 9.0)])
    users = np.concatenate([np.repeat(np.arange(300), 8), np.full(5000, 10**6)])
    (release,) = run(
        lambda p: (
            p
            | beam.Create(unit_batches(values, users, size=700))
            | PrivateQuantiles.Globally(
                [0.5, 0.99],
                lower=0.0,
                upper=10.0,
                unit_column="user",
                epsilon=HUGE,
                max_contributions="auto",
                num_points=10_001,
            )
        )
    )
    assert release.ledger.contribution_bounds["max_contributions_per_unit"] == 8
    assert release.value[1] < 2.0
    ledger = release.ledger
    assert ledger.epsilon == HUGE
    assert ledger.accuracy["epsilon_bound_choice"] + ledger.accuracy[
        "epsilon_statistic"
    ] == pytest.approx(HUGE, rel=1e-12)
    assert ledger.accuracy["epsilon_bound_choice"] == pytest.approx(HUGE / 10)
    # The accuracy statement is that of the plan at the chosen bound and the statistic's part.
    plan = plan_quantiles(
        [Fraction(1, 2), Fraction(99, 100)],
        epsilon=Fraction(HUGE) * Fraction(9, 10) * Fraction(2, 3),  # less the interval's third
        num_candidates=10_001,
        max_contributions=8,
    )
    assert ledger.accuracy["rank_error"] == pytest.approx(plan.rank_error)
    assert ledger.sensitivity == pytest.approx(float(plan.sensitivity))


def test_per_key_wiring_feeds_the_unit_key_histogram_with_m_times_the_sensitivity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each unit has rows in 3 keys, bounded to m = 2 keys: the choice must see one count per
    kept (unit, key), spend share * epsilon (m keys' shares) and multiply the sensitivity by m.
    The exact pmf of that choice then loses at most share * epsilon between neighbours
    (a unit's m counts removed); with the sensitivity of one count per unit it would not."""
    seen_dir = tempfile.mkdtemp()
    real = combiners.choose_bound

    def spy(counts: Any, **kwargs: Any) -> Any:
        with open(os.path.join(seen_dir, uuid.uuid4().hex), "wb") as handle:
            pickle.dump((np.asarray(counts), kwargs), handle)
        return real(counts, **kwargs)

    monkeypatch.setattr(combiners, "choose_bound", spy)
    rng = np.random.default_rng(2)
    rows_per_key = rng.integers(1, 6, size=(40, 3))  # unit u, key k: rows
    users = np.repeat(np.repeat(np.arange(40), 3), rows_per_key.ravel())
    keys = np.repeat(np.tile(np.array(["a", "b", "c"]), 40), rows_per_key.ravel())
    values = rng.uniform(0, 10, users.size)
    epsilon = 1.0
    releases = run(
        lambda p: (
            p
            | beam.Create(unit_batches(values, users, size=50, key=keys))
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=10.0,
                unit_column="user",
                epsilon=epsilon,
                keys=["a", "b", "c"],
                max_keys_per_unit=2,
                max_contributions="auto",
                bound_cap=8,
                num_points=101,
                rng=InsecureSeededRandom(5),
            )
        )
    )
    assert len(releases) == 3
    assert {r.ledger.contribution_bounds["max_keys_per_unit"] for r in releases} == {2}
    ((counts, kwargs),) = _load(seen_dir)
    # 40 units, each with exactly 2 kept keys: 80 (unit, key) counts, each in [1, 5].
    assert counts.size == 9 and counts.sum() == 80 and counts[0] == 0
    assert counts[6:].sum() == 0
    assert kwargs["counts_per_unit"] == 2
    assert kwargs["epsilon"] == Fraction(1, 10)  # share * (epsilon / m) * m
    for release in releases:  # each key's record: its share and its part sum to its epsilon
        parts = (
            release.ledger.accuracy["epsilon_bound_choice"]
            + release.ledger.accuracy["epsilon_statistic"]
        )
        assert parts == pytest.approx(release.ledger.epsilon) == pytest.approx(epsilon / 2)

    # Privacy of the composed choice, by exact pmfs over neighbours: remove any one unit's
    # two counts (add/remove). A unit with counts (c1, c2) moves two entries of the histogram.
    budget = float(kwargs["epsilon"])

    def pmf(histogram: np.ndarray, per_unit: int) -> np.ndarray:
        scored = bound_scores(histogram, alpha=kwargs["alpha"], relation="add_remove")
        return selection_probabilities(
            scored.scores,
            epsilon=kwargs["epsilon"],
            sensitivity=scored.scaled_sensitivity * per_unit,
            method=kwargs["method"],
        )

    worst_ratio, worst_move = 0.0, Fraction(0)
    single = bound_scores(counts, alpha=kwargs["alpha"]).scaled_sensitivity  # one count
    for c1 in range(1, 9):
        for c2 in range(1, 9):
            neighbour = counts - count_histogram([c1, c2], cap=8)
            if neighbour.min() < 0:
                neighbour = counts + count_histogram([c1, c2], cap=8)  # add such a unit
            ratio = np.max(np.abs(np.log(pmf(counts, 2) / pmf(neighbour, 2))))
            worst_ratio = max(worst_ratio, float(ratio))
            move = np.max(
                np.abs(
                    bound_scores(counts, alpha=kwargs["alpha"]).scores
                    - bound_scores(neighbour, alpha=kwargs["alpha"]).scores
                )
            )
            worst_move = max(worst_move, Fraction(int(move)))
    assert worst_ratio <= budget + 1e-9
    # The utility really moves by more than one count's sensitivity (up to m of them): a
    # choice calibrated to one count per unit would not be share * epsilon-DP.
    assert single < worst_move <= 2 * single


def test_each_window_chooses_its_own_bound() -> None:
    """Fixed windows: units of 2 rows in the first window, of 16 rows in the second; each
    window's histogram chooses its own bound (one unit per window: max_windows_per_unit=1)."""
    rng = np.random.default_rng(4)
    first = unit_batches(rng.uniform(0, 10, 200 * 2), np.repeat(np.arange(200), 2))
    second = unit_batches(rng.uniform(0, 10, 200 * 16), np.repeat(np.arange(1000, 1200), 16))
    timed = [(batch, 1) for batch in first] + [(batch, 15) for batch in second]
    releases = run(
        lambda p: (
            p
            | beam.Create(timed)
            | beam.MapTuple(lambda batch, t: beam.window.TimestampedValue(batch, t))
            | beam.WindowInto(beam.window.FixedWindows(10))
            | median(epsilon=HUGE, max_contributions="auto", num_points=101)
        )
    )
    chosen = sorted(
        (r.window, r.ledger.contribution_bounds["max_contributions_per_unit"]) for r in releases
    )
    assert [bound for _, bound in chosen] == [2, 16]


def test_sliding_windows_each_get_a_chosen_bound() -> None:
    rng = np.random.default_rng(5)
    batches = unit_batches(rng.uniform(0, 10, 100 * 4), np.repeat(np.arange(100), 4))
    releases = run(
        lambda p: (
            p
            | beam.Create([(batch, 5) for batch in batches])
            | beam.MapTuple(lambda batch, t: beam.window.TimestampedValue(batch, t))
            | beam.WindowInto(beam.window.SlidingWindows(20, 10))
            | median(epsilon=HUGE, max_contributions="auto", num_points=101, max_windows_per_unit=2)
        )
    )
    assert len(releases) == 2  # the two windows holding t = 5
    assert {r.ledger.contribution_bounds["max_contributions_per_unit"] for r in releases} == {4}


def test_min_max_take_auto_and_an_empty_input_still_releases() -> None:
    users = np.repeat(np.arange(200), 4)
    values = np.random.default_rng(8).uniform(0, 10, users.size)
    for namespace in (PrivateMin, PrivateMax):
        (release,) = run(
            lambda p, namespace=namespace: (
                p
                | beam.Create(unit_batches(values, users))
                | namespace.Globally(
                    lower=0.0,
                    upper=10.0,
                    unit_column="user",
                    epsilon=HUGE,
                    max_contributions="auto",
                    num_points=101,
                )
            )
        )
        assert release.ledger.contribution_bounds["max_contributions_per_unit"] == 4
    # No input at all: the global window still releases (the choice sees an empty histogram).
    (empty,) = run(
        lambda p: (
            p
            | beam.Create([], reshuffle=False).with_output_types(pa.RecordBatch)
            | median(max_contributions="auto", num_points=11)
        )
    )
    assert empty.ledger.contribution_bounds["max_contributions_per_unit"] in [
        1 << i for i in range(11)
    ]


@pytest.mark.parametrize(("method", "rate"), [("exponential", 8), ("permute_and_flip", 2)])
def test_zcdp_share_the_two_rhos_fit_each_release_and_the_choice_spends_the_rest(
    method: str, rate: int
) -> None:
    """Under zCDP the rho of the statistic (at 1 - share of the release's epsilon, over its
    rounds) and of the choice (one selection per window for the m keys) sum to the share."""
    from beam_dp.accounting import PrivacyBudget

    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("q", mechanism=method, epsilon=0.8, rounds=5)  # 1 + 2 x 2 ends
    transform = PrivateQuantiles.PerKey(
        [0.25, 0.75],
        lower=0.0,
        upper=10.0,
        unit_column="user",
        keys=["a", "b", "c"],
        max_keys_per_unit=2,
        epsilon=share,
        method=method,
        max_contributions="auto",
        num_points=101,
    )
    auto = transform._spec.auto
    assert auto is not None and auto.bound_rho is not None and auto.statistic_rho is not None
    rho_key = Fraction(transform._spec.rho)  # type: ignore[arg-type]
    rounds = transform.rounds
    statistic = Fraction(1, rate) * auto.statistic_epsilon**2 / rounds
    choice = Fraction(1, rate) * auto.choice_epsilon**2  # one selection, sensitivity x m
    assert auto.statistic_rho == statistic
    # per unit and window: m keys' statistics and the one choice, within m keys' rho
    assert 2 * statistic + choice <= 2 * rho_key
    assert 2 * statistic + choice >= 2 * rho_key * (1 - Fraction(1, 10**9))  # and all of it
    assert auto.statistic_epsilon == Fraction(transform._spec.epsilon) * Fraction(9, 10)
    assert 2 * rho_key <= Fraction(share.rho)  # type: ignore[arg-type]
    # the statistic's rho is shared by the quantiles and their intervals, all of it
    parts = transform._spec.interval_budget
    assert parts is not None and parts.quantile_rho is not None and parts.interval_rho is not None
    assert parts.quantile_rho + parts.interval_rho == statistic
    assert parts.interval_rho == statistic / 3


def test_zcdp_mean_auto_the_two_rhos_fit_the_release() -> None:
    from beam_dp.accounting import PrivacyBudget

    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("m", mechanism="exponential", epsilon=0.8, rounds=1)
    transform = PrivateMean.Globally(
        lower=0.0,
        upper=10.0,
        unit_column="user",
        epsilon=share,
        method="exponential",
        estimator="selection",
        max_contributions="auto",
    )
    auto = transform._spec.auto
    assert auto is not None and auto.bound_rho is not None and auto.statistic_rho is not None
    rho = Fraction(transform._spec.rho)  # type: ignore[arg-type]
    statistic = Fraction(1, 8) * auto.statistic_epsilon**2  # one round
    choice = Fraction(1, 8) * auto.choice_epsilon**2
    assert auto.statistic_rho == statistic
    assert statistic + choice <= rho
    assert statistic + choice >= rho * (1 - Fraction(1, 10**9))
