"""The ``Score`` interface that every score function implements."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from fractions import Fraction

from beam_dp._validation import Relation, check_relation


class Score(abc.ABC):
    """A score function ``q(r; x)`` over a public, finite list of candidates.

    Scores are computed as exact integers (int64 numpy arrays, one per candidate); the real score
    is ``integer * unit``. A mechanism samples from the integer scores with
    ``scaled_sensitivity(relation)``, which is ``sensitivity(relation) / unit``, so that the whole
    selection is exact rational arithmetic.

    Every concrete score is a frozen dataclass validated at construction, and derives its
    sensitivity from its definition and the contribution bounds it stores; it is never supplied
    by the caller.

    Attributes:
        num_candidates: Number of candidates (the length of every score vector).

    Privacy:
        A score is not a release; it only states, for each neighbouring relation, the sensitivity
        ``max |q(r; x) - q(r; x')|`` over neighbours ``x, x'`` and candidates ``r``, and whether all
        scores always move in the same direction (monotone), which a mechanism needs to choose its
        exponent.
    """

    num_candidates: int

    @property
    @abc.abstractmethod
    def unit(self) -> Fraction:
        """The real value of one integer score step (scores are ``integer * unit``)."""

    @abc.abstractmethod
    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """Sensitivity of the real scores under ``relation`` (L-infinity over candidates)."""

    @abc.abstractmethod
    def monotone(self, relation: Relation = "add_remove") -> bool:
        """Whether, for all neighbours under ``relation``, all scores move the same way."""

    @property
    @abc.abstractmethod
    def contribution_bounds(self) -> Mapping[str, int]:
        """The per-unit contribution bounds the sensitivity assumes (for the ledger)."""

    def scaled_sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """Sensitivity in integer score steps: ``sensitivity(relation) / unit``.

        This is the value to pass to a sampler together with the integer scores.
        """
        return self.sensitivity(check_relation(relation)) / self.unit
