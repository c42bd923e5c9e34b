"""The selection CombineFns driven by hand, and validation at construction (no pipeline runs).

As Beam's own combiner tests do: ``add_input`` per shard, ``merge_accumulators``, ``compact``,
``extract_output``; sharded equals one pass; merging modifies only the first accumulator.
"""

from __future__ import annotations

import math
import pickle
import warnings
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.internal import pickler
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.accounting import PrivacyBudget
from beam_dp.batching import CANDIDATE, UNIT, VALUE
from beam_dp.beam._graph import EMPTY, split_by_key
from beam_dp.beam.key_selection import (
    LABEL,
    KeySelection,
    KeySelectionFn,
    KeySelectionSpec,
    SelectCandidates,
)
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates
from beam_dp.beam.selection_combiners import CandidateCountsFn, RevenueFn
from beam_dp.mechanisms import InsecureSeededRandom, selection_probabilities
from beam_dp.release import Release, ledger_entries_to_record, make_release
from beam_dp.scores import Revenue
from beam_dp.summaries.selection import SelectionSpec

LABELS = ("a", "b", "c", "d")


def spec(**overrides: Any) -> SelectionSpec:
    params: dict[str, Any] = {
        "name": "test",
        "statistic": "top_candidates",
        "method": "permute_and_flip",
        "k": 1,
        "epsilon": 1.0,
        "rho": None,
        "selection_sensitivity": Fraction(1),
        "sensitivity": 1.0,
        "monotone": True,
        "relation": "add_remove",
        "contribution_bounds": {"distinct_candidates": 1},
    }
    params.update(overrides)
    return SelectionSpec(**params)


def batch(candidates: list[int], units: list[int] | None = None) -> dict[str, np.ndarray]:
    out = {CANDIDATE: np.array(candidates, dtype=np.int64)}
    if units is not None:
        out[UNIT] = np.array(units, dtype=np.uint64)
    return out


shards = st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=5)


@given(shards=shards)
@settings(max_examples=60, deadline=None)
def test_counts_fn_over_shards_equals_one_pass(shards: list[list[int]]) -> None:
    fn = CandidateCountsFn(spec(), LABELS)
    accumulators = []
    for shard in shards:
        accumulator = fn.create_accumulator()
        accumulator = fn.add_input(accumulator, batch(shard))
        accumulator = fn.add_input(accumulator, EMPTY)  # empty batches add nothing
        accumulators.append(fn.compact(accumulator))
    rest = [acc.copy() for acc in accumulators[1:]]
    merged = fn.merge_accumulators(accumulators)
    one_pass = fn.add_input(fn.create_accumulator(), batch([c for s in shards for c in s]))
    assert merged.tolist() == one_pass.tolist()
    assert all(a.tolist() == b.tolist() for a, b in zip(accumulators[1:], rest, strict=True))


def test_counts_fn_extracts_a_release_with_the_ledger() -> None:
    fn = CandidateCountsFn(spec(confidence=0.9), LABELS)
    accumulator = fn.add_input(fn.create_accumulator(), batch([0, 0, 0, 1] * 30))
    (release,) = fn.extract_output(accumulator)
    assert isinstance(release, Release) and release.value in LABELS
    assert release.ledger.mechanism == "permute_and_flip"
    assert release.ledger.num_candidates == 4 and release.ledger.accuracy["confidence"] == 0.9
    assert release.key is None and release.window is None


def test_extract_output_samples_from_the_exact_distribution() -> None:
    # The same code path the pipeline runs once, sampled many times on one accumulator.
    from stats_helpers import FPR, chi_square_pvalue

    counts = [3, 1, 0, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rng = InsecureSeededRandom(8)
    fn = CandidateCountsFn(spec(rng=rng, method="exponential"), LABELS)
    accumulator = fn.add_input(
        fn.create_accumulator(), batch([i for i, n in enumerate(counts) for _ in range(n)])
    )
    draws = [fn.extract_output(accumulator)[0].value for _ in range(6000)]
    observed = np.array([draws.count(label) for label in LABELS])
    expected = selection_probabilities(
        counts, epsilon=1.0, sensitivity=1, monotonic=True, method="exponential"
    )
    assert chi_square_pvalue(observed, expected) > FPR
    assert fn.extract_output(accumulator)[0].to_dict()["rng"] == "insecure_seeded_test_generator"


def test_margin_scores_are_plus_and_minus_the_count_difference() -> None:
    fn = CandidateCountsFn(
        spec(selection_sensitivity=Fraction(2), sensitivity=2.0), ("x", "y"), "margin"
    )
    accumulator = fn.add_input(fn.create_accumulator(), batch([0, 0, 0, 1]))
    assert fn._scores(accumulator).tolist() == [2, -2]


@pytest.mark.parametrize("rule", ["min", "max", "mean"])
def test_revenue_fn_reduces_each_unit_then_matches_the_score(rule: str) -> None:
    score = Revenue.default()
    thresholds = np.array([float(p) for p in score.prices])
    scaled = np.array([int(p / score.unit) for p in score.prices], dtype=np.int64)
    labels = tuple(float(p) for p in score.prices)
    fn = RevenueFn(
        spec(sensitivity=1.99, selection_sensitivity=Fraction(199)),
        labels,
        thresholds,
        scaled,
        rule,
    )  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    units = rng.integers(0, 50, 300).astype(np.uint64)
    values = rng.integers(0, 140, 300) / 64  # dyadic: every mean is exact
    # Each shard holds all rows of its units (as after contribution bounding).
    shard = units % 3
    accumulators = [
        fn.add_input(fn.create_accumulator(), {UNIT: units[shard == s], VALUE: values[shard == s]})
        for s in range(3)
    ]
    merged = fn.merge_accumulators(accumulators)
    per_unit = [getattr(np, rule)(values[units == u]) for u in np.unique(units)]
    assert fn._scores(merged).tolist() == score.compute(per_unit).tolist()


def test_revenue_fn_switches_to_exact_python_integers_beyond_int64() -> None:
    # Prices 1 and 10**15 (unit 1): 10**4 buyers at the top price earn 10**19 > 2**63.
    fn = RevenueFn(spec(), (1.0, 1e15), np.array([1.0, 1e15]), np.array([1, 10**15]), None)
    scores = fn._scores(np.array([0, 0, 10**4], dtype=np.int64))
    assert scores.dtype == object and [int(v) for v in scores] == [10**4, 10**19]
    (release,) = fn.extract_output(np.array([0, 0, 10**4], dtype=np.int64))
    assert release.value in (1.0, 1e15)


def test_key_selection_fn_merges_label_counts_and_releases_sorted_labels() -> None:
    ks = KeySelectionSpec(name="sites", epsilon=1.0, delta=1e-9, max_candidates_per_unit=1)
    fn = KeySelectionFn(ks, spec(name="top"))
    first = fn.add_input(
        fn.create_accumulator(), {LABEL: np.array(["z"] * 300 + ["y"] * 200, dtype=object)}
    )
    second = fn.add_input(
        fn.create_accumulator(), {LABEL: np.array(["y"] * 200 + ["rare"], dtype=object)}
    )
    merged = fn.compact(fn.merge_accumulators([first, second]))
    assert merged.to_dict() == {"z": 300, "y": 400, "rare": 1}
    selection, top = fn.extract_output(merged)
    assert selection.value == ["y", "z"] and selection.ledger.mechanism == "partition_selection"
    assert top.value == "y" and top.ledger.num_candidates == 2


def test_split_by_key_keeps_rows_of_each_key_together() -> None:
    rows = {"key": np.array([2, 0, 2, 1, 0]), CANDIDATE: np.arange(5)}
    parts = dict(split_by_key(rows))
    assert sorted(parts) == [0, 1, 2]
    assert parts[0][CANDIDATE].tolist() == [1, 4] and parts[2][CANDIDATE].tolist() == [0, 2]
    assert list(split_by_key(EMPTY)) == []


def test_combine_fns_survive_beam_pickling() -> None:
    fn = CandidateCountsFn(spec(), None)  # labels from a side input
    restored = pickler.loads(pickler.dumps(fn))
    side = ["c", "a", "b"]
    accumulator = restored.add_input(restored.create_accumulator(side), batch([0, 0, 2]), side)
    assert accumulator.tolist() == [2, 0, 1]  # positions in sorted order: a, b, c
    assert restored.extract_output(accumulator, side)[0].ledger.num_candidates == 3
    assert restored.extract_output(restored.create_accumulator([]), []) == []
    assert pickle.loads(pickle.dumps(accumulator)).tolist() == [2, 0, 1]


# --------------------------------------------------------------------------- construction


def top(**overrides: Any) -> TopCandidates.Globally:
    params: dict[str, Any] = {
        "candidate_column": "site",
        "candidates": ["a", "b"],
        "unit_column": "user",
        "epsilon": 1.0,
    }
    params.update(overrides)
    return TopCandidates.Globally(**params)


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"epsilon": float("nan")}, ValueError, "'epsilon' must be > 0 and finite"),
        ({"epsilon": -0.5}, ValueError, "'epsilon'"),
        ({"epsilon": math.inf}, ValueError, "'epsilon'"),
        ({"epsilon": "1"}, TypeError, "'epsilon'"),
        ({"k": 3}, ValueError, "'k' must be at most the number of candidates"),
        ({"k": 0}, ValueError, "'k'"),
        ({"method": "gumbel"}, ValueError, "'method'"),
        ({"relation": "swap"}, ValueError, "'relation'"),
        ({"confidence": 1.0}, ValueError, "'confidence'"),
        ({"candidates": []}, ValueError, "at least one"),
        ({"candidates": ["a", "a"]}, ValueError, "distinct"),
        ({"candidate_column": ""}, ValueError, "'candidate_column'"),
        ({"max_candidates_per_unit": 0}, ValueError, "'max_candidates_per_unit'"),
        ({"num_shards": 0}, ValueError, "'num_shards'"),
        ({"on_bad_record": "ignore"}, ValueError, "'on_bad_record'"),
        ({"candidates": None}, ValueError, "key_selection="),
        ({"key_selection": KeySelection(1.0, 1e-6)}, ValueError, "only when the candidates"),
    ],
)
def test_bad_parameters_fail_at_construction(
    overrides: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        top(**overrides)


def test_key_selection_without_delta_explains_the_choice() -> None:
    with pytest.raises(ValueError, match="needs delta > 0") as info:
        top(candidates=None, key_selection=KeySelection(epsilon=1.0))
    assert "public list" in str(info.value)
    with pytest.raises(ValueError, match="needs delta > 0"):
        SelectCandidates.Globally(candidate_column="site", unit_column="u", epsilon=1.0)
    with pytest.raises(ValueError, match="add_remove"):
        top(candidates=None, relation="replace", key_selection=KeySelection(1.0, 1e-6))


def test_budget_shares_are_checked_against_the_transform() -> None:
    budget = PrivacyBudget(2.0)
    em = budget.request("em", mechanism="exponential")
    pf_top = budget.request("pf_top", mechanism="permute_and_flip_top_k", rounds=2)
    pf_three = budget.request("pf_three", mechanism="permute_and_flip_top_k", rounds=3)
    with pytest.raises(ValueError, match="finalize"):
        top(epsilon=em)
    budget.finalize()
    with pytest.raises(ValueError, match=r"mechanism 'exponential'.*runs 'permute_and_flip'"):
        top(epsilon=em)  # permute-and-flip must never be accounted as the exponential mechanism
    with pytest.raises(ValueError, match="rounds=2"):
        top(epsilon=pf_three, k=2)
    with pytest.raises(ValueError, match="leave 'name' unset"):
        top(epsilon=em, method="exponential", name="other")
    assert top(epsilon=pf_top, k=2).default_label() == "TopCandidates.Globally(pf_top)"


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: BestPrice.Globally(
                value_column="v", unit_column="u", epsilon=1.0, per_unit="median"
            ),
            "'per_unit'",
        ),
        (
            lambda: BestPrice.Globally(
                value_column="v", unit_column="u", epsilon=1.0, prices=[0.5, 0.2]
            ),
            "increasing",
        ),
        (
            lambda: Election.Globally(
                candidate_column="c",
                candidates=["a", "b", "c"],
                unit_column="u",
                epsilon=1.0,
                score="margin",
            ),
            "exactly 2",
        ),
        (
            lambda: Election.Globally(
                candidate_column="c",
                candidates=["a", "b"],
                unit_column="u",
                epsilon=1.0,
                score="approval",
            ),
            "'score'",
        ),
        (
            lambda: ExponentialSelect.Globally(
                object(),
                candidates=["a"],
                epsilon=1.0,
                sensitivity=1,
                monotone=True,
                record_level=True,
            ),
            "CombineFn",
        ),  # type: ignore[arg-type]
        (
            lambda: ExponentialSelect.Globally(
                beam.combiners.CountCombineFn(),
                candidates=["a"],
                epsilon=1.0,
                sensitivity=0,
                monotone=True,
                record_level=True,
            ),
            "'sensitivity'",
        ),
        (
            lambda: TopCandidates.PerKey(
                candidate_column="c",
                candidates=["a"],
                unit_column="u",
                key_column="k",
                keys=[],
                epsilon=1.0,
            ),
            "at least one",
        ),
        (
            lambda: TopCandidates.PerKey(
                candidate_column="c",
                candidates=["a"],
                unit_column="u",
                key_column="k",
                keys=["x"],
                epsilon=1.0,
                max_keys_per_unit=0,
            ),
            "'max_keys_per_unit'",
        ),
    ],
)
def test_other_transforms_validate_at_construction(make: Any, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_candidates_from_a_file(tmp_path: Any) -> None:
    path = tmp_path / "parties.txt"
    path.write_text("# parties\nGyudon\n\n  Melon-pan  \n", encoding="utf-8")
    transform = Election.Globally(
        candidate_column="c", candidates=str(path), record_level=True, epsilon=1.0, score="margin"
    )
    assert transform.display_data()["num_candidates"] == 2
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no labels"):
        top(candidates=tmp_path / "empty.txt")


def test_display_data_shows_public_parameters_and_labels_name_the_release() -> None:
    transform = TopCandidates.PerKey(
        candidate_column="site",
        candidates=["a", "b", "c"],
        unit_column="user",
        key_column="country",
        keys=["DE", "FR"],
        epsilon=1.0,
        max_keys_per_unit=1,
        k=2,
        name="sites",
    )
    shown = transform.display_data()
    assert shown["epsilon"] == 1.0 and shown["k"] == 2 and shown["num_keys"] == 2
    assert shown["mechanism"] == "permute_and_flip_top_k" and shown["num_candidates"] == 3
    assert transform.default_label() == "TopCandidates.PerKey(sites)"
    assert transform.keys_per_unit == 1
    assert BestPrice.Globally(value_column="v", unit_column="u", epsilon=1.0).default_label() == (
        "BestPrice.Globally(best_price)"
    )


def test_per_key_epsilon_follows_the_keys_one_unit_can_reach() -> None:
    def per_key(**overrides: Any) -> Any:
        params = {
            "candidate_column": "c",
            "candidates": ["a", "b"],
            "unit_column": "u",
            "key_column": "k",
            "keys": ["x", "y", "z", "w"],
            "epsilon": 1.2,
        }
        params.update(overrides)
        return Election.PerKey(**params)

    assert per_key().keys_per_unit == 4 and per_key().display_data()["epsilon"] == pytest.approx(
        0.3
    )
    assert per_key(max_keys_per_unit=2).display_data()["epsilon"] == pytest.approx(0.6)
    assert per_key(max_keys_per_unit=9).keys_per_unit == 4
    assert per_key(unit_column=None, record_level=True).keys_per_unit == 1  # a record has one key


def _release(
    name: str, epsilon: float, key: Any = None, reach: int | None = None, window: str | None = None
) -> Release:
    bounds = {"votes_per_unit": 1}
    if reach is not None:
        bounds["max_keys_per_unit"] = reach
    release = make_release(
        name=name,
        statistic="election",
        value="a",
        mechanism="permute_and_flip",
        epsilon=epsilon,
        sensitivity=1.0,
        neighbouring="add_remove",
        monotone=True,
        num_candidates=2,
        contribution_bounds=bounds,
        key=key,
    )
    return Release(release.value, release.ledger, key=key, window=window)


def test_ledger_entries_to_record_charges_each_transform_once() -> None:
    releases = [_release("global", 0.5)]
    releases += [_release("parallel", 1.0, key=k, reach=1) for k in "abc"]
    releases += [_release("split", 0.25, key=k, reach=2) for k in "abcd"]
    entries = ledger_entries_to_record(releases)
    assert sorted(e.name for e in entries) == ["global", "parallel", "split", "split"]
    budget = PrivacyBudget(2.0)
    for name, epsilon in (("global", 0.5), ("parallel", 1.0), ("split", 0.5)):
        budget.spend(name, mechanism="permute_and_flip", epsilon=epsilon)
    for entry in entries:
        budget.record(entry)
    assert budget.spent()[0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="several windows"):
        ledger_entries_to_record([_release("g", 1.0, window="w1"), _release("g", 1.0, window="w2")])


def test_record_level_key_selection_uses_one_label_per_unit() -> None:
    transform = SelectCandidates.Globally(
        candidate_column="site",
        record_level=True,
        epsilon=1.0,
        delta=1e-6,
        max_candidates_per_unit=5,
    )
    assert transform.display_data()["max_candidates_per_unit"] == 1
    assert transform.display_data()["privacy_unit"] == "record"
