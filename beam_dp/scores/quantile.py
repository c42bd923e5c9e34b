"""Quantile utility over a public grid (seeds 000/001)."""

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
    """Quantile utility: ``q(r; x) = -|(1 - alpha) #(x < r) - alpha #(x > r)|``.

    This is the seeds' utility without its constant offset ``max(alpha, 1 - alpha) N``, which
    does not change any selection probability. With ``alpha = a/b`` in lowest terms the integer
    score is ``-|(b - a) L - a G|`` with ``L = #(x < r)``, ``G = #(x > r)``, and ``unit = 1/b``.

    Args:
        alpha: The quantile, strictly between 0 and 1. A float is read as the decimal it was
            written as (``0.9`` is 9/10); a ``Fraction`` is used unchanged. After construction
            the attribute holds the ``Fraction``.
        grid: Public candidates: finite floats, sorted strictly increasing (stored as a tuple).
        max_contributions: Bound on the number of values one privacy unit contributes,
            enforced upstream.

    Privacy:
        Relation ``add_remove`` (default): sensitivity
        ``max(alpha, 1 - alpha) * max_contributions`` (each value moves ``L`` or ``G`` by one).
        Relation ``replace``: sensitivity ``max_contributions`` (a changed value can move ``L``
        up and ``G`` down by one each: ``(1 - alpha) + alpha = 1``). Not monotone under either.
        A mechanism releases one grid point.
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
        greater = data.size - np.searchsorted(data, self._grid, side="right")
        return self.compute_from_counts(less, greater)

    def compute_from_counts(
        self, less: npt.ArrayLike, greater: npt.ArrayLike
    ) -> npt.NDArray[np.int64]:
        """Integer scores from ``L = #(x < r)`` and ``G = #(x > r)`` for every grid point.

        This is the entry point for summaries (e.g. prefix sums of a grid histogram).

        Args:
            less: ``#(x < r)`` per candidate, non-negative integers.
            greater: ``#(x > r)`` per candidate, non-negative integers.

        Returns:
            int64 array of length ``num_candidates``.
        """
        below = as_count_array(less, "less", self.num_candidates)
        above = as_count_array(greater, "greater", self.num_candidates)
        a = self._alpha.numerator
        b = self._alpha.denominator
        largest = max(int(below.max()), int(above.max()))
        check_fits_int64(b * largest, "QuantileScore scores")
        scores: npt.NDArray[np.int64] = -np.abs((b - a) * below - a * above)
        return scores
