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
from fractions import Fraction
from typing import Any, Literal, Required, TypedDict

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from beam_dp._validation import check_positive_int, check_probability_open
from beam_dp.batching import ContributionBounds
from beam_dp.beam.options import (
    CommonOptions,
    KeyOptions,
    PerKeyOptions,
    PrivateOptions,
    check_column,
    check_privacy_unit,
)
from beam_dp.beam.plan import Plan, PrivateTransform
from beam_dp.summaries.contribution_bounds import (
    BOUND_RULES,
    DEFAULT_ALPHA,
    DEFAULT_CAP,
    DEFAULT_RULE,
    DEFAULT_SHARE,
    BoundRule,
    candidate_bounds,
)
from beam_dp.summaries.grids import parse_resolution, resolution_grid
from beam_dp.summaries.histogram import Grid

__all__ = [
    "AutoBound",
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
    "key_column": "key",
    "max_keys_per_unit": 1,
}


# ------------------------------------------------------------------------------ options


class _ValueOptions(TypedDict, total=False):
    """What every transform of this module reads and clamps (declared once).

    Attributes:
        lower, upper: required: public clamping bounds (finite, ``lower < upper``): values
            outside are clamped, NaN and null values dropped.
        unit_column: the privacy-unit field; without one, ``record_level=True`` (a shared
            option) is required.
        value_column: the numeric field of the input batches (default ``"value"``); None when
            the elements are numbers or arrays of numbers (``.PerKey``: ``(key, values)``
            pairs), which is record-level only.
        grid: ``"uniform"`` (default), ``"log"`` (for heavy tails; needs ``lower > 0``),
            explicit points inside ``[lower, upper]``, or a ``Grid``.
        num_points: grid size for ``"uniform"`` and ``"log"`` (2 to ``MAX_GRID_POINTS``;
            default 10^6 for quantiles, 10^4 for the mean).
        max_contributions: values kept per privacy unit (needs ``unit_column``); the
            sensitivity is multiplied by it. ``"auto"``: chosen privately per window from the
            histogram of rows per unit (per (unit, key) for ``.PerKey``) with ``bound_share``
            of the statistic's epsilon (:class:`AutoBound`; quantiles, min, max and mean).
        max_keys_per_unit: (``.PerKey``) ``"auto"`` chooses the number of keys per unit
            privately per window from the histogram of distinct keys per unit (one count per
            unit), among the powers of two up to the number of public keys, with
            ``bound_share`` of the window's epsilon; each key then runs at its share of the
            window's budget over the chosen ``K`` keys. Not together with
            ``max_contributions="auto"``.
        bound_share: with an ``"auto"`` bound, the share of epsilon spent on choosing it
            (default 1/10; strictly between 0 and 1).
        bound_cap: with ``max_contributions="auto"``, the largest candidate bound (default
            1024; candidates are the powers of two up to it; counts above it are counted at
            it). With ``max_keys_per_unit="auto"`` the cap is the number of public keys.
        bound_rule: ``"quantile"`` (default) or ``"tradeoff"``
            (:mod:`beam_dp.summaries.contribution_bounds`).
        bound_alpha: the quantile of rows per unit the ``"quantile"`` rule targets
            (default 0.9).
        resolution: the column's resolution (``"integer"`` or 1 for integers, ``"0.01"``
            for cents): the grid is then the multiples of it in ``[lower, upper]``
            (:func:`beam_dp.summaries.grids.resolution_grid`, at most ``num_points``
            points). Excludes ``grid``. Default: the uniform grid.
    """

    lower: Required[float]
    upper: Required[float]
    unit_column: str | None
    value_column: str | None
    grid: GridLike
    num_points: int
    max_contributions: int | Literal["auto"]
    bound_share: float | Fraction
    bound_cap: int
    bound_rule: str
    bound_alpha: float | Fraction
    resolution: int | float | str | Fraction


class _QuantileArgs(_ValueOptions, total=False):
    """The quantile family's own options (quantiles, median, min, max).

    Attributes:
        split: for several quantiles: ``"auto"`` (default, chosen by measurement: the joint
            split for two quantiles or more), ``"joint"`` (a Kaplan-Schnapp-Stemmer recursion
            in ``ceil(log3(m + 1))`` rounds whose nodes choose one quantile, or two at once
            with JointExp's utility; pair nodes always use the exponential mechanism, and the
            release is accounted under ``method``, never a tighter account),
            ``"recursive"`` (Kaplan-Schnapp-Stemmer, ``ceil(log2(m + 1))`` rounds) or
            ``"independent"`` (``epsilon / m`` each).
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


@dataclass(frozen=True)
class AutoBound:
    """The public parameters of an ``"auto"`` bound (validated at construction).

    Attributes:
        share: the share of the statistic's epsilon spent on the bound choice.
        cap: the public cap on counts and the largest candidate bound.
        rule: the bound rule (:mod:`beam_dp.summaries.contribution_bounds`).
        alpha: the quantile of the per-unit counts of the ``"quantile"`` rule.
        target: which bound is chosen: ``"rows"`` (``max_contributions="auto"``: rows per
            unit, per key) or ``"keys"`` (``max_keys_per_unit="auto"``: keys per unit; the cap
            is the number of public keys).
    """

    share: Fraction
    cap: int
    rule: BoundRule
    alpha: Fraction
    target: Literal["rows", "keys"] = "rows"

    @property
    def candidates(self) -> tuple[int, ...]:
        """The public candidate bounds (powers of two up to ``cap``)."""
        return candidate_bounds(self.cap)


_AUTO_KEYS = ("bound_share", "bound_cap", "bound_rule", "bound_alpha")


def _exact_fraction(value: object, name: str) -> Fraction:
    """A probability in (0, 1) as the exact decimal it was written as (0.1 is 1/10)."""
    check_probability_open(value, name)  # a number, not NaN, strictly between 0 and 1
    return value if isinstance(value, Fraction) else Fraction(repr(float(value)))  # type: ignore[arg-type]


_TWO_AUTOS = (
    "give 'auto' to one of 'max_contributions' and 'max_keys_per_unit', not both: each "
    "choice is made with the other bound fixed"
)


def check_auto_bound(
    max_contributions: object, own: Mapping[str, Any], *, num_keys: int | None = None
) -> AutoBound | None:
    """The validated ``"auto"`` parameters, or None when no bound is ``"auto"``.

    Args:
        max_contributions: the option as given.
        own: the value options (``bound_*``).
        num_keys: the number of public keys when ``max_keys_per_unit="auto"``, else None.

    Raises:
        ValueError, TypeError: naming the parameter and its rule (a ``bound_*`` option
            without an ``"auto"`` bound is refused: it would do nothing).
    """
    rows = isinstance(max_contributions, str) and max_contributions == "auto"
    if rows and num_keys is not None:
        raise ValueError(_TWO_AUTOS)
    if not rows and num_keys is None:
        given = [key for key in _AUTO_KEYS if key in own]
        if given:
            raise ValueError(
                f"{given[0]!r} applies only with max_contributions='auto' (or "
                f"max_keys_per_unit='auto'); received max_contributions={max_contributions!r}"
            )
        return None
    share = _exact_fraction(own.get("bound_share", DEFAULT_SHARE), "bound_share")
    if num_keys is not None:
        if "bound_cap" in own:
            raise ValueError(
                "'bound_cap' applies only with max_contributions='auto': with "
                "max_keys_per_unit='auto' the cap is the number of public keys"
            )
        if num_keys < 2:
            raise ValueError(
                "max_keys_per_unit='auto' needs at least 2 public keys (one candidate is no "
                f"choice); received {num_keys} key"
            )
        cap = num_keys
    else:
        cap = own.get("bound_cap", DEFAULT_CAP)
        check_positive_int(cap, "bound_cap")
        if int(cap) < 2:
            raise ValueError(
                f"'bound_cap' must be >= 2 (one candidate is no choice); received {cap}"
            )
    rule = own.get("bound_rule", DEFAULT_RULE)
    if rule not in BOUND_RULES:
        raise ValueError(f"'bound_rule' must be one of {list(BOUND_RULES)}; received {rule!r}")
    if rule != "quantile":
        raise ValueError(
            "'bound_rule' must be 'quantile' for the quantile transforms (the 'tradeoff' rule "
            "needs a public noise level per bound, not wired yet); received 'tradeoff'"
        )
    alpha = _exact_fraction(own.get("bound_alpha", DEFAULT_ALPHA), "bound_alpha")
    target: Literal["rows", "keys"] = "keys" if num_keys is not None else "rows"
    return AutoBound(share=share, cap=int(cap), rule="quantile", alpha=alpha, target=target)


def check_resolution(resolution: object) -> Fraction:
    """``resolution`` as an exact decimal: ``"integer"`` is 1 (errors name the parameter)."""
    if resolution == "integer":
        return Fraction(1)
    return parse_resolution(resolution, "resolution")


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
    auto: AutoBound | None = None

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
        bounds = self.common.unit_bounds(self.record_level)
        if self.record_level:
            bounds["max_contributions_per_unit"] = 1
        else:
            bounds["max_contributions_per_unit"] = self.max_contributions
            if self.auto is not None and self.auto.target == "rows":
                bounds["max_contributions_cap"] = self.auto.cap  # each release: the chosen one
        keys = self.keys.ledger_bounds(self.record_level)
        if self.auto is not None and self.auto.target == "keys":
            keys["max_keys_per_unit_cap"] = self.auto.cap  # each release: the chosen one
        return {**bounds, **keys, "max_windows_per_unit": self.windows}

    def spec_fields(self, name: str, epsilon: Fraction, rho: float | None) -> dict[str, Any]:
        """The fields every grid release records (a
        :class:`~beam_dp.beam.quantile_combiners.GridReleaseSpec`): ``epsilon`` and ``rho``
        are one key's (after the split over keys and windows)."""
        return {
            "name": name,
            "relation": self.common.relation,
            "epsilon": float(epsilon),
            "rho": rho,
            "bounds": self.ledger_bounds(),
            "confidence": self.common.confidence,
            "rng": self.common.rng,
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
                **self.common.encode_options(self.unit_column),
                "value_column": self.value_column,
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
    for key in ("lower", "upper"):
        if key not in own:
            raise ValueError(f"{transform.NAMESPACE}.{transform.VARIANT}: {key!r} is required")
    lower, upper = own["lower"], own["upper"]
    unit_column = own.get("unit_column")
    check_privacy_unit(unit_column, rest.get("record_level", False))  # before what needs it
    value_column = own.get("value_column", "value")
    max_contributions = own.get("max_contributions", 1)
    Grid.uniform(lower, upper, 2)  # validates the bounds
    check_column(unit_column, "unit_column", optional=True)
    check_column(value_column, "value_column", optional=True)
    if isinstance(max_contributions, str) and max_contributions != "auto":
        raise ValueError(
            f"'max_contributions' must be an integer >= 1 or 'auto'; received {max_contributions!r}"
        )
    keys_auto = isinstance(rest.get("max_keys_per_unit"), str) and (
        rest["max_keys_per_unit"] == "auto"
    )
    if keys_auto:
        # bound at the cap (every public key) first; the chosen number of keys then applies
        rest = {**rest, "max_keys_per_unit": None}
        if unit_column is None:
            raise ValueError(
                "max_keys_per_unit='auto' needs a 'unit_column': with unit_column=None "
                "(record-level privacy) every record is its own unit and reaches one key"
            )
        if isinstance(max_contributions, str) and max_contributions == "auto":
            raise ValueError(_TWO_AUTOS)  # before the row bound is checked as an integer
        auto = None
    else:
        auto = check_auto_bound(max_contributions, own)
    if auto is not None:
        if unit_column is None:
            raise ValueError(
                "max_contributions='auto' needs a 'unit_column': with unit_column=None "
                "(record-level privacy) every record is its own unit and contributes one value"
            )
        max_contributions = auto.cap  # bounding at the cap first; the chosen b then applies
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
        rest,
        unit_column=unit_column,
        defaults=_FAMILY_DEFAULTS,
        key_batches=value_column is not None,
    )
    common.windows_per_unit(unit_column is None)  # one window per record at record level
    if "resolution" in own:
        if "grid" in own:
            raise ValueError("give 'resolution' or 'grid', not both")
        num_points = own.get("num_points", default_points)
        check_positive_int(num_points, "num_points")
        grid = resolution_grid(
            float(lower), float(upper), check_resolution(own["resolution"]), int(num_points)
        )
    else:
        grid = make_grid(
            own.get("grid", "uniform"),
            float(lower),
            float(upper),
            own.get("num_points", default_points),
        )
    if keys_auto:
        assert keys.keys is not None  # take_options refuses max_keys_per_unit for .Globally
        auto = check_auto_bound(max_contributions, own, num_keys=len(keys.keys))
    values = ValueParams(
        common, keys, grid, unit_column, value_column, int(max_contributions), auto
    )
    return values, specific


# The keywords of one statistic (not shared with the mean, nor with the selections).
SPECIFIC_KEYS = frozenset(
    _QuantileArgs.__optional_keys__ - _ValueOptions.__optional_keys__
) | frozenset(_MeanArgs.__optional_keys__ - _ValueOptions.__optional_keys__)
