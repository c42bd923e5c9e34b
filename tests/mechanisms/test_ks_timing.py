"""The KS sampler's work is fixed by public values (issue 22, item 5), and its new parts are exact.

The report: D = 1 000 people at 0 and 1 000 at 100, D' adds one person at 50 (10^4 grid points
on [0, 100], k = 100): the planner ran 49 band counts on D and 143 on D', and the job took twice
as long. Here every counter of the work (``Sampler.work``) must be equal on neighbouring
datasets with the same public parameters, and the operands of the dynamic program must have
sizes fixed by public values.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.cdf import KSMechanism, ks_pmf_bruteforce, release_ks_cdf
from beam_dp.mechanisms.cdf import release as release_module
from beam_dp.mechanisms.cdf.bands import Bands, points_from_path
from beam_dp.mechanisms.cdf.exact_reals import BitStream, bernoulli_ratio, geometric_many
from beam_dp.mechanisms.cdf.ks import Sampler
from beam_dp.mechanisms.cdf.plan import PlanOptions
from beam_dp.mechanisms.randomness import RandomSource


def _grid_counts(values: list[float], m: int, upper: float) -> list[int]:
    grid = np.linspace(0.0, upper, m)
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    counts = np.searchsorted(ordered, grid, side="right")
    counts[-1] = ordered.size
    return [int(c) for c in counts]


def _reported(people: int, m: int) -> tuple[list[int], list[int]]:
    """D (``people`` at 0 and ``people`` at 100) and D' (one more person at 50)."""
    d = [0.0] * people + [100.0] * people
    return _grid_counts(d, m, 100.0), _grid_counts([*d, 50.0], m, 100.0)


def _overflow_bound(sampler: Sampler) -> float:
    """An upper bound on the chance that one draw needs more than ``rounds`` rounds."""
    return (1.0 - sampler.acceptance_bound) ** sampler.rounds


def _assert_same_work(first: Sampler, second: Sampler, draws: int) -> None:
    # The planning budget first: the old planner ran 47 band counts on D and 137 on D'.
    assert first.band_counts == second.band_counts
    source = SecureRandom()
    for _ in range(draws):
        first.draw(source)
        second.draw(source)
    one, two = first.work, second.work
    assert one.rounds >= first.rounds * draws and two.rounds >= second.rounds * draws
    if max(_overflow_bound(first), _overflow_bound(second)) <= 1e-9:
        assert one == two  # fails with probability <= 2e-9 per draw (a draw overflowing)
    else:  # rounds beyond the padded ones (one band count each) are all that may differ
        assert one.band_counts - one.rounds == two.band_counts - two.rounds
        assert one.cells * two.band_counts == two.cells * one.band_counts
        ignored = {"rounds": 0, "band_counts": 0, "cells": 0}
        assert replace(one, **ignored) == replace(two, **ignored)


def test_the_reported_neighbours_do_the_same_work_scaled_down() -> None:
    # The report's shape on a grid of 1 000 points with k = 30 (seconds, not minutes).
    d, neighbour = _reported(100, 1_000)
    mechanism = KSMechanism(k=30, epsilon=Fraction(9, 10), relation="add_remove", n_public=200)
    first, second = Sampler(d, mechanism), Sampler(neighbour, mechanism)
    assert first.minimum != second.minimum  # the plans differ: only the work must not
    _assert_same_work(first, second, draws=2)


@pytest.mark.slow
def test_the_reported_neighbours_do_the_same_work() -> None:
    # The report itself: 10^4 grid points, k = 100, n̂ = 2 000 (public or released).
    d, neighbour = _reported(1_000, 10_000)
    mechanism = KSMechanism(k=100, epsilon=Fraction(9, 10), relation="add_remove", n_public=2000)
    _assert_same_work(Sampler(d, mechanism), Sampler(neighbour, mechanism), draws=1)


@st.composite
def _neighbours(draw: st.DrawFn) -> tuple[list[int], list[int], KSMechanism]:
    m = draw(st.integers(2, 12))
    k = draw(st.integers(1, 6))
    c = draw(st.integers(1, 2))
    relation = draw(st.sampled_from(["replace", "add_remove"]))
    values = draw(st.lists(st.integers(0, m - 1), min_size=0, max_size=30))
    changed = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=c))
    epsilon = draw(st.sampled_from([Fraction(1, 10), Fraction(1), Fraction(4)]))
    per_point = [0] * m
    for v in values + changed:
        per_point[v] += 1
    x = list(itertools.accumulate(per_point))
    if relation == "replace":
        moved = draw(st.lists(st.integers(0, m - 1), min_size=len(changed), max_size=len(changed)))
        for old, new in zip(changed, moved, strict=True):
            per_point[old] -= 1
            per_point[new] += 1
        n_public = None
    else:
        for old in changed:
            per_point[old] -= 1
        n_public = draw(st.integers(1, 40))
    neighbour = list(itertools.accumulate(per_point))
    mechanism = KSMechanism(
        k=k, epsilon=epsilon, relation=relation, n_public=n_public, max_contributions=c
    )
    return x, neighbour, mechanism


@settings(max_examples=60, deadline=None)
@given(_neighbours(), st.sampled_from([None, 2, 5]))
def test_random_neighbours_do_the_same_work(
    pair: tuple[list[int], list[int], KSMechanism], budget: int | None
) -> None:
    x, neighbour, mechanism = pair
    options = PlanOptions(band_counts=budget, rounds=6)
    _assert_same_work(Sampler(x, mechanism, options), Sampler(neighbour, mechanism, options), 2)


def test_every_cell_of_a_band_has_a_public_size() -> None:
    # A big-integer addition takes longer on bigger operands (and 0 + 0 is almost free), so
    # the cells carry OFFSET + P: every one has the bit length of OFFSET, at every level and
    # for every dataset with the same public parameters.
    d, neighbour = _reported(40, 200)
    sizes = set()
    for counts in (d, neighbour):
        bands = Bands([12 * n for n in counts[:-1]], 80, 12)
        for level in (0, 40, 400, 4_000):
            for _, forms in bands.tables(level):
                sizes.update(f.bit_length() for f in forms)
        assert bands.counters.cells == 4 * (len(counts) - 1) * 13
    assert sizes == {math.comb(199 + 12, 12).bit_length() + 1}


def test_padded_counts_match_the_plain_definition() -> None:
    # Narrow padded columns (the public width) and windows wider than it give the same counts.
    rng = np.random.default_rng(8)
    values = sorted(rng.integers(0, 9, 25).tolist())
    counts = [sum(v <= i for v in values) for i in range(10)]
    targets = [4 * n for n in counts[:-1]]
    listed = [
        max(abs(t - 25 * sum(p <= i for p in z)) for i, t in enumerate(targets))
        for z in itertools.combinations_with_replacement(range(10), 4)
    ]
    for width in (1, 2, 5):
        bands = Bands(targets, 25, 4, width=width)
        for level in sorted(set(listed)):
            assert bands.count(level) == sum(d <= level for d in listed)


# ------------------------------------------------------------------ the new exact parts


class _CountingBits(BitStream):
    def __init__(self, source: RandomSource):
        super().__init__(source)
        self.used = 0

    def bit(self) -> int:
        self.used += 1
        return super().bit()


@pytest.mark.parametrize(
    ("numerator", "denominator"), [(0, 1), (1, 1), (1, 3), (2, 7), (5, 8), (10**40, 3**90)]
)
def test_ratio_coin_is_exact_and_its_bits_do_not_depend_on_the_ratio(
    numerator: int, denominator: int
) -> None:
    bits = _CountingBits(SecureRandom())
    trials = 6_000
    used = Counter()
    heads = 0
    for _ in range(trials):
        before = bits.used
        heads += bernoulli_ratio(numerator, denominator, bits)
        used[bits.used - before] += 1
    p = numerator / denominator
    if 0 < p < 1:
        assert chi_square_pvalue(np.array([trials - heads, heads]), np.array([1 - p, p])) > FPR
    else:
        assert heads == trials * numerator // denominator
    # bits used: geometric(1/2) whatever the ratio (cells 1..7 and 8+)
    observed = np.array([used[j] for j in range(1, 8)] + [sum(used[j] for j in used if j >= 8)])
    expected = np.array([2.0**-j for j in range(1, 8)] + [2.0**-7])
    assert chi_square_pvalue(observed, expected) > FPR


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1, 40), Fraction(5, 2)])
def test_many_geometric_draws_have_the_exact_law(gamma: Fraction) -> None:
    draws = np.array(geometric_many(gamma, 4_000, SecureRandom()))
    cap = int(30 / float(gamma)) + 1  # beyond this the mass is below e**-30
    assert draws.min() >= 0 and draws.max() < cap
    expected = np.exp(-float(gamma) * np.arange(cap)) * -math.expm1(-float(gamma))
    assert chi_square_pvalue(np.bincount(draws, minlength=cap), expected) > FPR


def test_padded_rounds_keep_the_law_when_rounds_are_rejected() -> None:
    # One band count: the first block spans many breakpoints, rounds are rejected, and the
    # draw keeps the first accepted of its rounds (the rest are run and discarded).
    counts = [0, 1, 4, 4, 9, 12]
    mechanism = KSMechanism(k=3, epsilon=Fraction(7, 10), relation="replace")
    sampler = Sampler(counts, mechanism, PlanOptions(band_counts=1, rounds=5))
    assert not sampler.exact
    pmf = ks_pmf_bruteforce(counts, k=3, epsilon=0.7, relation="replace")
    support = sorted(pmf)
    source = SecureRandom()
    draws = Counter(points_from_path(sampler.draw(source)) for _ in range(4_000))
    observed = np.array([draws[z] for z in support])
    assert chi_square_pvalue(observed, np.array([pmf[z] for z in support])) > FPR


def test_a_release_with_a_released_count_keeps_its_columns_within_the_public_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # release_ks_cdf bounds D_min by max(n̂/2, k e) with e the count's 2**-40 error bound: the
    # padded width is then well below k + 1 on accurate data, and no band needs more cells.
    made: list[Sampler] = []

    class Recording(Sampler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(release_module, "Sampler", Recording)
    rng = np.random.default_rng(2)
    m, k = 200, 10
    counts = _grid_counts(rng.lognormal(3.0, 0.5, 20_000).tolist(), m, 100.0)
    release_ks_cdf(counts, grid_points=np.linspace(0.0, 100.0, m), k=k, epsilon=1.0)
    (sampler,) = made
    width = sampler.bands.width
    assert width < k + 1
    work = sampler.work
    assert work.cells == work.band_counts * (m - 1) * width
