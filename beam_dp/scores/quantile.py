"""Quantile utility over a public grid (Smith, STOC 2011), aware of tied values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    Relation,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.scores._base import Score
from beam_dp.scores._exact import (
    as_count_array,
    check_fits_int64,
    decimal_fraction,
    finite_values,
    float_tuple,
)


@dataclass(frozen=True)
class QuantileScore(Score):
    """Tie-aware quantile utility: minus the distance from ``alpha N`` to the ranks of ``r``.

    With ``L = #(x < r)``, ``E = #(x = r)``, ``G = #(x > r)`` and ``N = L + E + G``, the values
    equal to ``r`` hold the ranks ``[L, L + E]``, and::

        q(r; x) = -max(0, (1 - alpha) L - alpha (G + E), alpha G - (1 - alpha) (L + E))
                = -dist(alpha N, [L, L + E]).

    It is 0 exactly when some rank of ``r`` is ``alpha N`` (a tie block holding the quantile
    scores as well as any point can), and equals the classical ``-|(1 - alpha) L - alpha G|``
    (without its constant offset ``max(alpha, 1 - alpha) N``) wherever ``E = 0``. The classical
    score counts the tied values on neither side: a point holding the quantile's rank inside a
    block of tied values scored no better than the empty points beside it (a 300-value block
    at the median of 450 values was missed in every release at epsilon 0.5, where this score
    releases the block's value in every one). With ``alpha = a/b`` in lowest
    terms the integer score is ``-max(0, (b - a) L - a (G + E), a G - (b - a) (L + E))`` and
    ``unit = 1/b``.

    Args:
        alpha: The quantile, strictly between 0 and 1. A float is read as the decimal it was
            written as (``0.9`` is 9/10); a ``Fraction`` is used unchanged. After construction
            the attribute holds the ``Fraction``.
        grid: Public candidates: finite floats, sorted strictly increasing (stored as a tuple).
        max_contributions: Bound on the number of values one privacy unit contributes,
            enforced upstream.

    Privacy:
        The two inner terms are ``L - alpha N`` and ``alpha N - (L + E)``; ``q`` is minus the
        largest of them and 0, and ``max(0, s, t)`` moves by at most the largest move of ``s``
        and ``t``. Relation ``add_remove`` (default): one value added (``N`` up by one) lands
        in ``L``, ``E`` or ``G``: ``L - alpha N`` moves by ``1 - alpha`` or ``-alpha``, and
        ``alpha N - (L + E)`` by ``alpha - 1`` or ``alpha``; so the sensitivity is
        ``max(alpha, 1 - alpha) * max_contributions``, as for the classical score. Relation
        ``replace`` (``N`` fixed): a changed value moves ``L`` and ``L + E`` by at most one
        each, so the sensitivity is ``max_contributions``. Not monotone under either. A
        mechanism releases one grid point.
    """

    alpha: float | Fraction
    grid: Sequence[float] | npt.NDArray[Any]
    max_contributions: int = 1
    num_candidates: int = field(init=False, repr=False, compare=False)
    _alpha: Fraction = field(init=False, repr=False, compare=False)
    _grid: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_probability_open(self.alpha, "alpha")
        alpha = decimal_fraction(self.alpha, "alpha")
        if not 0 < alpha < 1:  # the decimal reading can differ from float(alpha) at the edges
            raise ValueError(f"'alpha' must be strictly between 0 and 1; received {self.alpha!r}")
        check_fits_int64(alpha.denominator, "The denominator of 'alpha'")
        check_positive_int(self.max_contributions, "max_contributions")
        grid = float_tuple(self.grid, "grid")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "num_candidates", len(grid))
        object.__setattr__(self, "_alpha", alpha)
        object.__setattr__(self, "_grid", np.array(grid, dtype=np.float64))

    @property
    def candidates(self) -> tuple[float, ...]:
        """The grid points, in order (candidate ``i`` is ``candidates[i]``)."""
        return tuple(self._grid.tolist())

    @property
    def unit(self) -> Fraction:
        """``1 / b`` for ``alpha = a / b`` in lowest terms."""
        return Fraction(1, self._alpha.denominator)

    @property
    def contribution_bounds(self) -> Mapping[str, int]:
        """``{"max_contributions": ...}``."""
        return {"max_contributions": self.max_contributions}

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """``max(alpha, 1 - alpha) * k`` under ``add_remove``; ``k`` under ``replace``."""
        if check_relation(relation) == "add_remove":
            return max(self._alpha, 1 - self._alpha) * self.max_contributions
        return Fraction(self.max_contributions)

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """False under both relations."""
        check_relation(relation)
        return False

    def compute(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Integer scores from the values (already bounded to ``max_contributions`` per unit).

        Float comparisons with the float grid are exact. NaN and ±inf are not data: they are
        dropped, as by every statistic (:func:`beam_dp.scores._exact.finite_values`).

        Args:
            values: The data values.

        Returns:
            int64 array of length ``num_candidates``.
        """
        data = np.sort(finite_values(values, "values"))
        less = np.searchsorted(data, self._grid, side="left")
        at_most = np.searchsorted(data, self._grid, side="right")
        return self.compute_from_counts(less, data.size - at_most, equal=at_most - less)

    def compute_from_counts(
        self, less: npt.ArrayLike, greater: npt.ArrayLike, *, equal: npt.ArrayLike
    ) -> npt.NDArray[np.int64]:
        """Integer scores from ``L = #(x < r)``, ``G = #(x > r)`` and ``E = #(x = r)`` for every
        grid point.

        This is the entry point for summaries (e.g. prefix sums of a grid histogram). ``equal``
        is required: without it a tied point would be scored as an empty one.

        Args:
            less: ``#(x < r)`` per candidate, non-negative integers.
            greater: ``#(x > r)`` per candidate, non-negative integers.
            equal: ``#(x = r)`` per candidate, non-negative integers.

        Returns:
            int64 array of length ``num_candidates``.
        """
        below = as_count_array(less, "less", self.num_candidates)
        above = as_count_array(greater, "greater", self.num_candidates)
        tied = as_count_array(equal, "equal", self.num_candidates)
        a = self._alpha.numerator
        b = self._alpha.denominator
        # Every term below is at most b (max(L, G) + E) in absolute value (exact Python ints).
        largest = max(int(below.max(initial=0)), int(above.max(initial=0)))
        check_fits_int64(b * (largest + int(tied.max(initial=0))), "QuantileScore scores")
        past_the_ranks = (b - a) * below - a * (above + tied)  # b (L - alpha N)
        short_of_the_ranks = a * above - (b - a) * (below + tied)  # b (alpha N - L - E)
        scores: npt.NDArray[np.int64] = -np.maximum(
            0, np.maximum(past_the_ranks, short_of_the_ranks)
        )
        return scores
