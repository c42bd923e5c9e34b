"""DP key selection: the exact discrete Laplace sampler, the threshold, and its δ guarantee."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from draw_helpers import ReadLog
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_helpers import FPR, chi_square_pvalue, clopper_pearson

from beam_dp.mechanisms import InsecureSeededRandom, noise
from beam_dp.mechanisms.partition_selection import (
    NO_DELTA_HINT,
    check_key_selection,
    discrete_laplace,
    key_selection_threshold,
    release_probability,
    select_keys,
    sure_release_count,
)


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InsecureSeededRandom(seed)


def _discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(support)


@pytest.mark.parametrize("scale", [0.7, 2.0, Fraction(10, 3), 25.0])
def test_discrete_laplace_matches_its_pmf(scale: float | Fraction) -> None:
    n = 40_000
    samples = discrete_laplace(scale, n, _seeded(11))
    assert samples.dtype == np.int64 and samples.shape == (n,)
    width = int(12 * float(scale)) + 3
    support = np.arange(-width, width + 1)
    counts = np.array([(samples == z).sum() for z in support] + [(np.abs(samples) > width).sum()])
    probs = _discrete_laplace_pmf(float(scale), support)
    probs = np.append(probs, max(0.0, 1.0 - probs.sum()))
    assert chi_square_pvalue(counts, probs / probs.sum()) > FPR


def test_discrete_laplace_with_a_numerator_beyond_63_bits() -> None:
    # scale = (2**70 + 1) / 2**69, just above 2: the exact Python-integer path.
    scale = Fraction(2**70 + 1, 2**69)
    samples = discrete_laplace(scale, 4_000, _seeded(3))
    support = np.arange(-12, 13)
    counts = np.array([(samples == z).sum() for z in support] + [(np.abs(samples) > 12).sum()])
    probs = _discrete_laplace_pmf(float(scale), support)
    probs = np.append(probs, 1.0 - probs.sum())
    assert chi_square_pvalue(counts, probs) > FPR


def test_discrete_laplace_validates_and_handles_zero_samples() -> None:
    assert discrete_laplace(1.0, 0).shape == (0,)
    with pytest.raises(ValueError, match="'scale'"):
        discrete_laplace(float("nan"), 3)
    with pytest.raises(ValueError, match="'n'"):
        discrete_laplace(1.0, -1)


@pytest.mark.parametrize(
    ("epsilon", "delta", "per_unit"),
    [(1.0, 1e-6, 1), (0.1, 1e-9, 10), (2.5, 1e-3, 3), (0.5, 0.2, 1), (8.0, 1e-12, 2)],
)
def test_threshold_is_the_smallest_that_keeps_single_unit_labels_below_delta(
    epsilon: float, delta: float, per_unit: int
) -> None:
    threshold = key_selection_threshold(epsilon, delta, per_unit)
    a = math.exp(-epsilon / per_unit)

    def tail(k: int) -> float:  # P(Z >= k), summed from the pmf (an independent computation)
        z = np.arange(k, k + 20_000)
        return float(np.sum((1 - a) / (1 + a) * a ** np.abs(z)))

    # A label held by one unit has count 1 and is released when 1 + Z >= threshold.
    assert tail(threshold - 1) <= delta / per_unit * (1 + 1e-9)
    assert tail(threshold - 2) > delta / per_unit
    assert release_probability(1, epsilon, delta, per_unit) == pytest.approx(
        tail(threshold - 1), rel=1e-9
    )


def test_release_probability_is_monotone_and_reaches_confidence() -> None:
    probabilities = [release_probability(n, 1.0, 1e-6, 2) for n in range(1, 80)]
    assert all(b >= a for a, b in itertools.pairwise(probabilities))
    sure = sure_release_count(1.0, 1e-6, 2, 0.95)
    assert release_probability(sure, 1.0, 1e-6, 2) >= 0.95
    assert release_probability(sure - 1, 1.0, 1e-6, 2) < 0.95


def test_single_unit_labels_are_released_at_most_with_probability_delta_over_c() -> None:
    # A large delta makes the rare event measurable: c = 2 labels held by one unit each.
    epsilon, delta, per_unit, trials = 1.0, 0.2, 2, 20_000
    released = select_keys(
        np.ones(trials, dtype=np.int64),
        epsilon=epsilon,
        delta=delta,
        max_keys_per_unit=per_unit,
        rng=_seeded(5),
    )
    exact = release_probability(1, epsilon, delta, per_unit)
    low, high = clopper_pearson(int(released.sum()), trials, FPR)
    assert exact <= delta / per_unit
    assert low <= exact <= high


def test_popular_labels_are_released_and_absent_counts_rejected() -> None:
    counts = np.array([1, 1, 500, 1000])
    kept = select_keys(counts, epsilon=1.0, delta=1e-9, max_keys_per_unit=1)
    assert kept[2] and kept[3]
    with pytest.raises(ValueError, match=">= 1"):
        select_keys(np.array([0, 3]), epsilon=1.0, delta=1e-6, max_keys_per_unit=1)


@pytest.mark.parametrize("delta", [None, 0, 0.0])
def test_no_delta_is_an_error_that_explains_why(delta: float | None) -> None:
    with pytest.raises(ValueError) as info:
        check_key_selection(1.0, delta, 1)
    message = str(info.value)
    assert NO_DELTA_HINT in message
    assert "single privacy unit" in message and "public list" in message


@pytest.mark.parametrize(
    ("epsilon", "delta", "per_unit", "match"),
    [
        (float("nan"), 1e-6, 1, "'epsilon'"),
        (-1.0, 1e-6, 1, "'epsilon'"),
        (1.0, 1.5, 1, "'delta'"),
        (1.0, float("nan"), 1, "'delta'"),
        (1.0, 1e-6, 0, "'max_keys_per_unit'"),
    ],
)
def test_bad_parameters_are_named(epsilon: float, delta: float, per_unit: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_key_selection(epsilon, delta, per_unit)


# ------------------------------------------------------------------ the work (docs/timing.md)

# Issue 36: 10 labels against the same plus one person naming 1 000 new labels (each held by
# that person alone). The old code drew one noise per label present: 55-57x the random bytes.
FEW_LABELS = np.array([40, 3, 17, 1, 8, 250, 2, 60, 5, 9], dtype=np.int64)
ONE_PERSON_MORE = np.concatenate([FEW_LABELS, np.ones(1_000, dtype=np.int64)])
WORK_OPTIONS = {"epsilon": 1.0, "delta": 1e-6, "max_keys_per_unit": 1_024}


def _work_of(counts: np.ndarray, seed: int, **options: object) -> tuple[list[int], list[int]]:
    """(every read of random bytes, the size of every pass of the noise's loop) of one call."""
    passes: list[int] = []
    original = noise.geometric_exp

    def counted(rate: Fraction, n: int, source: object) -> np.ndarray:
        passes.append(int(n))
        return original(rate, n, source)  # type: ignore[arg-type]

    source = ReadLog(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(noise, "geometric_exp", counted)
        select_keys(counts, rng=source, **{**WORK_OPTIONS, **options})  # type: ignore[arg-type]
    return source.reads, passes


@pytest.mark.parametrize("seed", range(3))
def test_select_keys_does_the_same_work_with_a_thousand_more_labels(seed: int) -> None:
    reads, passes = _work_of(FEW_LABELS, seed)
    more_reads, more_passes = _work_of(ONE_PERSON_MORE, seed)
    assert reads and passes  # the counters see the work
    assert sum(reads) == sum(more_reads)  # random bytes drawn
    assert len(passes) == len(more_passes)  # iterations of the noise's loop
    assert (reads, passes) == (more_reads, more_passes)  # every read and pass, in order


@settings(deadline=None, max_examples=40)
@given(
    counts=st.lists(st.integers(1, 60), max_size=40),
    person=st.lists(st.integers(0, 50), max_size=8, unique=True),
    seed=st.integers(0, 2**32 - 1),
)
def test_select_keys_does_the_same_work_on_random_neighbours(
    counts: list[int], person: list[int], seed: int
) -> None:
    # Add/remove one unit holding at most 8 labels: +1 on the labels it names that exist,
    # a new label of count 1 for each it names beyond them.
    neighbour = list(counts)
    for label in person:
        if label < len(neighbour):
            neighbour[label] += 1
        else:
            neighbour.append(1)
    small = {"max_labels": 64, "max_keys_per_unit": 8}
    first = _work_of(np.array(counts, dtype=np.int64), seed, **small)
    second = _work_of(np.array(neighbour, dtype=np.int64), seed, **small)
    assert first == second


def test_labels_beyond_max_labels_take_whole_blocks() -> None:
    # The stated rule past the public bound: a further padded block, never a draw per label.
    _, passes = _work_of(np.ones(5, dtype=np.int64), 0, max_labels=16)
    _, one_more = _work_of(np.ones(17, dtype=np.int64), 0, max_labels=16)
    assert passes[0] == 16 and one_more[0] == 32
    with pytest.raises(ValueError, match="'max_labels'"):
        select_keys(FEW_LABELS, max_labels=0, **WORK_OPTIONS)  # type: ignore[arg-type]


def test_padding_keeps_each_labels_release_law() -> None:
    # The labels' decisions use the first lanes of the padded noise, independent lanes of the
    # same law: the release frequencies match the exact probabilities, padded or not.
    counts = np.repeat(np.array([1, 6, 9, 12], dtype=np.int64), 5_000)
    options = {"epsilon": 1.0, "delta": 0.05, "max_keys_per_unit": 2}
    for max_labels in (7, 1 << 16):
        kept = select_keys(counts, max_labels=max_labels, rng=_seeded(max_labels), **options)
        for count in (1, 6, 9, 12):
            where = counts == count
            exact = release_probability(count, 1.0, 0.05, 2)
            low, high = clopper_pearson(int(kept[where].sum()), int(where.sum()), FPR)
            assert low <= exact <= high, (max_labels, count)
