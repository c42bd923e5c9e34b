"""What the grid statistics share: options, the grid histogram, the release record, auto bounds.

The quantiles (:mod:`beam_dp.beam.quantiles`), the mean (:mod:`beam_dp.beam.mean`) and the CDF
(:mod:`beam_dp.beam.cdf`) read their values on a public grid:

* :func:`take_grid_options` validates the :class:`~beam_dp.beam._transform.GridOptions` into
  :class:`GridParams` (grid, columns, the contribution bound, an ``"auto"`` bound);
* :class:`GridHistogramFn` is the one accumulation rule (a
  :class:`~beam_dp.summaries.histogram.GridHistogram` over the grid's slots);
* :meth:`GridReleaseSpec.record` is the one place a grid selection becomes a
  :class:`~beam_dp.release.Release`;
* an ``"auto"`` bound (``max_contributions="auto"``, ``max_keys_per_unit="auto"``; DP key
  selection's ``max_candidates_per_unit="auto"`` too): :func:`auto_bound_spec` divides each
  release's epsilon between the bound choice and the statistic, with a plan per candidate
  bound, and :func:`expand_auto_bound` wires it: the data bounded at the public cap, the exact
  histogram of rows (keys) per unit merged per window, one exact choice
  (:func:`~beam_dp.summaries.contribution_bounds.choose_bound`, a singleton side input),
  every unit re-sampled at the chosen bound, the statistic at that bound.

**Privacy** of an ``"auto"`` bound: the choice and the statistic share the release's epsilon
(:func:`~beam_dp.summaries.contribution_bounds.split_epsilon`; the choice's sensitivity is
multiplied by the ``m`` counts one unit holds); under zCDP the statistic keeps
``1 - bound_share`` of the epsilon and the choice gets the rest of the rho. Only the chosen
bound (a DP output) travels as a side input; the exact histogram is read only by the choice,
and re-sampling keeps rows uniformly per unit (salted per run). The rules of units, keys and
windows: ``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import AsSingleton, PCollection

from beam_dp._validation import check_positive_int, check_probability_open
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho
from beam_dp.batching import KEY, UNIT, VALUE, ColumnBatch, ContributionBounds, bound_rows, num_rows
from beam_dp.beam._calls import MapFn, MapWithSideFn
from beam_dp.beam._transform import (
    CommonOptions,
    GridLike,
    GridOptions,
    PrivateTransform,
    ResolvedBudget,
    check_column,
    check_privacy_unit,
    divide_budget,
    take_options,
)
from beam_dp.mechanisms import RandomSource
from beam_dp.release import Release, make_release
from beam_dp.summaries.contribution_bounds import (
    BOUND_RULES,
    DEFAULT_ALPHA,
    DEFAULT_CAP,
    DEFAULT_RULE,
    DEFAULT_SHARE,
    BoundChoice,
    BoundRule,
    candidate_bounds,
    choose_bound,
    split_epsilon,
)
from beam_dp.summaries.grids import parse_resolution, resolution_grid
from beam_dp.summaries.histogram import ExactSum, Grid, GridHistogram
from beam_dp.summaries.quantiles import MeanPlan, MeanSelection, QuantilePlan, QuantileSelection
from beam_dp.summaries.quantiles.mean import NoisyMean

if TYPE_CHECKING:
    from beam_dp.beam._graph import Wiring

__all__ = [
    "GRID_DEFAULTS",
    "AutoBound",
    "AutoBoundSpec",
    "CountHistogramFn",
    "GridHistogramFn",
    "GridParams",
    "GridReleaseSpec",
    "KeyShare",
    "auto_bound_spec",
    "check_auto_bound",
    "expand_auto_bound",
    "keys_per_unit_histogram",
    "make_grid",
    "merge_into_first",
    "rebound_keys",
    "rebound_rows",
    "release_at_choice",
    "rows_per_unit_histogram",
    "take_grid_options",
    "values_of",
]

#: The grid statistics' defaults that differ from the selections' (``.PerKey``).
GRID_DEFAULTS: Mapping[str, Any] = {"key_column": "key", "max_keys_per_unit": 1}
#: The keywords of :class:`~beam_dp.beam._transform.GridOptions`.
GRID_KEYS = frozenset(GridOptions.__required_keys__ | GridOptions.__optional_keys__)


# ------------------------------------------------------------------------------- options


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


@dataclass(frozen=True)
class GridParams:
    """The validated :class:`~beam_dp.beam._transform.GridOptions` of one transform, with its
    shared options (:class:`~beam_dp.beam._transform.CommonOptions`)."""

    options: CommonOptions
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
        return self.options.keys_per_unit(self.record_level)

    def ledger_bounds(self) -> dict[str, int]:
        """Every contribution bound a release records (a chosen bound: its cap here)."""
        bounds = self.options.unit_bounds(self.record_level)
        if self.record_level:
            bounds["max_contributions_per_unit"] = 1
        else:
            bounds["max_contributions_per_unit"] = self.max_contributions
            if self.auto is not None and self.auto.target == "rows":
                bounds["max_contributions_cap"] = self.auto.cap  # each release: the chosen one
        keys = self.options.key_bounds(self.record_level)
        if self.auto is not None and self.auto.target == "keys":
            keys["max_keys_per_unit_cap"] = self.auto.cap  # each release: the chosen one
        return {**bounds, **keys, "max_windows_per_unit": self.options.max_windows_per_unit}

    def spec_fields(self, budget: ResolvedBudget) -> dict[str, Any]:
        """The fields every grid release records (:class:`GridReleaseSpec`): ``budget`` is one
        release's (one key and window; :meth:`CommonOptions.per_release`) with the release
        name."""
        return {
            "name": budget.name,
            "relation": self.options.relation,
            "epsilon": float(budget.epsilon),
            "rho": budget.rho,
            "bounds": self.ledger_bounds(),
            "confidence": self.options.confidence,
            "rng": self.options.rng,
        }

    def wiring(self, combine_fn: beam.CombineFn) -> Wiring:
        """The one per-key, per-window path (:class:`~beam_dp.beam._graph.Wiring`)."""
        encode = None
        if self.value_column is not None:
            encode = self.options.encode_options(
                self.unit_column, {"value_column": self.value_column}
            )
        bounds = None
        if not self.record_level:
            bounds = ContributionBounds(
                max_contributions_per_unit=self.max_contributions,
                max_keys_per_unit=self.options.max_keys_per_unit,
            )
        return self.options.wiring(
            combine_fn, record_level=self.record_level, encode=encode, bounds=bounds
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
            "relation": self.options.relation,
            "method": self.options.method,
        }
        if self.options.keys is not None:
            shown["num_keys"] = len(self.options.keys)
        return shown


def take_grid_options(
    variant: PrivateTransform,
    own: Mapping[str, Any],
    shared: Mapping[str, Any],
    default_points: int,
) -> tuple[GridParams, dict[str, Any]]:
    """Validate a grid statistic's keywords (:func:`~beam_dp.beam._transform.check_keywords`
    split them): its grid options and the shared ones; return them with the statistic's
    other own keywords."""
    values = {key: value for key, value in own.items() if key in GRID_KEYS}
    specific = {key: value for key, value in own.items() if key not in GRID_KEYS}
    lower, upper = values["lower"], values["upper"]
    unit_column = values.get("unit_column")
    check_privacy_unit(unit_column, shared.get("record_level", False))  # before what needs it
    value_column = values.get("value_column", "value")
    max_contributions = values.get("max_contributions", 1)
    Grid.uniform(lower, upper, 2)  # validates the bounds
    check_column(unit_column, "unit_column", optional=True)
    check_column(value_column, "value_column", optional=True)
    if isinstance(max_contributions, str) and max_contributions != "auto":
        raise ValueError(
            f"'max_contributions' must be an integer >= 1 or 'auto'; received {max_contributions!r}"
        )
    keys_auto = isinstance(shared.get("max_keys_per_unit"), str) and (
        shared["max_keys_per_unit"] == "auto"
    )
    if keys_auto:
        # bound at the cap (every public key) first; the chosen number of keys then applies
        shared = {**shared, "max_keys_per_unit": None}
        if unit_column is None:
            raise ValueError(
                "max_keys_per_unit='auto' needs a 'unit_column': with unit_column=None "
                "(record-level privacy) every record is its own unit and reaches one key"
            )
        if isinstance(max_contributions, str) and max_contributions == "auto":
            raise ValueError(_TWO_AUTOS)  # before the row bound is checked as an integer
        auto = None
    else:
        auto = check_auto_bound(max_contributions, values)
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
    options = take_options(
        variant,
        shared,
        unit_column=unit_column,
        defaults=GRID_DEFAULTS,
        key_batches=value_column is not None,
    )
    options.windows_per_unit(unit_column is None)  # one window per record at record level
    if "resolution" in values:
        if "grid" in values:
            raise ValueError("give 'resolution' or 'grid', not both")
        num_points = values.get("num_points", default_points)
        check_positive_int(num_points, "num_points")
        grid = resolution_grid(
            float(lower), float(upper), check_resolution(values["resolution"]), int(num_points)
        )
    else:
        grid = make_grid(
            values.get("grid", "uniform"),
            float(lower),
            float(upper),
            values.get("num_points", default_points),
        )
    if keys_auto:
        assert options.keys is not None  # a per-key option given to .Globally is refused
        auto = check_auto_bound(max_contributions, values, num_keys=len(options.keys))
    params = GridParams(options, grid, unit_column, value_column, int(max_contributions), auto)
    return params, specific


# ------------------------------------------------------------------------ the grid histogram


def values_of(element: Any) -> npt.NDArray[np.float64]:
    """The values of one element: an encoded column batch, an array or a number."""
    if isinstance(element, Mapping):
        column = element.get(VALUE)
        if column is None:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(column, dtype=np.float64)
    if isinstance(element, (int, float, np.integer, np.floating)) and not isinstance(element, bool):
        return np.array([element], dtype=np.float64)
    try:
        return np.asarray(element, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        # numpy's message may quote the value: never passed on.
        raise TypeError(
            "with value_column=None, elements must be numbers or arrays of numbers; "
            f"received type {type(element).__name__}"
        ) from None


_Mergeable = TypeVar("_Mergeable", GridHistogram, ExactSum)


def merge_into_first(accumulators: Iterable[_Mergeable]) -> _Mergeable:
    """Beam's contract: merge every accumulator into the first one (the only one modified)."""
    iterator = iter(accumulators)
    first = next(iterator)
    for other in iterator:
        first.merge(other)
    return first


class GridHistogramFn(beam.CombineFn):
    """The values' histogram over a public grid's slots: the one accumulation rule.

    The accumulator is a :class:`~beam_dp.summaries.histogram.GridHistogram` (an int64 array
    over the grid's slots, sparse while few are used): batches are binned with numpy,
    ``merge_accumulators`` adds into the first accumulator, ``compact`` shrinks it before a
    shuffle. Subclasses (quantiles, CDF) say what ``extract_output`` releases. Nothing about
    the data leaves this class except through that release.
    """

    def __init__(self, grid: Grid) -> None:
        super().__init__()
        self._grid = grid

    def create_accumulator(self) -> GridHistogram:
        return GridHistogram(self._grid.num_slots)

    def add_input(self, accumulator: GridHistogram, element: Any) -> GridHistogram:
        values = values_of(element)
        if values.size:
            accumulator.add_slots(self._grid.slots(values))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[GridHistogram]) -> GridHistogram:
        return merge_into_first(accumulators)

    def compact(self, accumulator: GridHistogram) -> GridHistogram:
        return accumulator.compact()


# ------------------------------------------------------------------------ the release record


_Spec = TypeVar("_Spec", bound="GridReleaseSpec")


@dataclass(frozen=True, kw_only=True)
class GridReleaseSpec:
    """What every grid statistic records (quantiles, mean): public, fixed at construction.

    Built from a transform's options by :meth:`GridParams.spec_fields`; :meth:`record` is the one
    place a grid selection becomes a :class:`~beam_dp.release.Release`. With
    ``max_contributions="auto"``, ``auto`` holds the plan at every candidate bound and
    :meth:`for_choice` the spec at the chosen one (``chosen``).
    """

    name: str
    relation: str
    epsilon: float
    rho: float | None
    bounds: Mapping[str, int]
    confidence: float
    rng: RandomSource | None
    auto: AutoBoundSpec | None = None
    chosen: BoundChoice | None = None

    def for_choice(self: _Spec, choice: BoundChoice) -> _Spec:
        """This spec at the privately chosen bound: its plan, bounds and record.

        With ``max_keys_per_unit="auto"`` each key's epsilon (and rho) depends on the chosen
        number of keys too: the release records that key's share (:class:`KeyShare`).
        """
        if self.auto is None:
            raise ValueError("for_choice applies only with an 'auto' bound")
        plan = self.auto.plans[choice.bound]
        if self.auto.target == "rows":
            bounds = {**self.bounds, "max_contributions_per_unit": int(choice.bound)}
            return dataclasses.replace(
                self,
                plan=plan,
                bounds=bounds,
                chosen=choice,  # type: ignore[call-arg]
            )
        assert self.auto.per_bound is not None
        share = self.auto.per_bound[choice.bound]
        auto = dataclasses.replace(
            self.auto,
            key_epsilon=share.key_epsilon,
            bound_epsilon=share.bound_epsilon,
            statistic_epsilon=share.statistic_epsilon,
            bound_rho=share.bound_rho,
            statistic_rho=share.statistic_rho,
        )
        return dataclasses.replace(
            self,
            plan=plan,  # type: ignore[call-arg]
            bounds={**self.bounds, "max_keys_per_unit": int(choice.bound)},
            chosen=choice,
            auto=auto,
            epsilon=float(share.key_epsilon),
            rho=None if share.key_rho is None else float(share.key_rho),
        )

    def release_merged(self, accumulator: Any) -> Release:
        """The release of a merged accumulator (the statistic's selection, then its record)."""
        raise NotImplementedError

    def record(
        self,
        selection: QuantileSelection | MeanSelection | NoisyMean,
        *,
        statistic: str,
        value: Any,
        mechanism: str,
        **fields: Any,
    ) -> Release:
        """The release of ``selection``: this spec's ε (ρ), relation, bounds and confidence;
        ``fields`` are the statistic's own (accuracy, statement, rounds).

        With ``auto``, the release is charged its whole epsilon, the bound choice's share and
        the statistic's part; its accuracy (stated at the statistic's part) records both.
        """
        if self.auto is not None:
            extra = dict(fields.pop("extra_accuracy", None) or {})
            extra["epsilon_bound_choice"] = float(self.auto.bound_epsilon)
            extra["epsilon_statistic"] = float(self.auto.statistic_epsilon)
            if self.auto.bound_rho is not None and self.auto.statistic_rho is not None:
                extra["rho_bound_choice"] = float(self.auto.bound_rho)
                extra["rho_statistic"] = float(self.auto.statistic_rho)
            fields["extra_accuracy"] = extra
        return make_release(
            name=self.name,
            statistic=statistic,
            value=value,
            mechanism=mechanism,
            epsilon=self.epsilon,
            sensitivity=selection.sensitivity,
            neighbouring=self.relation,
            monotone=False,
            num_candidates=selection.num_candidates,
            contribution_bounds=self.bounds,
            confidence=self.confidence,
            rho=self.rho,
            rng_secure=selection.secure,
            **fields,
        )


@dataclass(frozen=True)
class KeyShare:
    """One key's budget at a candidate number of keys ``K`` (``max_keys_per_unit="auto"``).

    A unit reaches at most ``K`` keys: each key's release is charged ``key_epsilon`` (``key_rho``
    under zCDP), the sum of its part of the one choice (``bound_*``) and of its statistic
    (``statistic_*``), so that ``K`` of them compose to the window's budget.
    """

    key_epsilon: Fraction
    bound_epsilon: Fraction
    statistic_epsilon: Fraction
    bound_rho: Fraction | None = None
    statistic_rho: Fraction | None = None
    key_rho: Fraction | None = None


@dataclass(frozen=True)
class AutoBoundSpec:
    """``max_contributions="auto"``: the bound choice and the plans at every candidate (public).

    Attributes:
        candidates: the public candidate bounds (powers of two up to ``cap``).
        cap: the cap the rows were first bounded at, and the histogram's last count.
        rule, alpha: the bound rule (:func:`~beam_dp.summaries.contribution_bounds.choose_bound`).
        choice_epsilon: epsilon of the one bound choice per window: ``share`` of each key's
            epsilon times ``counts_per_unit`` (the keys one unit reaches, each spending its
            share on the one choice).
        key_epsilon: each release's recorded epsilon (what it is charged).
        bound_epsilon, statistic_epsilon: the two parts of ``key_epsilon`` (they sum to it).
        counts_per_unit: counts of the histogram one unit can hold (its keys).
        method, relation: of the choice (those of the statistic).
        plans: the statistic's plan (quantiles or mean) at each candidate bound, at
            ``statistic_epsilon``.
        bound_rho, statistic_rho: under zCDP, each key's rho for the choice and for the
            statistic (they sum to at most the release's rho); None otherwise.
        target: ``"rows"`` (``max_contributions="auto"``) or ``"keys"``
            (``max_keys_per_unit="auto"``: ``counts_per_unit`` is 1, one count of keys per
            unit, and the per-key fields above are those at the cap until
            :meth:`GridReleaseSpec.for_choice` replaces them with ``per_bound[K]``).
        per_bound: with ``"keys"``, each candidate's :class:`KeyShare`.
    """

    candidates: tuple[int, ...]
    cap: int
    rule: str
    alpha: Fraction
    choice_epsilon: Fraction
    key_epsilon: Fraction
    bound_epsilon: Fraction
    statistic_epsilon: Fraction
    counts_per_unit: int
    method: str
    relation: str
    plans: Mapping[int, QuantilePlan | MeanPlan]
    bound_rho: Fraction | None = None
    statistic_rho: Fraction | None = None
    target: str = "rows"
    per_bound: Mapping[int, KeyShare] | None = None

    def choose(self, counts: Any, rng: RandomSource | None) -> BoundChoice:
        """The private choice from the merged histogram of rows (or keys) per unit
        (``choice_epsilon``-DP; each unit holds ``counts_per_unit`` of its counts)."""
        return choose_bound(
            counts,
            epsilon=self.choice_epsilon,
            rule=self.rule,
            alpha=self.alpha,
            relation=self.relation,
            counts_per_unit=self.counts_per_unit,
            method=self.method,
            rng=rng,
        )


def release_at_choice(
    element: tuple[Any, Any], choice: BoundChoice, spec: GridReleaseSpec
) -> tuple[Any, Release]:
    """``(key, merged accumulator)`` to ``(key, release)`` at the chosen bound (its plan and
    the statistic's part of epsilon; all plans are public, made at construction)."""
    key, accumulator = element
    return key, spec.for_choice(choice).release_merged(accumulator)


# ------------------------------------------------------------------- auto bounds: the budget


def _divide_for_choice(
    values: GridParams,
    rho: float | None,
    key_epsilon: Fraction,
    *,
    rounds: int,
    counts_per_unit: int,
) -> tuple[Fraction, KeyShare]:
    """``(choice_epsilon, key share)``: one key's epsilon divided between its part of the one
    bound choice and its statistic, the choice charged to the ``counts_per_unit`` keys' parts.

    Basic composition: the choice gets ``share`` of each key's epsilon, times the keys.
    zCDP: the statistic runs at ``(1 - share)`` of the key's epsilon and costs
    ``rate * eps_s^2 / rounds``; the choice gets the rest of the rho of each key a unit
    reaches: ``rate * eps_b^2 <= counts_per_unit * (rho - that cost)``.
    """
    auto = values.auto
    assert auto is not None
    bound_epsilon, statistic_epsilon = split_epsilon(key_epsilon, auto.share)
    bound_rho = statistic_rho = None
    choice_epsilon = bound_epsilon * counts_per_unit
    if rho is not None:
        rate = ZCDP_RATE[privacy_kind(values.options.method)]
        statistic_rho = rate * statistic_epsilon**2 / rounds
        bound_rho = Fraction(rho) - statistic_rho
        if bound_rho <= 0:  # pragma: no cover - rho >= rate * eps^2 / rounds by construction
            raise ValueError("the zCDP share leaves nothing for the bound choice")
        choice_epsilon = Fraction(
            epsilon_per_round_for_rho(float(bound_rho * counts_per_unit), rate, 1)
        )
        while rate * choice_epsilon**2 > bound_rho * counts_per_unit:  # float rounding
            choice_epsilon = Fraction(math.nextafter(float(choice_epsilon), 0.0))
        bound_epsilon = choice_epsilon / counts_per_unit
    share = KeyShare(
        key_epsilon=key_epsilon,
        bound_epsilon=bound_epsilon,
        statistic_epsilon=statistic_epsilon,
        bound_rho=bound_rho,
        statistic_rho=statistic_rho,
        key_rho=None if rho is None else Fraction(rho),
    )
    return choice_epsilon, share


def auto_bound_spec(
    values: GridParams,
    rho: float | None,
    key_epsilon: Fraction,
    *,
    rounds: int,
    plan_at: Callable[[int, Fraction], QuantilePlan | MeanPlan],
    window: ResolvedBudget | None = None,
) -> AutoBoundSpec:
    """The public half of an ``"auto"`` bound: the epsilon's division and a plan per candidate.

    Args:
        values: the statistic's value options (``values.auto`` set).
        rho: each key's rho under zCDP, else None.
        key_epsilon: each release's epsilon (one key's, after the division over keys).
        rounds: the statistic's rounds (its zCDP cost is ``rate * eps^2 / rounds``).
        plan_at: the statistic's plan at a row bound and an epsilon (quantiles or mean).
        window: with ``max_keys_per_unit="auto"``, the budget of one window (before the division
            over keys): each candidate ``K`` divides it over ``K`` keys
            (:func:`~beam_dp.beam._transform.divide_budget`), and the one choice runs at the
            smallest epsilon any ``K`` leaves it, so every ``K``'s account covers it.
    """
    auto = values.auto
    assert auto is not None
    if auto.target == "rows":
        choice_epsilon, share = _divide_for_choice(
            values, rho, key_epsilon, rounds=rounds, counts_per_unit=values.keys_per_unit
        )
        per_bound = None
        plans = {bound: plan_at(bound, share.statistic_epsilon) for bound in auto.candidates}
    else:
        if window is None:
            raise ValueError("max_keys_per_unit='auto' needs the window's budget")
        per_bound = {}
        choices = []
        for bound in auto.candidates:
            key_budget = divide_budget(window, keys_per_unit=bound)
            choice, per_bound[bound] = _divide_for_choice(
                values,
                key_budget.rho,
                Fraction(key_budget.epsilon),
                rounds=rounds,
                counts_per_unit=bound,
            )
            choices.append(choice)
        choice_epsilon = min(choices)
        share = per_bound[auto.candidates[-1]]
        plans = {
            bound: plan_at(values.max_contributions, per_bound[bound].statistic_epsilon)
            for bound in auto.candidates
        }
    return AutoBoundSpec(
        candidates=auto.candidates,
        cap=auto.candidates[-1],
        rule=auto.rule,
        alpha=auto.alpha,
        # Each of the unit's keys spends its share on the one choice.
        choice_epsilon=choice_epsilon,
        key_epsilon=share.key_epsilon,
        bound_epsilon=share.bound_epsilon,
        statistic_epsilon=share.statistic_epsilon,
        counts_per_unit=values.keys_per_unit if auto.target == "rows" else 1,
        method=values.options.method,
        relation=values.options.relation,
        plans=plans,
        bound_rho=share.bound_rho,
        statistic_rho=share.statistic_rho,
        target=auto.target,
        per_bound=per_bound,
    )


# -------------------------------------------------------------------- auto bounds: the graph


def _choose(counts: Any, auto: AutoBoundSpec, rng: Any) -> BoundChoice:
    return auto.choose(counts, rng)


def _rebound(element: tuple[Any, Any], choice: BoundChoice, salt: int) -> tuple[Any, Any]:
    key, batch = element
    return key, rebound_rows(batch, choice.bound, salt)


def _histogram_of(element: tuple[Any, Any], cap: int) -> Any:
    return rows_per_unit_histogram(element[1], cap)


def expand_auto_bound(
    pcoll: PCollection,
    wiring: Wiring,
    spec: Any,
    auto: AutoBoundSpec,
    merge: beam.CombineFn,
    *,
    release: Callable[[tuple[Any, Any], BoundChoice, Any], tuple[Any, Any]] = release_at_choice,
) -> PCollection:
    """Bound at the cap, choose the bound privately per window, re-bound, release.

    ``merge`` combines a key's re-bounded batches into the accumulator that
    ``release(element, choice, spec)`` releases: by default :func:`release_at_choice`, which
    calls ``spec.release_merged`` (the quantiles' merge yields a grid histogram, the mean's an
    exact sum); DP key selection passes its own (its accumulator holds distinct-unit counts
    per label). ``spec.rng`` draws the choice.

    The rows kept at the cap (a uniform sample per unit, and ``max_keys_per_unit`` keys)
    give the histogram of rows per unit (per (unit, key) for ``.PerKey``: a unit holds
    ``m`` of its counts, and the choice's sensitivity is multiplied by ``m``); one exact
    selection chooses ``b`` (a singleton side input per window); every unit's rows are
    then re-sampled to ``b`` per key and the quantiles run at ``b``.
    """
    if auto.target == "keys":
        return _expand_auto_keys(pcoll, wiring, spec, auto, merge)
    keyed = wiring.keyed_input(pcoll)  # every window that releases has a marker
    choice = (
        keyed
        | "RowsPerUnit" >> beam.ParDo(MapFn(_histogram_of, auto.cap))
        | "MergeRowsPerUnit" >> beam.CombineGlobally(CountHistogramFn(auto.cap)).without_defaults()
        | "ChooseBound" >> beam.Map(_choose, auto, spec.rng)
    )
    salt = wiring.salt if wiring.salt is not None else secrets.randbits(64)
    releases = (
        keyed
        | "ReboundToChoice" >> beam.ParDo(MapWithSideFn(_rebound, salt), AsSingleton(choice))
        | "MergePerKey" >> beam.CombinePerKey(merge)
        | "Select" >> beam.ParDo(MapWithSideFn(release, spec), AsSingleton(choice))
    )
    return wiring.label(releases)


def _keys_histogram_of(batch: Any, cap: int) -> Any:
    return keys_per_unit_histogram(batch, cap)


def _no_keys(_: Any, cap: int) -> Any:
    return np.zeros(cap + 1, dtype=np.int64)


def _rebound_keys_to(batch: Any, choice: BoundChoice, salt: int) -> Any:
    return rebound_keys(batch, choice.bound, salt)


def _expand_auto_keys(
    pcoll: PCollection,
    wiring: Wiring,
    spec: GridReleaseSpec,
    auto: AutoBoundSpec,
    merge: beam.CombineFn,
) -> PCollection:
    """``max_keys_per_unit="auto"``: choose the number of keys per unit, re-bound, release.

    The batches out of the bounding hold every row of their units, at most the cap of keys
    each; before they are split by key, each unit adds one count to the histogram of keys
    per unit (plus an empty histogram per releasing window, so every window chooses). One
    exact selection chooses ``K`` (a singleton side input per window); every unit then keeps
    a uniform ``K`` of its keys (salted as the rows' re-bound: the run's salt when one is
    given, so a run is reproducible, a fresh one otherwise), the batches are split by key,
    and each key's statistic runs at its share of the window's budget at ``K``
    (:class:`KeyShare`).
    """
    batches = wiring.unit_batches(pcoll)
    markers = wiring.markers(pcoll)  # for the choice and the releases
    choice = (
        (
            batches | "KeysPerUnit" >> beam.ParDo(MapFn(_keys_histogram_of, auto.cap)),
            markers | "NoKeys" >> beam.Map(_no_keys, auto.cap),
        )
        | "WithEveryWindow" >> beam.Flatten()
        | "MergeKeysPerUnit" >> beam.CombineGlobally(CountHistogramFn(auto.cap)).without_defaults()
        | "ChooseKeys" >> beam.Map(_choose, auto, spec.rng)
    )
    salt = wiring.salt if wiring.salt is not None else secrets.randbits(64)
    rebounded = batches | "ReboundKeysToChoice" >> beam.ParDo(
        MapWithSideFn(_rebound_keys_to, salt), AsSingleton(choice)
    )
    releases = (
        wiring.keyed_batches(pcoll, rebounded, markers)
        | "MergePerKey" >> beam.CombinePerKey(merge)
        | "Select" >> beam.ParDo(MapWithSideFn(release_at_choice, spec), AsSingleton(choice))
    )
    return wiring.label(releases)


# ------------------------------------------------------- auto bounds: rows and keys per unit


def rows_per_unit_histogram(batch: ColumnBatch, cap: int) -> npt.NDArray[np.int64]:
    """How many (unit, key) groups of ``batch`` hold ``c`` rows, ``c`` capped at ``cap``.

    ``batch`` must hold every row of its units (per key, per window), as the batches out of
    :class:`BoundContributions` do (and their per-key splits). Without a ``KEY`` column a
    group is a unit. Returns an int64 array of length ``cap + 1`` (index 0 is always 0).

    **Privacy:** exact counts: the input of a private bound choice
    (:func:`beam_dp.summaries.contribution_bounds.choose_bound`), never released as such.
    """
    histogram = np.zeros(int(cap) + 1, dtype=np.int64)
    if not num_rows(batch) or UNIT not in batch:
        return histogram
    if KEY in batch:
        pairs = np.stack([batch[UNIT].view(np.int64), batch[KEY].astype(np.int64)])
        _, counts = np.unique(pairs, axis=1, return_counts=True)
    else:
        _, counts = np.unique(batch[UNIT], return_counts=True)
    histogram += np.bincount(np.minimum(counts, int(cap)), minlength=int(cap) + 1)
    return histogram


def keys_per_unit_histogram(batch: ColumnBatch, cap: int) -> npt.NDArray[np.int64]:
    """How many units of ``batch`` hold rows of ``c`` distinct keys, ``c`` capped at ``cap``.

    ``batch`` must hold every row of its units (all their keys, per window): the batches out
    of :class:`BoundContributions`, *before* they are split by key. Each unit adds exactly
    one count, so the histogram of neighbours differs by one count (add/remove) or moves one
    count (replace). Returns an int64 array of length ``cap + 1``.

    **Privacy:** exact counts: the input of a private bound choice, never released as such.
    """
    histogram = np.zeros(int(cap) + 1, dtype=np.int64)
    if not num_rows(batch) or UNIT not in batch or KEY not in batch:
        return histogram
    pairs = np.unique(np.stack([batch[UNIT].view(np.int64), batch[KEY].astype(np.int64)]), axis=1)
    _, keys = np.unique(pairs[0], return_counts=True)
    histogram += np.bincount(np.minimum(keys, int(cap)), minlength=int(cap) + 1)
    return histogram


class CountHistogramFn(beam.CombineFn):
    """The sum of rows-per-unit histograms of one length (``cap + 1``): an exact merge."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self._cap = int(cap)

    def create_accumulator(self) -> npt.NDArray[np.int64]:
        return np.zeros(self._cap + 1, dtype=np.int64)

    def add_input(
        self, accumulator: npt.NDArray[np.int64], element: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        accumulator += element
        return accumulator

    def merge_accumulators(
        self, accumulators: Iterable[npt.NDArray[np.int64]]
    ) -> npt.NDArray[np.int64]:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            first += other
        return first

    def extract_output(self, accumulator: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return accumulator


def rebound_rows(batch: ColumnBatch, max_contributions: int, salt: int) -> ColumnBatch:
    """Keep a uniform sample of ``max_contributions`` rows of every (unit, key) of ``batch``.

    For batches already bounded at a larger cap by :class:`BoundContributions` (which keeps
    a uniform sample of at most the cap rows): a uniform sample of a uniform sample is a
    uniform sample of ``min(rows, max_contributions)`` of the unit's rows.

    **Privacy:** a function of each unit's own rows and the salt, as :func:`bound_rows`.
    """
    if not num_rows(batch):
        return batch
    return bound_rows(
        batch, ContributionBounds(max_contributions_per_unit=int(max_contributions)), salt
    )


def rebound_keys(batch: ColumnBatch, max_keys_per_unit: int, salt: int) -> ColumnBatch:
    """Keep the rows of ``max_keys_per_unit`` keys of every unit of ``batch``, chosen uniformly.

    For batches that hold every row of their units, already bounded at a larger key cap by
    :class:`BoundContributions`: a uniform subset of a uniform subset of a unit's keys is a
    uniform subset of ``min(keys, max_keys_per_unit)`` of them; rows per kept key are as
    they were.

    **Privacy:** a function of each unit's own rows and the salt, as :func:`bound_rows`.
    """
    if not num_rows(batch):
        return batch
    bounds = ContributionBounds(
        max_contributions_per_unit=None, max_keys_per_unit=int(max_keys_per_unit)
    )
    return bound_rows(batch, bounds, salt)
