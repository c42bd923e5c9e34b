"""Exact private selection mechanisms (pure Python and numpy; no Beam).

Public API:
    select, select_per_key, top_k, selection_probabilities, score_loss_bound, check_method
    RandomSource, SecureRandom, InsecureSeededRandom, InsecureRandomWarning
"""

from beam_dp.mechanisms.per_key import select_per_key
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
    check_method,
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
    "check_method",
    "score_loss_bound",
    "select",
    "select_per_key",
    "selection_probabilities",
    "top_k",
]
