"""Counting the outcomes of a sampler, for the statistical tests against exact pmfs, and
logging the random reads a sampler makes, for the tests of its work."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from beam_dp.mechanisms.randomness import InsecureRandomWarning, InsecureSeededRandom


def draws(sampler: Callable[[], int], num_candidates: int, num_samples: int) -> np.ndarray:
    """How often ``sampler()`` returned each candidate index in ``num_samples`` calls."""
    counts = np.zeros(num_candidates, dtype=np.int64)
    for _ in range(num_samples):
        counts[sampler()] += 1
    return counts


class ReadLog(InsecureSeededRandom):
    """A seeded source that logs the size of every read of random bytes, at every depth: two
    samplers whose requests depend only on public values read the same sizes from one seed."""

    def __init__(self, seed: int) -> None:
        with pytest.warns(InsecureRandomWarning):
            super().__init__(seed)
        self.reads: list[int] = []

    def random_bytes(self, n: int) -> bytes:
        self.reads.append(n)
        return super().random_bytes(n)
