"""Counting and drawing lattice paths in a KS band, checked against listing every multiset."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.cdf.bands import (
    Bands,
    path_from_points,
    points_from_path,
    uniform_multiset,
)


def _problem(
    data: tuple[int, int, list[int], int],
) -> tuple[Bands, list[tuple[int, ...]], list[int]]:
    m, k, values, scale = data
    per_point = [0] * m
    for v in values:
        per_point[v] += 1
    counts = list(itertools.accumulate(per_point))
    targets = [k * n for n in counts[:-1]]
    bands = Bands(targets, scale, k)
    multisets = list(itertools.combinations_with_replacement(range(m), k))
    deviations = [
        max(
            (abs(t - scale * c) for t, c in zip(targets, path_from_points(z, m), strict=False)),
            default=0,
        )
        for z in multisets
    ]
    return bands, multisets, deviations


PROBLEMS = st.integers(1, 5).flatmap(
    lambda m: st.tuples(
        st.just(m),
        st.integers(1, 4),
        st.lists(st.integers(0, m - 1), max_size=9),
        st.integers(1, 12),
    )
)


@settings(max_examples=80, deadline=None)
@given(PROBLEMS, st.integers(0, 60))
def test_band_counts_match_listing(data: tuple[int, int, list[int], int], level: int) -> None:
    bands, multisets, deviations = _problem(data)
    assert bands.count(level) == sum(d <= level for d in deviations)
    assert bands.feasible(level) == any(d <= level for d in deviations)
    assert bands.total() == len(multisets)
    for z, d in zip(multisets, deviations, strict=True):
        assert bands.deviation(path_from_points(z, data[0])) == d


@settings(max_examples=80, deadline=None)
@given(PROBLEMS)
def test_minimum_deviation_and_breakpoints(data: tuple[int, int, list[int], int]) -> None:
    bands, _, deviations = _problem(data)
    breakpoints = bands.breakpoints()
    assert bands.min_deviation(breakpoints) == min(deviations)
    assert set(deviations) <= {int(b) for b in breakpoints}  # A changes only at breakpoints
    assert list(breakpoints) == sorted(set(breakpoints.tolist()))


def test_big_targets_use_exact_integers() -> None:
    # Beyond int64: the same answers with Python integers.
    k, scale = 3, 10**19
    targets = [k * 10**19 // 2, k * 10**19]
    bands = Bands(targets, scale, k)
    breakpoints = bands.breakpoints()
    assert breakpoints.dtype == object
    minimum = bands.min_deviation(breakpoints)
    assert minimum == scale // 2
    assert bands.count(minimum) == 2  # C_0 in {1, 2}, C_1 = 3
    path = bands.uniform_path(bands.tables(minimum), SecureRandom())
    assert bands.deviation(path) == minimum


def test_uniform_path_is_uniform_over_the_band() -> None:
    # m = 6, k = 4: a band holding many but not all of the 126 multisets.
    bands, multisets, deviations = _problem((6, 4, [0, 1, 1, 3, 3, 3, 5], 7))
    level = sorted(deviations)[len(deviations) // 2]
    inside = [z for z, d in zip(multisets, deviations, strict=True) if d <= level]
    tables = bands.tables(level)
    source = SecureRandom()
    draws = Counter(points_from_path(bands.uniform_path(tables, source)) for _ in range(8_000))
    assert set(draws) <= set(inside)
    observed = np.array([draws[z] for z in inside])
    assert chi_square_pvalue(observed, np.full(len(inside), 1 / len(inside))) > FPR


def test_uniform_multiset_is_uniform() -> None:
    source = SecureRandom()
    support = list(itertools.combinations_with_replacement(range(4), 3))
    draws = Counter(tuple(uniform_multiset(4, 3, source)) for _ in range(6_000))
    assert set(draws) <= set(support)
    observed = np.array([draws[z] for z in support])
    assert chi_square_pvalue(observed, np.full(len(support), 1 / len(support))) > FPR


def test_paths_and_points_round_trip() -> None:
    points = (0, 0, 2, 4, 4, 4)
    path = path_from_points(points, 6)
    assert path == [2, 2, 3, 3, 6, 6]
    assert points_from_path(path) == points
