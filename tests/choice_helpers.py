"""Helpers of the tests of privately chosen bounds whose histogram holds one count per unit."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import beam_dp.beam._grid as combiners
from beam_dp.mechanisms import selection_probabilities
from beam_dp.summaries.contribution_bounds import bound_scores, count_histogram

Seen = Callable[[], list[tuple[np.ndarray, dict[str, Any]]]]


def spy_on_choices(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Seen:
    """Record every ``choose_bound`` call (its histogram and keywords) in ``directory``; the
    returned function reads them back (files, so that it works from pipeline workers too)."""
    directory.mkdir()
    real = combiners.choose_bound

    def spy(counts: Any, **kwargs: Any) -> Any:
        with open(directory / f"{len(list(directory.iterdir()))}.pkl", "wb") as handle:
            pickle.dump((np.asarray(counts), kwargs), handle)
        return real(counts, **kwargs)

    monkeypatch.setattr(combiners, "choose_bound", spy)
    return lambda: [pickle.loads(path.read_bytes()) for path in directory.iterdir()]


def worst_loss_over_one_count(counts: np.ndarray, kwargs: dict[str, Any]) -> float:
    """The largest |log pmf ratio| of the choice between ``counts`` and every neighbour that
    adds or removes one unit's single count (any value up to the cap), by exact pmfs."""
    cap = counts.size - 1

    def pmf(histogram: np.ndarray) -> np.ndarray:
        scored = bound_scores(histogram, alpha=kwargs["alpha"], relation="add_remove")
        return selection_probabilities(
            scored.scores,
            epsilon=kwargs["epsilon"],
            sensitivity=scored.scaled_sensitivity,
            method=kwargs["method"],
        )

    worst = 0.0
    for held in range(1, cap + 1):
        for sign in (-1, 1):
            neighbour = counts + sign * count_histogram([held], cap=cap)
            if neighbour.min() >= 0:
                worst = max(worst, float(np.max(np.abs(np.log(pmf(counts) / pmf(neighbour))))))
    return worst
