"""Counting scores: distinct-unit counts (heavy hitters), plurality votes, two-way margins."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_relation
from beam_dp.scores._base import Score
from beam_dp.scores._exact import as_index_array

_ONE = Fraction(1)


@dataclass(frozen=True)
class DistinctUnitCount(Score):
    """Heavy-hitter score: the number of distinct privacy units that contributed each candidate.

    ``q(r; x) = #{units u : u contributed r}`` (McSherry and Talwar 2007). A unit that contributes
    the same candidate several times counts once.

    Args:
        num_candidates: Number of public candidates; candidates are indices ``0..num_candidates-1``.
        max_candidates_per_unit: Bound on the number of distinct candidates one unit contributes,
            enforced upstream (a unit above it is an error). It does not change the sensitivity:
            each candidate's count moves by at most one whatever the bound.

    Privacy:
        Relation ``add_remove`` (default): sensitivity 1, monotone (adding a unit can only raise
        counts). Relation ``replace``: sensitivity 1, not monotone (one count falls while another
        rises). Nothing is released here; a mechanism releases one candidate index.
    """

    num_candidates: int
    max_candidates_per_unit: int = 1

    def __post_init__(self) -> None:
        check_positive_int(self.num_candidates, "num_candidates")
        check_positive_int(self.max_candidates_per_unit, "max_candidates_per_unit")

    @property
    def unit(self) -> Fraction:
        """One score step is one unit: ``Fraction(1)``."""
        return _ONE

    @property
    def contribution_bounds(self) -> Mapping[str, int]:
        """``{"max_candidates_per_unit": ...}``."""
        return {"max_candidates_per_unit": self.max_candidates_per_unit}

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """1 under both relations: each candidate's count moves by at most one."""
        check_relation(relation)
        return _ONE

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """True under ``add_remove``; False under ``replace``."""
        return check_relation(relation) == "add_remove"

    def compute(self, unit_candidate_sets: Iterable[Iterable[int]]) -> npt.NDArray[np.int64]:
        """Scores from one collection of candidate indices per unit.

        Args:
            unit_candidate_sets: One iterable per privacy unit holding the candidate indices it
                contributed (repeats within a unit count once); at most
                ``max_candidates_per_unit`` distinct candidates each.

        Returns:
            int64 array of length ``num_candidates``: distinct-unit count per candidate.
        """
        unit_ids: list[int] = []
        candidates: list[int] = []
        for unit_id, unit_candidates in enumerate(unit_candidate_sets):
            for candidate in unit_candidates:
                unit_ids.append(unit_id)
                candidates.append(candidate)
        return self.compute_from_pairs(
            np.asarray(unit_ids, dtype=np.int64), np.asarray(candidates, dtype=np.int64)
        )

    def compute_from_pairs(
        self, unit_ids: npt.ArrayLike, candidate_idx: npt.ArrayLike
    ) -> npt.NDArray[np.int64]:
        """Scores from record-level ``(unit id, candidate index)`` pairs.

        Args:
            unit_ids: Privacy-unit id of each record (any values ``numpy.unique`` can sort).
            candidate_idx: Candidate index of each record, in ``[0, num_candidates)``.

        Returns:
            int64 array of length ``num_candidates``: distinct-unit count per candidate.

        Raises:
            ValueError: if lengths differ, an index is out of range, or a unit contributed more
                than ``max_candidates_per_unit`` distinct candidates (bound contributions first).
        """
        candidates = as_index_array(candidate_idx, "candidate_idx", self.num_candidates)
        units = np.asarray(unit_ids).ravel()
        if units.shape != candidates.shape:
            raise ValueError(
                "'unit_ids' and 'candidate_idx' must have the same length; "
                f"received {units.shape[0]} and {candidates.shape[0]}"
            )
        if candidates.size == 0:
            return np.zeros(self.num_candidates, dtype=np.int64)
        _, unit_codes = np.unique(units, return_inverse=True)
        keys = unit_codes.astype(np.int64).ravel() * self.num_candidates + candidates
        distinct = np.unique(keys)
        per_unit = np.bincount(distinct // self.num_candidates)
        if int(per_unit.max()) > self.max_candidates_per_unit:
            raise ValueError(
                "a unit contributed more than 'max_candidates_per_unit' "
                f"({self.max_candidates_per_unit}) distinct candidates; "
                "bound contributions per unit before scoring"
            )
        return np.bincount(distinct % self.num_candidates, minlength=self.num_candidates).astype(
            np.int64
        )


class _OneVotePerUnit(Score):
    """The vote scores' shared facts: each unit casts one vote and a score step is one vote."""

    @property
    def unit(self) -> Fraction:
        """One score step is one vote: ``Fraction(1)``."""
        return _ONE

    @property
    def contribution_bounds(self) -> Mapping[str, int]:
        """``{"votes_per_unit": 1}``."""
        return {"votes_per_unit": 1}


def _vote_counts(votes: npt.ArrayLike, num_candidates: int) -> npt.NDArray[np.int64]:
    """Votes per candidate from one candidate index per unit."""
    indices = as_index_array(votes, "votes", num_candidates)
    return np.bincount(indices, minlength=num_candidates).astype(np.int64)


@dataclass(frozen=True)
class PluralityVote(_OneVotePerUnit):
    """Plurality vote: the number of votes for each candidate, one vote per unit.

    Args:
        num_candidates: Number of candidates; votes are indices ``0..num_candidates-1``.

    Privacy:
        Relation ``add_remove`` (default): sensitivity 1, monotone. Relation ``replace`` (a switched
        vote): sensitivity 1, not monotone. Each unit casts exactly one vote. A mechanism releases
        one candidate index.
    """

    num_candidates: int

    def __post_init__(self) -> None:
        check_positive_int(self.num_candidates, "num_candidates")

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """1 under both relations."""
        check_relation(relation)
        return _ONE

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """True under ``add_remove``; False under ``replace``."""
        return check_relation(relation) == "add_remove"

    def compute(self, votes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Vote counts.

        Args:
            votes: One candidate index per unit (already reduced to one vote per unit).

        Returns:
            int64 array of length ``num_candidates``.
        """
        return _vote_counts(votes, self.num_candidates)


@dataclass(frozen=True)
class VoteMargin(_OneVotePerUnit):
    """Two-candidate vote margin: ``q(r) = #votes(r) - #votes(other)``.

    Candidates are ``0`` and ``1``; the scores are ``(m, -m)`` with ``m = #0 - #1``.

    Privacy:
        Relation ``add_remove`` (default): sensitivity 1, not monotone (a new vote for one candidate
        raises its margin and lowers the other's). Relation ``replace``: sensitivity 2 (a switched
        vote moves both counts), not monotone. For two candidates, ``PluralityVote`` with
        sensitivity 1 gives the same exponential-mechanism distribution as this score with
        sensitivity 2 under ``replace``. A mechanism releases one candidate index.
    """

    num_candidates: int = field(default=2, init=False, repr=False)

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """1 under ``add_remove``; 2 under ``replace``."""
        return _ONE if check_relation(relation) == "add_remove" else Fraction(2)

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """False under both relations."""
        check_relation(relation)
        return False

    def compute(self, votes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Margins ``(#0 - #1, #1 - #0)``.

        Args:
            votes: One candidate index (0 or 1) per unit.

        Returns:
            int64 array of length 2.
        """
        counts = _vote_counts(votes, 2)
        margin = counts[0] - counts[1]
        return np.array([margin, -margin], dtype=np.int64)
