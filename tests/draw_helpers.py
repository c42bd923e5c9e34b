"""Counting the outcomes of a sampler, for the statistical tests against exact pmfs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def draws(sampler: Callable[[], int], num_candidates: int, num_samples: int) -> np.ndarray:
    """How often ``sampler()`` returned each candidate index in ``num_samples`` calls."""
    counts = np.zeros(num_candidates, dtype=np.int64)
    for _ in range(num_samples):
        counts[sampler()] += 1
    return counts
