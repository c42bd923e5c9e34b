"""Revenue of a posted price (pricing a digital good, seed 002)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_relation
from beam_dp.scores._base import Score
from beam_dp.scores._exact import (
    MAX_SIGNIFICANT_DIGITS,
    as_float_array,
    check_fits_int64,
    decimal_fraction,
    decimal_places,
    significant_digits,
)

PriceLike = int | float | Fraction | Decimal


@dataclass(frozen=True)
class Revenue(Score):
    """Revenue at each posted price: ``q(p; x) = p * #{units with x_u >= p}`` (seed 002).

    Prices are exact decimals (currency units, e.g. dollars): ints, ``Fraction``, ``Decimal``,
    or floats read as the decimal they were written as (``0.7`` is 7/10). Each price must be
    > 0 and a terminating decimal with at most 15 significant digits; prices must be sorted
    strictly increasing. Integer scores are ``price / unit * count`` with ``unit = 10**-d``,
    ``d`` the most decimal places among the prices (``unit = 1/100`` for cents).

    Willingness-to-pay values are compared as the decimals they denote too: a float value
    ``0.7`` buys at price 0.70 (although the binary float is slightly below 7/10). This is exact:
    for a price with at most 15 significant digits, ``x >= float(price)`` in float arithmetic
    holds exactly when the shortest decimal of ``x`` is ``>= price``.

    Args:
        prices: The public price grid (the candidates), strictly increasing.

    Privacy:
        One value per privacy unit. Relation ``add_remove`` (default): sensitivity ``max(prices)``
        (a unit adds or removes at most one buyer at each price), monotone. Relation ``replace``:
        sensitivity ``max(prices)``, and monotone too: changing one unit's value from ``a`` to ``b``
        changes every count by ``[b >= p] - [a >= p]``, which has the sign of ``b - a`` at every
        price. A mechanism releases one price.
    """

    prices: Sequence[PriceLike]
    num_candidates: int = field(init=False, repr=False, compare=False)
    _unit: Fraction = field(init=False, repr=False, compare=False)
    _scaled_prices: npt.NDArray[np.int64] = field(init=False, repr=False, compare=False)
    _thresholds: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.prices, (str, bytes)) or not isinstance(self.prices, Iterable):
            raise TypeError("'prices' must be a sequence of prices")
        prices = tuple(decimal_fraction(price, "prices") for price in self.prices)
        if not prices:
            raise ValueError("'prices' must hold at least one price")
        places = 0
        for price in prices:
            if not price > 0:
                raise ValueError(f"'prices' must hold prices > 0; received {price}")
            price_places = decimal_places(price)
            if (
                price_places is None
                or significant_digits(price, price_places) > MAX_SIGNIFICANT_DIGITS
            ):
                raise ValueError(
                    "'prices' must hold exact decimals with at most "
                    f"{MAX_SIGNIFICANT_DIGITS} significant digits; received {price}"
                )
            places = max(places, price_places)
        if any(later <= earlier for earlier, later in itertools.pairwise(prices)):
            raise ValueError("'prices' must be sorted strictly increasing")
        scale = 10**places
        scaled = [int(price * scale) for price in prices]
        check_fits_int64(scaled[-1], "'prices' in units of 10**-decimal_places")
        object.__setattr__(self, "prices", prices)
        object.__setattr__(self, "num_candidates", len(prices))
        object.__setattr__(self, "_unit", Fraction(1, scale))
        object.__setattr__(self, "_scaled_prices", np.array(scaled, dtype=np.int64))
        # Nearest float of each price (correctly rounded): the exact decimal comparison.
        object.__setattr__(
            self, "_thresholds", np.array([float(price) for price in prices], dtype=np.float64)
        )

    @classmethod
    def from_cents(cls, cents: Iterable[int]) -> Revenue:
        """Price grid from whole cents, e.g. ``Revenue.from_cents(range(1, 200))``."""
        values = list(cents)
        for value in values:
            check_positive_int(value, "cents")
        return cls(tuple(Fraction(int(value), 100) for value in values))

    @classmethod
    def default(cls) -> Revenue:
        """The seed's grid: $0.01, $0.02, ..., $1.99 (199 prices)."""
        return cls.from_cents(range(1, 200))

    @property
    def unit(self) -> Fraction:
        """``10**-d`` currency units, ``d`` the most decimal places among the prices."""
        return self._unit

    @property
    def contribution_bounds(self) -> Mapping[str, int]:
        """``{"values_per_unit": 1}``."""
        return {"values_per_unit": 1}

    @property
    def max_price(self) -> Fraction:
        """The largest price (the sensitivity)."""
        return Fraction(self._scaled_prices[-1].item()) * self._unit

    def sensitivity(self, relation: Relation = "add_remove") -> Fraction:
        """``max(prices)`` under both relations."""
        check_relation(relation)
        return self.max_price

    def monotone(self, relation: Relation = "add_remove") -> bool:
        """True under both relations (one value per unit: all counts move the same way)."""
        check_relation(relation)
        return True

    def compute(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Integer revenues (``revenue / unit``) at every price.

        Args:
            values: One willingness to pay per privacy unit (floats, in the prices' currency).
                NaN and ±inf are not data (dropped, as by every statistic): such a value
                buys at no price.

        Returns:
            int64 array of length ``num_candidates``.
        """
        wtp = as_float_array(values, "values")
        wtp[~np.isfinite(wtp)] = -np.inf  # not data: buys at no price
        wtp.sort()
        check_fits_int64(int(self._scaled_prices[-1]) * wtp.size, "Revenue scores")
        buyers = wtp.size - np.searchsorted(wtp, self._thresholds, side="left")
        return self._scaled_prices * buyers.astype(np.int64)
