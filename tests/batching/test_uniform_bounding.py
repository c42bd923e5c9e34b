"""Contribution bounding keeps a uniform sample of each unit's rows, not of its distinct values.

Every statistical test here has a false-positive rate of at most ``FPR`` (1e-6) and is
deterministic (fixed data and salts), and each one fails on a rule that ranks rows by a hash
of their content alone (identical rows tie, so distinct values are kept uniformly).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ContributionBounds,
    bound_rows,
    bounding,
    stable_hash64,
    take,
)

Z = float(stats.norm.isf(FPR / 2))


def _single_unit(values: list[float]) -> dict[str, np.ndarray]:
    return {
        UNIT: stable_hash64(np.zeros(len(values), dtype=np.int64)),
        VALUE: np.array(values, dtype=np.float64),
    }


def _ties(num_units: int, rows_per_unit: int, seed: int) -> dict[str, np.ndarray]:
    """Units with ~``rows_per_unit`` values each from 0..9, heavily skewed to small values."""
    rng = np.random.default_rng(seed)
    weights = 0.5 ** np.arange(10)
    sizes = rng.integers(rows_per_unit // 2, rows_per_unit * 3 // 2, num_units)
    units = np.repeat(np.arange(num_units), sizes)
    values = rng.choice(10, size=units.size, p=weights / weights.sum()).astype(np.float64)
    return {UNIT: stable_hash64(units), VALUE: values}


def test_heavy_ties_are_kept_like_a_uniform_sample_of_rows() -> None:
    batch = _ties(num_units=400, rows_per_unit=50, seed=3)
    units, sizes = np.unique(batch[UNIT], return_counts=True)
    index = np.searchsorted(units, batch[UNIT])
    # a uniform row per unit: its mean over units has this mean and variance, exactly
    row_mean = np.bincount(index, batch[VALUE]) / sizes
    row_var = np.bincount(index, batch[VALUE] ** 2) / sizes - row_mean**2
    expected_mean = float(row_mean.mean())
    variance_per_salt = float(row_var.sum()) / units.size**2
    salts = 200
    means = []
    counts = np.zeros(10, dtype=np.int64)
    for salt in range(salts):
        kept = bound_rows(batch, ContributionBounds(max_contributions_per_unit=1), salt=salt)
        assert kept[UNIT].size == units.size
        means.append(float(kept[VALUE].mean()))
        counts += np.bincount(kept[VALUE].astype(np.int64), minlength=10)
    average = float(np.mean(means))
    assert abs(average - expected_mean) <= Z * math.sqrt(variance_per_salt / salts), (
        average,
        expected_mean,
    )
    # the kept values, pooled over salts, have the uniform-row distribution
    share = np.zeros(10)
    for value in range(10):
        share[value] = float((np.bincount(index, batch[VALUE] == value) / sizes).mean())
    assert chi_square_pvalue(counts, share) > FPR


def _binomial_ok(successes: int, trials: int, p: float) -> bool:
    return float(stats.binomtest(successes, trials, p).pvalue) > FPR


def test_a_value_held_three_times_is_kept_three_times_as_often() -> None:
    # one unit, rows [1, 1, 1, 2], bound 1: a uniform row is a 1 with probability 3/4
    batch = _single_unit([1.0, 1.0, 1.0, 2.0])
    trials = 4000
    ones = 0
    for salt in range(trials):
        kept = bound_rows(batch, ContributionBounds(max_contributions_per_unit=1), salt=salt)
        assert kept[VALUE].size == 1
        ones += int(kept[VALUE][0] == 1.0)
    assert _binomial_ok(ones, trials, 3 / 4), ones


def test_bound_two_keeps_a_uniform_pair_of_rows() -> None:
    # rows [1, 1, 1, 2, 2, 3], bound 2: each of the 15 pairs of rows is equally likely
    batch = _single_unit([1.0, 1.0, 1.0, 2.0, 2.0, 3.0])
    pairs = [(1.0, 1.0), (1.0, 2.0), (1.0, 3.0), (2.0, 2.0), (2.0, 3.0)]
    probabilities = np.array([3, 6, 3, 1, 2]) / 15
    counts = np.zeros(len(pairs), dtype=np.int64)
    for salt in range(3000):
        kept = bound_rows(batch, ContributionBounds(max_contributions_per_unit=2), salt=salt)
        counts[pairs.index(tuple(sorted(kept[VALUE].tolist())))] += 1
    assert chi_square_pvalue(counts, probabilities) > FPR, counts


def test_distinct_candidates_keep_a_uniform_row_of_each_candidate() -> None:
    # one (unit, candidate) with values [5, 5, 5, 7]: the kept value is 5 with probability 3/4
    batch = _single_unit([5.0, 5.0, 5.0, 7.0])
    batch[CANDIDATE] = np.zeros(4, dtype=np.int64)
    bounds = ContributionBounds(max_contributions_per_unit=1, distinct_candidates=True)
    trials = 3000
    fives = sum(
        int(bound_rows(batch, bounds, salt=salt)[VALUE].tolist() == [5.0]) for salt in range(trials)
    )
    assert _binomial_ok(fives, trials, 3 / 4), fives


def test_within_bounds_the_batch_is_returned_whole() -> None:
    batch = _ties(num_units=50, rows_per_unit=2, seed=1)
    wide = ContributionBounds(max_contributions_per_unit=10**6)
    assert bound_rows(batch, wide, salt=1) is batch
    one_each = {UNIT: stable_hash64(np.arange(100)), VALUE: np.ones(100)}
    assert bound_rows(one_each, ContributionBounds(1), salt=1) is one_each


# --- a unit's kept rows are a function of its own multiset of rows and the salt


rows_strategy = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 2), st.integers(0, 3)),
    max_size=80,
)


def _batch(rows: list[tuple[int, int, int, int]]) -> dict[str, np.ndarray]:
    return {
        UNIT: stable_hash64(np.array([r[0] for r in rows], dtype=np.int64)),
        CANDIDATE: np.array([r[1] for r in rows], dtype=np.int64),
        KEY: np.array([r[2] for r in rows], dtype=np.int64),
        VALUE: np.array([r[3] for r in rows], dtype=np.float64),
    }


def _multiset(batch: dict[str, np.ndarray], skip: Any = None) -> Counter[tuple[Any, ...]]:
    rows = zip(*(batch[name].tolist() for name in (UNIT, CANDIDATE, KEY, VALUE)), strict=True)
    return Counter(row for row in rows if row[0] != skip)


@settings(deadline=None, max_examples=150)
@given(
    rows=rows_strategy,
    permutation=st.randoms(use_true_random=False),
    removed=st.integers(0, 6),
    k=st.integers(1, 3),
    m=st.sampled_from([None, 1, 2]),
    distinct=st.booleans(),
    salt=st.integers(0, 2**64 - 1),
)
def test_kept_rows_depend_on_nothing_but_the_units_rows(
    rows: list[tuple[int, int, int, int]],
    permutation: Any,
    removed: int,
    k: int,
    m: int | None,
    distinct: bool,
    salt: int,
) -> None:
    bounds = ContributionBounds(
        max_contributions_per_unit=k, max_keys_per_unit=m, distinct_candidates=distinct
    )
    full = bound_rows(_batch(rows), bounds, salt)
    shuffled = list(rows)
    permutation.shuffle(shuffled)
    assert _multiset(bound_rows(_batch(shuffled), bounds, salt)) == _multiset(full)
    # the neighbour without one unit: every other unit keeps exactly the same rows
    gone = int(stable_hash64(np.array([removed]))[0])
    others = [r for r in shuffled if r[0] != removed]
    assert _multiset(bound_rows(_batch(others), bounds, salt)) == _multiset(full, skip=gone)


# --- the one-key sort: buckets shared by two groups or two contents are resolved exactly


def _reference(
    group: list[tuple[int, ...]], content: list[tuple[int, ...]], h: list[int], bound: int
) -> Counter[tuple[Any, ...]]:
    """Per group, the ``bound`` copies (content, occurrence) with the lowest priorities."""
    copies: dict[tuple[int, ...], list[tuple[int, tuple[Any, ...]]]] = {}
    seen: Counter[tuple[Any, ...]] = Counter()
    for g, c, hash_ in zip(group, content, h, strict=True):
        occurrence = seen[(g, c)]
        seen[(g, c)] += 1
        priority = int(
            bounding._mix(
                np.array([hash_], dtype=np.uint64)
                ^ (np.array([occurrence], dtype=np.uint64) * bounding._ODD[1])
            )[0]
        )
        copies.setdefault(g, []).append((priority, (g, c)))
    kept: Counter[tuple[Any, ...]] = Counter()
    for items in copies.values():
        kept.update(row for _, row in sorted(items)[:bound])
    return kept


@settings(deadline=None, max_examples=200)
@given(
    rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1), st.integers(0, 7)), max_size=60),
    bound=st.integers(1, 3),
    lexsort=st.booleans(),
    with_keys=st.booleans(),
)
def test_sampling_is_exact_when_groups_and_contents_share_sort_buckets(
    rows: list[tuple[int, int, int]], bound: int, lexsort: bool, with_keys: bool
) -> None:
    # units 0..5 share their high 32 bits in pairs (the group is the unit alone unless keys
    # are used) and contents 0..7 share the content hash's high 32 bits in pairs: the buckets
    # of the one-key sort are ambiguous and the exact re-sort decides
    units = np.array([(r[0] // 2) << 32 | r[0] for r in rows], dtype=np.uint64)
    keys = np.array([r[1] if with_keys else 0 for r in rows], dtype=np.int64)
    contents = np.array([r[2] for r in rows], dtype=np.float64)
    h = np.array([(r[2] // 2) << 32 | (r[2] * 7919 + r[0] * 104729) for r in rows], np.uint64)
    saved = bounding._MAX_GROUP_BITS
    bounding._MAX_GROUP_BITS = 0 if lexsort else saved
    try:
        group = [units, keys] if with_keys else [units]
        chosen = bounding._sample_groups(group, h, bound)
    finally:
        bounding._MAX_GROUP_BITS = saved
    indices = np.arange(len(rows)) if chosen is None else chosen
    got = Counter(((int(units[i]), int(keys[i])), (float(contents[i]),)) for i in indices.tolist())
    expected = _reference(
        [(int(u), int(k)) for u, k in zip(units, keys, strict=True)],
        [(float(c),) for c in contents],
        [int(x) for x in h],
        bound,
    )
    assert got == expected


def test_bound_rows_rejects_a_batch_without_units() -> None:
    with pytest.raises(ValueError, match="privacy-unit column"):
        bound_rows({VALUE: np.ones(3)}, ContributionBounds(), salt=0)
    empty = take(_single_unit([1.0]), np.zeros(0, dtype=np.intp))
    assert bound_rows(empty, ContributionBounds(), salt=0)[VALUE].size == 0
