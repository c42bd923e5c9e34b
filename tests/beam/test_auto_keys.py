"""``max_keys_per_unit="auto"``: the keys-per-unit histogram, the re-bounding, the budget per
key at the chosen number of keys, the records and ledger, and the refusals."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from choice_helpers import spy_on_choices, worst_loss_over_one_count

from beam_dp.accounting import PrivacyBudget
from beam_dp.batching import KEY, UNIT, VALUE
from beam_dp.beam._grid import keys_per_unit_histogram, rebound_keys
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.mechanisms import InsecureRandomWarning
from beam_dp.release import ledger_entries_to_record

pytestmark = pytest.mark.filterwarnings("ignore", category=InsecureRandomWarning)

KEYS = [f"k{i}" for i in range(8)]


@pytest.fixture
def run(collect: Any) -> Any:
    """``run(build)``: the releases ``build(pipeline)`` outputs (in-process runner)."""
    return lambda build: [element for element, _ in collect(build)]


def _batch(units: list[int], keys: list[int]) -> dict[str, Any]:
    return {
        UNIT: np.array(units, dtype=np.int64).view(np.uint64),
        KEY: np.array(keys, dtype=np.int64),
        VALUE: np.arange(len(units), dtype=np.float64),
    }


def test_each_unit_adds_one_count_of_its_distinct_keys() -> None:
    batch = _batch([1, 1, 1, 2, 3, 3, 3, 3], [0, 0, 5, 4, 1, 2, 3, 6])
    histogram = keys_per_unit_histogram(batch, cap=3)
    # unit 1: keys {0, 5} -> 2; unit 2: {4} -> 1; unit 3: four keys, capped at 3
    assert histogram.tolist() == [0, 1, 1, 1]
    without_unit_3 = _batch([1, 1, 1, 2], [0, 0, 5, 4])
    difference = histogram - keys_per_unit_histogram(without_unit_3, cap=3)
    assert int(np.abs(difference).sum()) == 1  # a neighbour moves the histogram by one count
    assert keys_per_unit_histogram(_batch([], []), cap=3).tolist() == [0, 0, 0, 0]


def test_rebound_keys_keeps_a_uniform_subset_of_each_units_keys_and_all_their_rows() -> None:
    units = [7] * 12
    keys = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    kept_sets = []
    for salt in range(400):
        kept = rebound_keys(_batch(units, keys), 2, salt)
        kept_keys = kept[KEY]
        assert len(set(kept_keys.tolist())) == 2
        assert all((kept_keys == k).sum() == 3 for k in set(kept_keys.tolist()))  # every row
        kept_sets.append(tuple(sorted(set(kept_keys.tolist()))))
    frequencies = {pair: kept_sets.count(pair) for pair in set(kept_sets)}
    assert len(frequencies) == 6  # every pair of the 4 keys occurs
    assert max(frequencies.values()) < 2 * min(frequencies.values())


def _data(seed: int = 1) -> list[pa.RecordBatch]:
    """3 000 people with 1 or 2 of 8 keys each, 3 rows per key: the values of key ``i`` are in
    [i, i + 1). Batches of 500 rows in a shuffled order (a person's rows span batches)."""
    rng = np.random.default_rng(seed)
    users, keys, values = [], [], []
    for user in range(3000):
        for key in rng.choice(8, size=int(rng.integers(1, 3)), replace=False):
            for _ in range(3):
                users.append(user)
                keys.append(KEYS[key])
                values.append(float(key) + rng.random())
    order = rng.permutation(len(users))
    columns = {"value": np.array(values), "user": np.array(users), "key": np.array(keys)}
    return [
        pa.record_batch({name: column[order[i : i + 500]] for name, column in columns.items()})
        for i in range(0, len(users), 500)
    ]


# The grid of the tests that look only at the key choice, the re-bound and the budget split
# (not at a released value's accuracy): the quantile default (10^6 points) costs about 2 s of
# exact sampling per key and release, and none of what they check depends on the grid's size
# (the keys' histogram, the choice and the re-bound run before the release, on the same path).
SMALL_GRID = 1_001


def _per_key(cls: Any, **options: Any) -> Any:
    base: dict[str, Any] = {
        "lower": 0.0,
        "upper": 10.0,
        "unit_column": "user",
        "key_column": "key",
        "keys": KEYS,
        "epsilon": 1.0,
        "max_contributions": 3,
        "max_keys_per_unit": "auto",
    }
    return cls.PerKey(**{**base, **options})


def test_auto_keys_chooses_few_keys_and_each_key_gets_the_window_budget_over_them(run: Any) -> None:
    batches = _data()
    releases = run(
        lambda p: p | beam.Create(batches) | _per_key(PrivateMedian, num_points=SMALL_GRID)
    )
    assert sorted(r.key for r in releases) == KEYS
    chosen = {int(r.ledger.contribution_bounds["max_keys_per_unit"]) for r in releases}
    assert len(chosen) == 1  # one choice per window, shared by every key
    (k,) = chosen
    assert k == 2  # people hold 1 or 2 keys: the 0.9-quantile is 2 (8 at the cap)
    for release in releases:
        bounds = release.ledger.contribution_bounds
        assert bounds["max_keys_per_unit_cap"] == 8 and bounds["max_contributions_per_unit"] == 3
        assert release.ledger.epsilon == pytest.approx(1.0 / k)
        accuracy = release.accuracy
        assert accuracy["epsilon_bound_choice"] + accuracy["epsilon_statistic"] == pytest.approx(
            1.0 / k
        )
        assert accuracy["epsilon_bound_choice"] == pytest.approx(0.1 / k)
        index = KEYS.index(release.key)
        assert index <= float(release.value) <= index + 1  # the key's own values
    # The ledger charges the k keys a person can reach: the window's budget, no more.
    entries = ledger_entries_to_record(releases)
    assert sum(entry.epsilon for entry in entries) == pytest.approx(1.0)


def test_auto_keys_under_zcdp_fits_each_keys_rho_and_the_mean_takes_it_too(run: Any) -> None:
    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("q", mechanism="exponential", epsilon=1.0, rounds=5)  # 1 + 2 x 2 ends
    transform = _per_key(
        PrivateQuantiles, quantiles=[0.25, 0.75], epsilon=share, method="exponential"
    )
    auto = transform._spec.auto
    assert auto is not None and auto.target == "keys" and auto.per_bound is not None
    window_rho = Fraction(share.rho)
    for k, part in auto.per_bound.items():
        assert part.key_rho is not None and part.statistic_rho is not None
        assert part.key_rho <= window_rho / k
        assert part.statistic_rho + part.bound_rho <= part.key_rho * (1 + Fraction(1, 10**12))
        assert auto.choice_epsilon <= part.bound_epsilon * k  # every K's account covers it
    batches = _data(2)
    releases = run(lambda p: p | beam.Create(batches) | _per_key(PrivateMean))
    assert {int(r.ledger.contribution_bounds["max_keys_per_unit"]) for r in releases} == {2}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_contributions": "auto"}, "not both"),
        ({"bound_cap": 16}, "'bound_cap' applies only with max_contributions='auto'"),
        ({"unit_column": None, "record_level": True}, "needs a 'unit_column'"),
        ({"keys": ["only"]}, "at least 2 public keys"),
    ],
)
def test_auto_keys_refusals_name_the_parameter_and_the_rule(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _per_key(PrivateMedian, **options)


def test_auto_keys_on_a_globally_transform_is_refused() -> None:
    with pytest.raises(ValueError, match=r"applies only to \.PerKey"):
        PrivateMedian.Globally(
            lower=0.0, upper=1.0, unit_column="u", epsilon=1.0, max_keys_per_unit="auto"
        )


def test_the_key_choice_sees_one_count_per_unit_and_its_exact_pmf_loses_at_most_its_epsilon(
    run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The wiring feeds ``choose_bound`` one count per unit (its distinct keys, capped) at
    ``counts_per_unit=1`` and ``bound_share`` of the window's epsilon; the exact pmf of that
    choice then loses at most that epsilon when any one unit (any key count) is removed or
    added."""
    seen = spy_on_choices(monkeypatch, tmp_path / "spy")
    batches = _data(3)
    run(
        lambda p: (
            p | beam.Create(batches) | _per_key(PrivateMedian, epsilon=2.0, num_points=SMALL_GRID)
        )
    )
    ((counts, kwargs),) = seen()
    assert counts.size == 9 and counts.sum() == 3000  # one count per person, keys capped at 8
    assert counts[1] + counts[2] == 3000  # everyone holds 1 or 2 keys
    assert kwargs["counts_per_unit"] == 1
    assert kwargs["epsilon"] == Fraction(1, 5)  # bound_share (1/10) of the window's 2.0

    worst = worst_loss_over_one_count(counts, kwargs)
    assert 0 < worst <= float(kwargs["epsilon"]) + 1e-9


def test_auto_keys_with_refine_is_refused_naming_the_option() -> None:
    with pytest.raises(ValueError, match="max_keys_per_unit='auto' does not combine with refine"):
        _per_key(PrivateMedian, refine=True)


def test_the_keys_re_bound_uses_the_runs_salt_when_one_is_given(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A given salt makes the re-bound reproducible (the rows' re-bound already was); the old
    code drew a fresh salt here, so two runs with one salt kept different keys of a person."""
    import beam_dp.beam._grid as grid

    salts: list[int] = []

    def recording(batch: Any, max_keys_per_unit: int, salt: int) -> Any:
        salts.append(salt)
        return rebound_keys(batch, max_keys_per_unit, salt)

    monkeypatch.setattr(grid, "rebound_keys", recording)
    batches = _data()[:2]
    run(
        lambda p: (
            p | beam.Create(batches) | _per_key(PrivateMedian, salt=424242, num_points=SMALL_GRID)
        )
    )
    assert salts and set(salts) == {424242}
    salts.clear()
    run(lambda p: p | beam.Create(batches) | _per_key(PrivateMedian, num_points=SMALL_GRID))
    assert salts and len(set(salts)) == 1  # no salt given: one fresh salt for the run
