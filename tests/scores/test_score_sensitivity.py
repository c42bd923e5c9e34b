"""Falsification of every declared sensitivity and monotonicity claim on random neighbours.

For every score and both relations, at least 10**4 random neighbouring pairs are drawn
(add_remove: one unit's records removed, which also covers adding them back; replace: one
unit's records changed, bounds respected). The measured ``max |q(r; x) - q(r; x')|`` in real
units never exceeds the declared sensitivity; a constructed pair reaches it exactly; claimed
monotone relations never move two scores in opposite directions, and for claimed non-monotone
ones a pair that does is exhibited. Draws are seeded so that a failure reproduces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from beam_dp.scores import (
    DistinctUnitCount,
    MeanScore,
    PluralityVote,
    QuantileScore,
    Revenue,
    Score,
    VoteMargin,
)

PAIRS = 10_000
RELATIONS = ("add_remove", "replace")

Units = list[list[Any]]  # one list of records per privacy unit
Pair = tuple[Units, Units]


def _flat(units: Units) -> list[Any]:
    return [record for unit in units for record in unit]


def _neighbours(
    rng: np.random.Generator,
    relation: str,
    new_unit: Callable[[], list[Any]],
    max_units: int,
    same_size: bool = False,
) -> Iterator[Pair]:
    """Random neighbouring pairs of datasets given as lists of units."""
    while True:
        size = int(rng.integers(1, max_units + 1))
        units = [new_unit() for _ in range(size)]
        changed = int(rng.integers(size))
        other = [list(unit) for unit in units]
        if relation == "add_remove":
            del other[changed]
        else:
            replacement = new_unit()
            if same_size:
                while len(replacement) != len(units[changed]):
                    replacement = new_unit()
            other[changed] = replacement
        yield units, other


def _opposite(delta: npt.NDArray[np.int64]) -> bool:
    return bool(np.any(delta > 0) and np.any(delta < 0))


def _measure(
    compute: Callable[[Units], npt.NDArray[np.int64]], pairs: Iterator[Pair], count: int
) -> tuple[int, bool]:
    """Largest integer score change over ``count`` pairs, and whether any moved both ways."""
    largest = 0
    opposite = False
    for _, (first, second) in zip(range(count), pairs, strict=False):
        delta = compute(second) - compute(first)
        largest = max(largest, int(np.abs(delta).max()))
        opposite = opposite or _opposite(delta)
    return largest, opposite


def _assert_claims(score: Score, relation: str, largest: int, opposite: bool) -> None:
    assert largest * score.unit <= score.sensitivity(relation)  # type: ignore[arg-type]
    # The (seeded) random search also reaches the bound: it is not overstated either.
    assert largest * score.unit == score.sensitivity(relation)  # type: ignore[arg-type]
    if score.monotone(relation):  # type: ignore[arg-type]
        assert not opposite


def _assert_tight(
    score: Score,
    relation: str,
    compute: Callable[[Units], npt.NDArray[np.int64]],
    first: Units,
    second: Units,
) -> None:
    delta = compute(second) - compute(first)
    assert int(np.abs(delta).max()) * score.unit == score.sensitivity(relation)  # type: ignore[arg-type]


def _assert_opposite(
    compute: Callable[[Units], npt.NDArray[np.int64]], first: Units, second: Units
) -> None:
    assert _opposite(compute(second) - compute(first))


# --- distinct-unit count ---------------------------------------------------------------------


@pytest.mark.parametrize("relation", RELATIONS)
def test_distinct_unit_count(relation: str) -> None:
    rng = np.random.default_rng(20240601)
    opposite_seen = False
    for bound in (1, 3):
        score = DistinctUnitCount(num_candidates=4, max_candidates_per_unit=bound)

        def new_unit(bound: int = bound) -> list[int]:
            distinct = rng.choice(4, size=int(rng.integers(1, bound + 1)), replace=False)
            return [int(c) for c in rng.choice(distinct, size=int(rng.integers(1, 5)))]

        def compute(units: Units, score: DistinctUnitCount = score) -> npt.NDArray[np.int64]:
            return score.compute(units)

        largest, opposite = _measure(compute, _neighbours(rng, relation, new_unit, 6), PAIRS // 2)
        _assert_claims(score, relation, largest, opposite)
        opposite_seen = opposite_seen or opposite
        if relation == "add_remove":
            _assert_tight(score, relation, compute, [[0], [0]], [[0]])
        else:
            _assert_tight(score, relation, compute, [[0], [1]], [[0], [2]])
            _assert_opposite(compute, [[0], [1]], [[0], [2]])
    assert opposite_seen == (relation == "replace")


# --- votes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("relation", RELATIONS)
def test_plurality_vote(relation: str) -> None:
    rng = np.random.default_rng(20240602)
    score = PluralityVote(num_candidates=3)

    def compute(units: Units) -> npt.NDArray[np.int64]:
        return score.compute(np.array(_flat(units), dtype=np.int64))

    def new_unit() -> list[int]:
        return [int(rng.integers(3))]

    largest, opposite = _measure(compute, _neighbours(rng, relation, new_unit, 8), PAIRS)
    _assert_claims(score, relation, largest, opposite)
    _assert_tight(
        score, relation, compute, [[0], [1]], [[0]] if relation == "add_remove" else [[0], [2]]
    )
    if relation == "replace":
        _assert_opposite(compute, [[0], [1]], [[0], [2]])
        assert opposite


@pytest.mark.parametrize("relation", RELATIONS)
def test_vote_margin(relation: str) -> None:
    rng = np.random.default_rng(20240603)
    score = VoteMargin()

    def compute(units: Units) -> npt.NDArray[np.int64]:
        return score.compute(np.array(_flat(units), dtype=np.int64))

    def new_unit() -> list[int]:
        return [int(rng.integers(2))]

    largest, opposite = _measure(compute, _neighbours(rng, relation, new_unit, 8), PAIRS)
    _assert_claims(score, relation, largest, opposite)
    assert opposite  # not monotone under either relation, and random pairs show it
    if relation == "add_remove":
        _assert_tight(score, relation, compute, [[0], [1], [0]], [[0], [1]])
        _assert_opposite(compute, [[0]], [[0], [1]])
    else:
        _assert_tight(score, relation, compute, [[0], [1], [0]], [[0], [1], [1]])
        _assert_opposite(compute, [[0], [1]], [[1], [1]])


# --- revenue ---------------------------------------------------------------------------------


def _revenue_values(score: Revenue) -> list[float]:
    """Willingness-to-pay values that stress the price comparisons (ties and their neighbours)."""
    nearest = [float(p) for p in score.prices]
    special = [0.0, -1.0, 5.0, np.nan, np.inf, -np.inf]
    around = [float(np.nextafter(p, d)) for p in nearest for d in (-np.inf, np.inf)]
    return nearest + around + special


@pytest.mark.parametrize("relation", RELATIONS)
def test_revenue(relation: str) -> None:
    # Monotone under both relations: with one value per unit, a changed value moves every
    # count in the direction of the change.
    rng = np.random.default_rng(20240604)
    for score in (
        Revenue.from_cents([25, 50, 70, 99, 150]),
        Revenue([Fraction(1, 8), 0.5, 1, 2.25]),  # unit 1/1000
    ):
        pool = _revenue_values(score)

        def new_unit(pool: list[float] = pool) -> list[float]:
            if rng.random() < 0.3:
                return [float(rng.uniform(-0.5, 3.0))]
            return [pool[int(rng.integers(len(pool)))]]

        def compute(units: Units, score: Revenue = score) -> npt.NDArray[np.int64]:
            return score.compute(np.array(_flat(units), dtype=np.float64))

        largest, opposite = _measure(compute, _neighbours(rng, relation, new_unit, 6), PAIRS // 2)
        assert score.monotone(relation)  # type: ignore[arg-type]
        _assert_claims(score, relation, largest, opposite)
        top = float(score.prices[-1])
        if relation == "add_remove":
            _assert_tight(score, relation, compute, [[0.1], [top]], [[0.1]])
        else:
            _assert_tight(score, relation, compute, [[top]], [[0.0]])


# --- quantile --------------------------------------------------------------------------------

QUANTILE_GRID = (0.0, 1.0, 2.0, 3.0, 4.0)
# NaN and ±inf are in the pool as values that are not data (dropped, one rule for every
# statistic); since they no longer act as values beyond every candidate, the search below runs
# PAIRS pairs per configuration (not PAIRS / 4) to reach the tight cases as before.
QUANTILE_POOL = (*QUANTILE_GRID, -1.0, 0.5, 1.5, 2.5, 3.5, 5.0, np.nan, np.inf, -np.inf)


@pytest.mark.parametrize("relation", RELATIONS)
def test_quantile(relation: str) -> None:
    rng = np.random.default_rng(20240605)
    configs = [(0.5, 1), (0.9, 1), (Fraction(1, 3), 2), (0.25, 3)]
    for alpha, bound in configs:
        score = QuantileScore(alpha, QUANTILE_GRID, max_contributions=bound)

        def new_unit(bound: int = bound) -> list[float]:
            size = int(rng.integers(1, bound + 1))
            return [QUANTILE_POOL[int(i)] for i in rng.integers(len(QUANTILE_POOL), size=size)]

        def compute(units: Units, score: QuantileScore = score) -> npt.NDArray[np.int64]:
            return score.compute(np.array(_flat(units), dtype=np.float64))

        largest, opposite = _measure(compute, _neighbours(rng, relation, new_unit, 6), PAIRS)
        _assert_claims(score, relation, largest, opposite)
        assert opposite  # not monotone: found by the random search as well
        k = bound
        if relation == "add_remove":
            # k values on the heavier side of the candidate 2.0, on a dataset balanced there.
            side = [1.0] * k if score.alpha <= Fraction(1, 2) else [3.0] * k
            _assert_tight(score, relation, compute, [[2.0]], [[2.0], side])
            # Adding 2.5 above four values at 5.0: the score at 0 falls, the one at 4 rises.
            _assert_opposite(compute, [[5.0]] * 4, [[5.0]] * 4 + [[2.5]])
        else:
            # k values above every candidate move below every candidate.
            _assert_tight(score, relation, compute, [[2.0], [5.0] * k], [[2.0], [-1.0] * k])


def test_quantile_counts_entry_point_has_the_same_sensitivity() -> None:
    # Neighbouring (L, E, G) vectors: one unit's k values moved between "<", "=" and ">"
    # (replace), or k values added to them (add/remove).
    rng = np.random.default_rng(20240606)
    score = QuantileScore(0.3, (0.0,), max_contributions=2)
    first = rng.integers(0, 50, size=(PAIRS, 3))
    for relation in RELATIONS:
        if relation == "replace":
            removed = rng.multinomial(2, [1 / 3] * 3, size=PAIRS)
            added = rng.multinomial(2, [1 / 3] * 3, size=PAIRS)
            second = first - removed + added
        else:
            # Up to 2 values added (a fourth slot: not added).
            second = first + rng.multinomial(2, [1 / 4] * 4, size=PAIRS)[:, :3]
        ok = (second >= 0).all(axis=1)
        for (l1, e1, g1), (l2, e2, g2) in zip(first[ok], second[ok], strict=True):
            before = score.compute_from_counts([l1], [g1], equal=[e1])
            after = score.compute_from_counts([l2], [g2], equal=[e2])
            moved = abs(int(after[0] - before[0])) * score.unit
            assert moved <= score.sensitivity(relation)


# --- mean ------------------------------------------------------------------------------------

MEAN_POOL = (0.0, 1.0, 0.25, 0.5, 1 / 3, -5.0, 7.0, np.nan, np.inf, -np.inf)


@pytest.mark.parametrize("resolution", [7, 2**16])
def test_mean_replace(resolution: int) -> None:
    # Neighbours change one unit's records in any way the bound allows: its number of values
    # changes too (fewer rows, values that are NaN or infinite and dropped), so the count kept
    # is not n on every dataset. The declared sensitivity k (upper - lower) / n still holds.
    rng = np.random.default_rng(20240607)
    relation = "replace"
    grid = (-0.5, 0.0, 0.2, 0.5, 0.75, 1.0, 1.5)
    configs = [(0, 1, 1, 3), (Fraction(1, 3), 2, 2, 2), (-1.5, 0.25, 3, 2)]
    sizes_seen: set[int] = set()
    for lower, upper, bound, units_count in configs:
        n = bound * units_count
        score = MeanScore(grid, lower, upper, n=n, max_contributions=bound, resolution=resolution)

        def new_unit(bound: int = bound) -> list[float]:
            size = bound if rng.random() < 0.6 else int(rng.integers(0, bound + 1))
            out = []
            for _ in range(size):
                if rng.random() < 0.4:
                    out.append(float(rng.uniform(-2.0, 3.0)))
                else:
                    out.append(MEAN_POOL[int(rng.integers(len(MEAN_POOL)))])
            return out

        def pairs(units_count: int = units_count, new_unit: Any = new_unit) -> Iterator[Pair]:
            for first, second in _neighbours(rng, relation, new_unit, 1):
                extra = [new_unit() for _ in range(units_count - 1)]
                yield first + extra, second + extra

        def compute(units: Units, score: MeanScore = score) -> npt.NDArray[np.int64]:
            values = np.array(_flat(units), dtype=np.float64)
            sizes_seen.add(int(np.isfinite(values).sum()) - score.n)
            return score.compute(values)

        largest, opposite = _measure(compute, pairs(), PAIRS // len(configs) + 1)
        _assert_claims(score, relation, largest, opposite)
        assert opposite
        # All values at lower, then one unit's values move to upper; candidate 'lower' is not
        # on the grid in general, so use a grid point at or below lower: the distance to it
        # grows by exactly k (upper - lower) / n.
        low, high = float(lower), float(upper)
        others = [[low] * bound for _ in range(units_count - 1)]
        _assert_tight(score, relation, compute, [[low] * bound, *others], [[high] * bound, *others])
    # The random neighbours did keep fewer values than n (and exactly n) on some datasets.
    assert {0, -1, -2} <= sizes_seen


@pytest.mark.parametrize("drop", ["nan", "inf", "removed"])
def test_mean_replace_neighbour_with_a_value_dropped_still_scores(drop: str) -> None:
    # Issue 8: a dataset with exactly n values and its neighbour where one value became NaN or
    # infinite, or is missing (the unit sent one row fewer), both score (no exception), and
    # differ by at most (upper - lower) / (2n): half the sensitivity, as one value dropped.
    rng = np.random.default_rng(20240608)
    grid = tuple(np.linspace(-1.0, 3.0, 17).tolist())
    for k in (1, 2, 3):
        score = MeanScore(grid, -0.5, 2.5, n=4 * k, max_contributions=k)
        half = Fraction(3, 2 * 4 * k)  # (upper - lower) / (2n)
        for _ in range(300):
            values = rng.uniform(-1.0, 3.0, 4 * k)
            changed = values.copy()
            position = int(rng.integers(values.size))
            if drop == "removed":
                changed = np.delete(changed, position)
            else:
                changed[position] = np.nan if drop == "nan" else rng.choice([np.inf, -np.inf])
            delta = np.abs(score.compute(changed) - score.compute(values)).max()
            assert int(delta) * score.unit <= score.sensitivity("replace")
            assert int(delta) <= math.ceil(half / score.unit)
        # The extreme: a value at upper dropped moves T by exactly (upper - lower) / (2n).
        full = score.compute([2.5] * (4 * k))
        short = score.compute([2.5] * (4 * k - 1) + [math.nan])
        steps = half / score.unit  # 2**16 / (2k): an integer for k = 1, 2
        assert math.floor(steps) <= int(np.abs(full - short).max()) <= math.ceil(steps)


def test_mean_replace_opposite_pair() -> None:
    score = MeanScore((-0.5, 1.5), 0, 1, n=2)
    assert not score.monotone("replace")
    first = score.compute([0.0, 0.0])
    second = score.compute([0.0, 1.0])  # the mean moves from 0 to 1/2
    assert _opposite(second - first)


def test_mean_add_remove_is_refused() -> None:
    score = MeanScore((0.0, 1.0), 0, 1, n=10)
    with pytest.raises(ValueError, match=r"public dataset size.*relation='replace'"):
        score.sensitivity("add_remove")
    with pytest.raises(ValueError, match="relation='replace'"):
        score.scaled_sensitivity()
    with pytest.raises(ValueError, match="relation='replace'"):
        score.monotone("add_remove")


def test_every_score_and_relation_is_covered() -> None:
    # The tests above exercise these claims; this pins the claims themselves (DESIGN §3).
    claims: Sequence[tuple[Score, Fraction | None, Fraction, bool | None, bool]] = [
        (DistinctUnitCount(5, 3), Fraction(1), Fraction(1), True, False),
        (Revenue.default(), Fraction(199, 100), Fraction(199, 100), True, True),
        (PluralityVote(3), Fraction(1), Fraction(1), True, False),
        (VoteMargin(), Fraction(1), Fraction(2), False, False),
        (QuantileScore(0.9, (1.0, 2.0), 2), Fraction(9, 5), Fraction(2), False, False),
        (MeanScore((0.0, 1.0), 2, 6, n=8, max_contributions=2), None, Fraction(1), None, False),
    ]
    for score, add_remove, replace, monotone_add_remove, monotone_replace in claims:
        assert score.sensitivity("replace") == replace
        assert score.monotone("replace") is monotone_replace
        if add_remove is not None:
            assert score.sensitivity("add_remove") == add_remove
            assert score.sensitivity() == add_remove  # add_remove is the default
            assert score.monotone("add_remove") is monotone_add_remove
