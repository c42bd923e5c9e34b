"""Revenue of a posted price (pricing a digital good: McSherry and Talwar 2007)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_relation
from beam_dp.scores._base import Score
from beam_dp.scores._exact import (
    INT64_MAX,
    MAX_SIGNIFICANT_DIGITS,
    as_float_array,
    check_fits_int64,
    decimal_fraction,
    decimal_places,
    significant_digits,
)

PriceLike = int | float | Fraction | Decimal


class DecimalGrid(Sequence[Fraction]):
    """An immutable sequence of decimal prices ``scaled[i] / scale``, as Fractions on access.

    What :class:`Revenue` keeps as ``prices`` for a grid of floats: a million prices cost one
    int64 array instead of a million ``Fraction`` objects. It compares equal to (and hashes
    like) the tuple of the same Fractions.
    """

    __slots__ = ("_scale", "_scaled")

    def __init__(self, scaled: npt.NDArray[np.int64], scale: int) -> None:
        frozen = np.array(scaled, dtype=np.int64)
        frozen.flags.writeable = False
        self._scaled = frozen
        self._scale = int(scale)

    def __len__(self) -> int:
        return int(self._scaled.size)

    @overload
    def __getitem__(self, index: int) -> Fraction: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Fraction, ...]: ...

    def __getitem__(self, index: int | slice) -> Fraction | tuple[Fraction, ...]:
        if isinstance(index, slice):
            return tuple(Fraction(v, self._scale) for v in self._scaled[index].tolist())
        return Fraction(int(self._scaled[index]), self._scale)

    def __iter__(self) -> Iterator[Fraction]:
        scale = self._scale
        return (Fraction(v, scale) for v in self._scaled.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DecimalGrid):
            return self._scale == other._scale and bool(np.array_equal(self._scaled, other._scaled))
        if isinstance(other, (tuple, list, DecimalGrid)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"DecimalGrid({len(self)} prices, unit 1/{self._scale})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (DecimalGrid, (self._scaled, self._scale))


@dataclass(frozen=True)
class Revenue(Score):
    """Revenue at each posted price: ``q(p; x) = p * #{units with x_u >= p}``.

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
        if self._set_float_grid():
            return
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

    def _set_float_grid(self) -> bool:
        """Set the fields from a grid of Python floats at numpy speed; False to take the slow path.

        Each float is read as the shortest decimal that round-trips to it (as
        :func:`~beam_dp.scores._exact.decimal_fraction` reads it, one price at a time). Here, for
        ``p = 0, 1, ..., 15`` decimal places, ``n = rint(x * 10**p)`` is the only candidate
        numerator: if ``n / 10**p`` (an exact integer over an exact power of ten, correctly
        rounded by IEEE division) is ``x`` and ``n < 10**15``, then ``n / 10**p`` is a decimal of
        at most 15 significant digits that rounds to ``x``. Two different decimals of at most 15
        significant digits never round to the same float, so it is the shortest round-trip
        decimal, and the smallest such ``p`` is its number of decimal places. (``rint`` finds
        ``n``: ``x * 10**p`` is within ``n * 2**-52 < 1/4`` of it.) Sorting is checked on the
        floats, which order the same as those decimals. Grids this does not certify (other
        types, non-finite or non-positive values, more digits, unsorted, beyond int64) take the
        price-by-price path, which raises the usual errors.
        """
        prices = self.prices
        if isinstance(prices, np.ndarray):
            if prices.dtype != np.float64 or prices.ndim != 1:
                return False
            values = prices
        else:
            if not all(type(price) is float for price in prices):
                return False
            values = np.array(prices, dtype=np.float64)
        if values.size == 0 or not np.all(np.isfinite(values)) or not np.all(values > 0):
            return False
        if not np.all(np.diff(values) > 0):
            return False
        places = np.full(values.size, -1, dtype=np.int64)
        numerators = np.zeros(values.size, dtype=np.float64)
        for p in range(MAX_SIGNIFICANT_DIGITS + 1):
            open_ = places < 0
            if not open_.any():
                break
            power = 10.0**p
            candidates = np.rint(values[open_] * power)
            found = (candidates / power == values[open_]) & (candidates < 1e15)
            where = np.flatnonzero(open_)[found]
            places[where] = p
            numerators[where] = candidates[found]
        if (places < 0).any():
            return False
        most = int(places.max())
        last = int(numerators[-1]) * 10 ** (most - int(places[-1]))
        if last > INT64_MAX:
            return False  # the slow path names the limit
        scaled = numerators.astype(np.int64) * (10 ** (most - places)).astype(np.int64)
        scale = 10**most
        object.__setattr__(self, "prices", DecimalGrid(scaled, scale))
        object.__setattr__(self, "num_candidates", int(values.size))
        object.__setattr__(self, "_unit", Fraction(1, scale))
        object.__setattr__(self, "_scaled_prices", scaled)
        object.__setattr__(self, "_thresholds", values.copy())
        return True

    @property
    def scaled_prices(self) -> npt.NDArray[np.int64]:
        """Each price in integer score steps (``price / unit``), a read-only int64 array."""
        view = self._scaled_prices.view()
        view.flags.writeable = False
        return view

    @property
    def thresholds(self) -> npt.NDArray[np.float64]:
        """The nearest float of each price, a read-only array: ``x >= price`` exactly when
        ``x >= threshold`` for a float ``x`` (see the class docstring)."""
        view = self._thresholds.view()
        view.flags.writeable = False
        return view

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
