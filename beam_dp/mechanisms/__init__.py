"""Exact private selection mechanisms (pure Python and numpy; no Beam).

Public API:
    select, top_k, selection_probabilities, score_loss_bound
    RandomSource, SecureRandom, InsecureSeededRandom, InsecureRandomWarning
"""

from beam_dp.mechanisms.randomness import (
    InsecureRandomWarning,
    InsecureSeededRandom,
    RandomSource,
    SecureRandom,
    as_random_source,
)
from beam_dp.mechanisms.selection import (
    METHODS,
    Method,
    score_loss_bound,
    select,
    selection_probabilities,
    top_k,
)

__all__ = [
    "METHODS",
    "InsecureRandomWarning",
    "InsecureSeededRandom",
    "Method",
    "RandomSource",
    "SecureRandom",
    "as_random_source",
    "score_loss_bound",
    "select",
    "selection_probabilities",
    "top_k",
]
