"""Mean utility over a public grid, for a public dataset size ``n``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_relation, to_fraction
from beam_dp.scores._base import Score
from beam_dp.scores._exact import check_fits_int64, clamped_exact_sum, float_tuple

_DBL_MAX = Fraction(float(np.finfo(np.float64).max))

_NEEDS_PUBLIC_N = (
    "the mean score needs a public dataset size: its sensitivity (upper - lower) / n holds "
    "only when n is the same on both neighbours; use relation='replace' (n public)"
)


@dataclass(frozen=True)
class MeanScore(Score):
    """Mean utility ``q(r; x) = -|T(x) - r|`` over a public grid, ``n`` public.

    The statistic is the *centred sum over the public n*::

        T(x) = clamp(mid + sum_i (v_i - mid) / n, lower, upper),    mid = (lower + upper) / 2,

    where the ``v_i`` are the data values clamped to ``[lower, upper]`` after the one rule for
    values that are not data (NaN, ``+inf`` and ``-inf`` are dropped; see
    :func:`~beam_dp.scores._exact.finite_values`). When exactly ``n`` values are kept, ``T`` is
    their mean (the outer clamp then changes nothing). When the number kept differs from ``n``
    (a value turned into NaN, a unit that sent fewer rows than the bound allows) ``T`` is still
    defined and the score is still computed: *whether a release succeeds never depends on the
    data*. The count of values is never compared with ``n`` and never released.

    Values are summed exactly (no rounding) and ``T`` is an exact rational. Because data floats
    have arbitrary binary denominators, the exact real score is rounded down to a multiple of
    ``unit = sensitivity / resolution``: the integer score is ``floor(-|T(x) - r| / unit)``.
    Rounding moves a score by less than one unit and keeps the sensitivity exactly
    ``resolution`` integer steps (the floors of two reals at most ``resolution`` apart are at
    most ``resolution`` apart), so the declared sensitivity is that of the scores actually used.

    Args:
        grid: Public candidates: finite floats, sorted strictly increasing.
        lower: Lower clamping bound (int, float or Fraction; floats taken exactly).
        upper: Upper clamping bound, ``> lower``.
        n: The public number of values (the denominator of the centred sum).
        max_contributions: Bound ``k`` on the number of values one privacy unit contributes
            (enforced by the pipeline's contribution bounding).
        resolution: Integer score steps per sensitivity (default ``2**16``).

    Privacy:
        Relation ``replace`` only (docs/mechanisms.md, "Releases and neighbours": one
        privacy unit's records are changed; ``n`` is public), sensitivity
        ``k (upper - lower) / n``, not monotone. Under ``add_remove`` the dataset size is not
        public, and ``sensitivity``/``monotone`` raise ValueError.

        Proof. Contribution bounding keeps at most ``k`` values of each unit and chooses them
        from that unit's own records only, so neighbours ``x, x'`` keep the same values for every
        other unit; the changed unit keeps ``p <= k`` values ``a_1..a_p`` in ``x`` and
        ``q <= k`` values ``b_1..b_q`` in ``x'`` (after dropping NaN and infinities, so ``p``
        and ``q`` may be anything from 0 to ``k``). Each clamped value lies in
        ``[lower, upper]``, so ``|v - mid| <= (upper - lower) / 2``, and::

            n |T0(x') - T0(x)| = |sum_j (b_j - mid) - sum_i (a_i - mid)|
                               <= (p + q) (upper - lower) / 2 <= k (upper - lower),

        where ``T0`` is ``T`` before the outer clamp. The clamp to ``[lower, upper]`` and
        ``t -> -|t - r|`` are 1-Lipschitz, so every real score moves by at most
        ``k (upper - lower) / n``, which is the value changed, dropped or added in any mix (a
        dropped or added value alone moves it by at most ``(upper - lower) / (2n)``). The
        bound is reached: ``k`` values moved from ``lower`` to ``upper``. A mechanism releases
        one grid point.
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
        # T lies in [lower, upper], so the largest |T - r| is reached at a bound; the scores
        # must fit in int64 (checked here, on public parameters only, never on data).
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
        """The exact sum of the data values clamped to ``[lower, upper]``.

        NaN, ``+inf`` and ``-inf`` are dropped first (the one rule for values that are not
        data; :func:`~beam_dp.scores._exact.clamped_exact_sum`). Sums of disjoint parts add up, so
        this is also the per-shard summary for ``compute_from_sum`` (with the number of values
        kept).
        """
        total, _ = clamped_exact_sum(values, self._lower, self._upper)
        return total

    def statistic(self, total: int | Fraction, count: int) -> Fraction:
        """``T = clamp(mid + (total - count * mid) / n, lower, upper)``, exactly.

        ``T`` is the mean when ``count == n``; see the class docstring for why this is the
        statistic under ``replace`` whatever the count.

        Args:
            total: Exact sum of ``count`` values clamped to ``[lower, upper]``.
            count: How many values were summed (any integer ``>= 0``; never compared with
                ``n``).

        Raises:
            ValueError: if ``total`` is not a sum of ``count`` clamped values (it lies outside
                ``[count * lower, count * upper]``): a programming error, not a data one.
        """
        if isinstance(count, bool) or not isinstance(count, Integral):
            raise TypeError(f"'count' must be an integer; received type {type(count).__name__}")
        if int(count) < 0:
            raise ValueError("'count' must be an integer >= 0")
        exact_total = to_fraction(total, "total")
        if not count * self._lower <= exact_total <= count * self._upper:
            raise ValueError(
                "'total' must lie in [count * lower, count * upper] (a sum of 'count' clamped "
                "values)"
            )
        midpoint = (self._lower + self._upper) / 2
        centred = midpoint + (exact_total - int(count) * midpoint) / self.n
        return min(max(centred, self._lower), self._upper)

    def compute(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Integer scores from the values (already bounded per unit).

        Args:
            values: The data values (NaN and infinities are dropped; any number of values).

        Returns:
            int64 array of length ``num_candidates``.
        """
        return self.compute_from_sum(*clamped_exact_sum(values, self._lower, self._upper))

    def compute_from_sum(self, total: int | Fraction, count: int) -> npt.NDArray[np.int64]:
        """Integer scores from the exact sum of the ``count`` clamped values kept.

        Args:
            total: Exact sum of the clamped values (see ``clamped_sum``).
            count: Number of values summed (any integer ``>= 0``; it need not equal ``n``).

        Returns:
            int64 array of length ``num_candidates``.
        """
        mean = self.statistic(total, count)
        # -|T - r| / unit with r = numerator / D, unit = k (upper - lower) / (n resolution):
        #   = -|T_num * D - T_den * numerator| * n * resolution * width_den
        #     / (T_den * D * k * width_num)
        width = self._upper - self._lower
        d = self._grid_denominator
        distance = np.abs(mean.numerator * d - mean.denominator * self._grid_numerators)
        numerator = distance * (self.n * self.resolution * width.denominator)
        denominator = mean.denominator * d * self.max_contributions * width.numerator
        steps = -((-numerator) // denominator)  # ceil; at most the bound checked at construction
        return np.array((-steps).tolist(), dtype=np.int64)
