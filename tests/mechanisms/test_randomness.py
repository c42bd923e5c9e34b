"""The random sources: secure by default, seeded only with a warning, uniform integers exact."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import (
    InsecureRandomWarning,
    InsecureSeededRandom,
    SecureRandom,
    as_random_source,
    select,
)


def test_default_is_the_os_csprng() -> None:
    source = as_random_source(None)
    assert isinstance(source, SecureRandom)
    assert source.secure


def test_seeded_source_warns_and_is_marked_insecure() -> None:
    with pytest.warns(InsecureRandomWarning, match="NOT private"):
        source = InsecureSeededRandom(3)
    assert not source.secure
    with pytest.warns(InsecureRandomWarning):
        wrapped = as_random_source(np.random.default_rng(1))
    assert not wrapped.secure


def test_seeded_source_reproduces_a_run() -> None:
    with pytest.warns(InsecureRandomWarning):
        first = [
            select(list(range(50)), epsilon=0.1, sensitivity=1, rng=InsecureSeededRandom(9))
            for _ in range(1)
        ]
    with pytest.warns(InsecureRandomWarning):
        second = [
            select(list(range(50)), epsilon=0.1, sensitivity=1, rng=InsecureSeededRandom(9))
            for _ in range(1)
        ]
    assert first == second


def test_rng_type_is_checked() -> None:
    with pytest.raises(TypeError, match="'rng' must be None"):
        as_random_source(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("bound", [1, 2, 3, 7, 1000, 2**40 + 3])
def test_below_is_uniform(bound: int) -> None:
    values = SecureRandom().below(bound, 60_000)
    assert values.min() >= 0
    assert values.max() < bound
    if bound == 1:
        return
    bins = min(bound, 50)
    counts = np.bincount((values * bins) // bound if bound > 50 else values, minlength=bins)
    # equal-width bins of [0, bound) when bound > 50 are equal only up to one value: tiny bias
    expected = np.full(bins, len(values) / bins)
    assert stats.chisquare(counts, expected).pvalue > FPR


def test_randbelow_handles_python_ints() -> None:
    source = SecureRandom()
    big = 2**100 + 7
    draws = [source.randbelow(big) for _ in range(200)]
    assert all(0 <= d < big for d in draws)
    assert max(draws) > 2**95  # essentially certain for uniform draws
