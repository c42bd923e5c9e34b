"""The options of the quantile and mean transforms (:mod:`beam_dp.beam.quantiles`), declared once.

What every transform of that module reads and clamps (:class:`QuantileOptions`,
:class:`MeanOptions` and their ``.PerKey`` forms) extends the options every private transform
takes (:class:`~beam_dp.beam.options.PrivateOptions`), so that the eight constructors list
only what is theirs (the quantiles, the tail) and editors and mypy still see every keyword.
:func:`take_value_options` validates them at construction, naming the parameter and the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Required, TypedDict

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from beam_dp._validation import check_positive_int
from beam_dp.batching import ContributionBounds
from beam_dp.beam.options import (
    CommonOptions,
    KeyOptions,
    PerKeyOptions,
    PrivateOptions,
    check_column,
)
from beam_dp.beam.plan import Plan, PrivateTransform
from beam_dp.summaries.histogram import Grid

__all__ = [
    "GridLike",
    "MeanOptions",
    "MeanPerKeyOptions",
    "QuantileOptions",
    "QuantilePerKeyOptions",
    "ValueParams",
    "make_grid",
    "take_value_options",
]

GridLike = str | Sequence[float] | npt.NDArray[np.float64] | Grid

# The defaults of this family that differ from the selections' (see PrivateOptions).
_FAMILY_DEFAULTS: Mapping[str, Any] = {
    "on_bad_record": "skip",
    "key_column": "key",
    "max_keys_per_unit": 1,
}


# ------------------------------------------------------------------------------ options


class _ValueOptions(TypedDict, total=False):
    """What every transform of this module reads and clamps (declared once).

    Attributes:
        lower, upper: required: public clamping bounds (finite, ``lower < upper``): values
            outside are clamped, NaN and null values dropped.
        unit_column: required: the privacy-unit field, or None for record-level privacy.
        value_column: the numeric field of the input batches (default ``"value"``); None when
            the elements are numbers or arrays of numbers (``.PerKey``: ``(key, values)``
            pairs), which is record-level only.
        grid: ``"uniform"`` (default), ``"log"`` (for heavy tails; needs ``lower > 0``),
            explicit points inside ``[lower, upper]``, or a ``Grid``.
        num_points: grid size for ``"uniform"`` and ``"log"`` (2 to ``MAX_GRID_POINTS``;
            default 10^6 for quantiles, 10^4 for the mean).
        max_contributions: values kept per privacy unit (needs ``unit_column``); the
            sensitivity is multiplied by it.
    """

    lower: Required[float]
    upper: Required[float]
    unit_column: Required[str | None]
    value_column: str | None
    grid: GridLike
    num_points: int
    max_contributions: int


class _QuantileArgs(_ValueOptions, total=False):
    """The quantile family's own options (quantiles, median, min, max).

    Attributes:
        split: for several quantiles: ``"auto"`` (default, chosen by measurement: the
            recursive split for three quantiles or more, independent selections for one or
            two), ``"recursive"`` (Kaplan-Schnapp-Stemmer) or ``"independent"``
            (``epsilon / m`` each).
        refine: the coarse-to-fine option, for dense data (many values per grid cell). A
            first pass chooses, for each quantile, the cell of ``grid`` that holds it
            (``refine_fraction`` of epsilon, default 0.1); a second pass over the same data
            runs the quantile selections on ``refine_points`` points (default ``num_points``)
            inside each chosen cell, with the rest. It costs a second read of the input and
            hurts on sparse data (measured: benchmarks/RESULTS.md).
        refine_fraction, refine_points: see ``refine``.
    """

    split: str
    refine: bool
    refine_fraction: float
    refine_points: int | None


class QuantileOptions(_QuantileArgs, PrivateOptions, total=False):
    """Keyword options of the quantile ``.Globally`` transforms (``epsilon``: a float or a
    share of mechanism ``method`` with ``rounds`` equal to ``transform.plan.rounds``)."""


class QuantilePerKeyOptions(_QuantileArgs, PerKeyOptions, total=False):
    """Keyword options of the quantile ``.PerKey`` transforms (``key_column`` default
    ``"key"``, ``max_keys_per_unit`` default 1)."""


class _MeanArgs(_ValueOptions, total=False):
    """The mean's own options.

    Attributes:
        n: the public number of values (``relation="replace"`` only; per key for ``.PerKey``).
    """

    n: int | None


class MeanOptions(_MeanArgs, PrivateOptions, total=False):
    """Keyword options of ``PrivateMean.Globally`` (``epsilon``: ``rounds=1``)."""


class MeanPerKeyOptions(_MeanArgs, PerKeyOptions, total=False):
    """Keyword options of ``PrivateMean.PerKey``."""


def make_grid(grid: GridLike, lower: object, upper: object, num_points: object) -> Grid:
    """The public grid from the transform parameters (validated; errors name the parameter)."""
    if isinstance(grid, Grid):
        if (float(lower), float(upper)) != (grid.lower, grid.upper):  # type: ignore[arg-type]
            raise ValueError("'lower' and 'upper' must equal the Grid's bounds")
        return grid
    if isinstance(grid, str):
        if grid == "uniform":
            return Grid.uniform(lower, upper, num_points)  # type: ignore[arg-type]
        if grid == "log":
            return Grid.log(lower, upper, num_points)  # type: ignore[arg-type]
        raise ValueError(
            f"'grid' must be 'uniform', 'log', a sequence of points or a Grid; received {grid!r}"
        )
    return Grid.explicit(grid, lower, upper)  # type: ignore[arg-type]


_VALUE_KEYS = frozenset(_ValueOptions.__required_keys__ | _ValueOptions.__optional_keys__)


@dataclass(frozen=True)
class ValueParams:
    """The validated :class:`_ValueOptions` with the common and per-key options."""

    common: CommonOptions
    keys: KeyOptions
    grid: Grid
    unit_column: str | None
    value_column: str | None
    max_contributions: int

    @property
    def record_level(self) -> bool:
        return self.unit_column is None

    @property
    def keys_per_unit(self) -> int:
        return self.keys.keys_per_unit(self.record_level)

    @property
    def windows(self) -> int:
        return self.common.max_windows_per_unit

    def ledger_bounds(self) -> dict[str, int]:
        if self.record_level:
            bounds = {"record_level_privacy": 1, "max_contributions_per_unit": 1}
        else:
            bounds = {"max_contributions_per_unit": self.max_contributions}
        return {
            **bounds,
            **self.keys.ledger_bounds(self.record_level),
            "max_windows_per_unit": self.windows,
        }

    def contribution_bounds(self) -> ContributionBounds | None:
        if self.record_level:
            return None
        return ContributionBounds(
            max_contributions_per_unit=self.max_contributions,
            max_keys_per_unit=self.keys.max_keys_per_unit,
        )

    def plan(self, combine_fn: beam.CombineFn) -> Plan:
        """The one per-key / per-window path of :mod:`beam_dp.beam.plan`."""
        encode = None
        if self.value_column is not None:
            encode = {
                "unit_column": self.unit_column,
                "value_column": self.value_column,
                "on_bad_record": self.common.on_bad_record,
                **self.keys.encode_options(),
            }
        return Plan(
            encode=encode,
            combine_fn=combine_fn,
            bounds=self.contribution_bounds(),
            num_shards=self.common.num_shards,
            salt=self.common.salt,
            keys=self.keys.keys,
            max_windows_per_unit=self.windows,
        )

    def display(self, name: str, statistic: str, epsilon: float) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "name": name,
            "statistic": statistic,
            "epsilon": epsilon,
            "lower": self.grid.lower,
            "upper": self.grid.upper,
            "grid": self.grid.kind,
            "num_points": self.grid.num_points,
            "relation": self.common.relation,
            "method": self.common.method,
        }
        if self.keys.keys is not None:
            shown["num_keys"] = len(self.keys.keys)
        return shown


def take_value_options(
    transform: PrivateTransform, options: Mapping[str, Any], default_points: int
) -> tuple[ValueParams, dict[str, Any]]:
    """Split ``options`` into the validated value/common/key options and the rest."""
    own = {key: value for key, value in options.items() if key in _VALUE_KEYS}
    rest = {key: value for key, value in options.items() if key not in _VALUE_KEYS}
    for key in ("lower", "upper", "unit_column"):
        if key not in own:
            raise ValueError(f"{transform.NAMESPACE}.{transform.VARIANT}: {key!r} is required")
    lower, upper = own["lower"], own["upper"]
    unit_column = own["unit_column"]
    value_column = own.get("value_column", "value")
    max_contributions = own.get("max_contributions", 1)
    Grid.uniform(lower, upper, 2)  # validates the bounds
    check_column(unit_column, "unit_column", optional=True)
    check_column(value_column, "value_column", optional=True)
    check_positive_int(max_contributions, "max_contributions")
    if unit_column is None and max_contributions != 1:
        raise ValueError(
            "'max_contributions' applies only with a 'unit_column': with unit_column=None "
            "(record-level privacy) every record is its own unit and contributes one value"
        )
    if value_column is None and unit_column is not None:
        raise ValueError(
            "'value_column' is required with a 'unit_column' (batches with both columns)"
        )
    specific = {key: rest.pop(key) for key in list(rest) if key in SPECIFIC_KEYS}
    common, keys = transform._options(
        rest, defaults=_FAMILY_DEFAULTS, key_batches=value_column is not None
    )
    common.windows_per_unit(unit_column is None)  # one window per record at record level
    grid = make_grid(
        own.get("grid", "uniform"),
        float(lower),
        float(upper),
        own.get("num_points", default_points),
    )
    values = ValueParams(common, keys, grid, unit_column, value_column, int(max_contributions))
    return values, specific


# The keywords of one statistic (not shared with the mean, nor with the selections).
SPECIFIC_KEYS = frozenset(
    _QuantileArgs.__optional_keys__ - _ValueOptions.__optional_keys__
) | frozenset(_MeanArgs.__optional_keys__ - _ValueOptions.__optional_keys__)
