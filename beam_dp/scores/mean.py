"""Mean utility over a public grid (seed 004), for a public dataset size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_relation, to_fraction
from beam_dp.scores._base import Score
from beam_dp.scores._exact import (
    as_float_array,
    check_fits_int64,
    exact_float_sum,
    float_at_least,
    float_at_most,
    float_tuple,
)

_DBL_MAX = Fraction(float(np.finfo(np.float64).max))

_NEEDS_PUBLIC_N = (
    "the mean score needs a public dataset size: its sensitivity (upper - lower) / n holds "
    "only when n is the same on both neighbours; use relation='replace' (n public)"
)


@dataclass(frozen=True)
class MeanScore(Score):
    """Mean utility: ``q(r; x) = -|mean(x) - r|`` over a public grid, values clamped.

    Values are clamped to ``[lower, upper]`` and summed exactly (no rounding); the mean is the
    exact rational ``sum / n``. Because data floats have arbitrary binary denominators, the
    exact real score is rounded down to a multiple of ``unit = sensitivity / resolution``:
    the integer score is ``floor(-|mean(x) - r| / unit)``. Rounding moves a score by less than
    one unit and keeps the sensitivity exactly ``resolution`` integer steps (the floors of two
    reals at most ``resolution`` apart are at most ``resolution`` apart), so the declared
    sensitivity is that of the scores actually used.

    Args:
        grid: Public candidates: finite floats, sorted strictly increasing.
        lower: Lower clamping bound (int, float or Fraction; floats taken exactly).
        upper: Upper clamping bound, ``> lower``.
        n: The public number of values (every dataset has exactly ``n`` values).
        max_contributions: Bound on the number of values one privacy unit contributes.
        resolution: Integer score steps per sensitivity (default ``2**16``).

    Privacy:
        Relation ``replace`` only (one unit's values are changed, ``n`` public): sensitivity
        ``max_contributions * (upper - lower) / n``, not monotone. Under ``add_remove`` the dataset
        size is not public, and ``sensitivity``/``monotone`` raise ValueError. NaN values are
        replaced by the midpoint ``(lower + upper) / 2`` (a public rule), infinities are clamped. A
        mechanism releases one grid point.
    """

    grid: Sequence[float] | npt.NDArray[Any]
    lower: int | float | Fraction
    upper: int | float | Fraction
    n: int
    max_contributions: int = 1
    resolution: int = 2**16
    num_candidates: int = field(init=False, repr=False, compare=False)
    _lower: Fraction = field(init=False, repr=False, compare=False)
    _upper: Fraction = field(init=False, repr=False, compare=False)
    _grid_numerators: npt.NDArray[np.object_] = field(init=False, repr=False, compare=False)
    _grid_denominator: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grid = float_tuple(self.grid, "grid")
        lower = to_fraction(self.lower, "lower")
        upper = to_fraction(self.upper, "upper")
        for name, bound in (("lower", lower), ("upper", upper)):
            if abs(bound) > _DBL_MAX:
                raise ValueError(f"'{name}' must be within the float64 range")
        if not lower < upper:
            raise ValueError(f"'lower' must be < 'upper'; received {self.lower!r}, {self.upper!r}")
        check_positive_int(self.n, "n")
        check_positive_int(self.max_contributions, "max_contributions")
        check_positive_int(self.resolution, "resolution")
        points = [Fraction(point) for point in grid]
        denominator = max(point.denominator for point in points)  # all powers of two
        numerators = [point.numerator * (denominator // point.denominator) for point in points]
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "num_candidates", len(grid))
        object.__setattr__(self, "_lower", lower)
        object.__setattr__(self, "_upper", upper)
        object.__setattr__(self, "_grid_numerators", np.array(numerators, dtype=object))
        object.__setattr__(self, "_grid_denominator", denominator)
        # The largest |mean - r| is reached at a bound; the scores must fit in int64.
        farthest = max(max(abs(lower - point), abs(upper - point)) for point in points)
        check_fits_int64(-((-farthest) // self.unit), "MeanScore scores")

    @property
    def candidates(self) -> tuple[float, ...]:
        """The grid points, in order (candidate ``i`` is ``candidates[i]``)."""
        return tuple(float(point) for point in self.grid)

    @property
    def unit(self) -> Fraction:
        """``max_contributions * (upper - lower) / (n * resolution)``."""
        return self._replace_sensitivity() / self.resolution

    @property
    def contribution_bounds(self) -> Mapping[str, int]:
        """``{"max_contributions": ...}``."""
        return {"max_contributions": self.max_contributions}

    def _replace_sensitivity(self) -> Fraction:
        return self.max_contributions * (self._upper - self._lower) / self.n

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """``max_contributions * (upper - lower) / n`` under ``replace``.

        Raises:
            ValueError: under ``add_remove``, where the dataset size is not public.
        """
        if check_relation(relation) == "add_remove":
            raise ValueError(_NEEDS_PUBLIC_N)
        return self._replace_sensitivity()

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """False under ``replace``.

        Raises:
            ValueError: under ``add_remove``, where the score is not defined.
        """
        if check_relation(relation) == "add_remove":
            raise ValueError(_NEEDS_PUBLIC_N)
        return False

    def clamped_sum(self, values: npt.ArrayLike) -> Fraction:
        """The exact sum of the values clamped to ``[lower, upper]`` (NaN -> midpoint).

        Sums of disjoint parts add up, so this is also the per-shard summary for
        ``compute_from_sum``.
        """
        data = as_float_array(values, "values")
        missing = np.isnan(data)
        below = data < float_at_least(self._lower)  # exactly: data < lower
        above = data > float_at_most(self._upper)  # exactly: data > upper
        inside = ~(missing | below | above)
        midpoint = (self._lower + self._upper) / 2
        return (
            self._lower * int(np.count_nonzero(below))
            + self._upper * int(np.count_nonzero(above))
            + midpoint * int(np.count_nonzero(missing))
            + exact_float_sum(data[inside])
        )

    def compute(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Integer scores from exactly ``n`` values (already bounded per unit).

        Args:
            values: The ``n`` data values.

        Returns:
            int64 array of length ``num_candidates``.

        Raises:
            ValueError: if the number of values is not ``n``.
        """
        data = as_float_array(values, "values")
        return self.compute_from_sum(self.clamped_sum(data), data.size)

    def compute_from_sum(self, total: int | Fraction, count: int) -> npt.NDArray[np.int64]:
        """Integer scores from the exact sum of the ``count`` clamped values.

        Args:
            total: Exact sum of the clamped values (see ``clamped_sum``).
            count: Number of values summed; must equal ``n``.

        Returns:
            int64 array of length ``num_candidates``.
        """
        if count != self.n:
            raise ValueError(
                f"the mean score is defined for exactly 'n' = {self.n} values; the number of "
                "values differs (with relation='replace' it is public and must equal 'n')"
            )
        exact_total = to_fraction(total, "total")
        if not self.n * self._lower <= exact_total <= self.n * self._upper:
            raise ValueError("'total' must lie in [n * lower, n * upper] (a sum of clamped values)")
        # -|total/n - r| / unit with r = numerator / D, unit = k (upper - lower) / (n resolution):
        #   = -|total_num * D - n * total_den * numerator| * resolution * width_den
        #     / (total_den * D * k * width_num)
        width = self._upper - self._lower
        d = self._grid_denominator
        distance = np.abs(
            exact_total.numerator * d - (self.n * exact_total.denominator) * self._grid_numerators
        )
        numerator = distance * (self.resolution * width.denominator)
        denominator = exact_total.denominator * d * self.max_contributions * width.numerator
        steps = -((-numerator) // denominator)  # ceil
        return np.array((-steps).tolist(), dtype=np.int64)
