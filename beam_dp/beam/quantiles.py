"""Private quantiles, medians, minima, maxima and means on Beam, from grid summaries.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms::

    releases = (
        batches  # pyarrow RecordBatches / Tables (ReadFromParquetBatched), dicts of columns
        | PrivateQuantiles.Globally(
            [0.25, 0.5, 0.75], lower=0.0, upper=500.0, epsilon=1.0,
            unit_column="user_id", value_column="amount", max_contributions=5)
    )

Inside, every ``expand`` is a few lines over a ``CombineFn``:

1. ``EncodeBatches`` turns batches into numpy columns (privacy-unit hash, value, key);
   ``BoundContributions`` (when ``unit_column`` is given) shuffles batches by unit hash and
   keeps at most ``max_contributions`` values per unit (and ``max_keys_per_unit`` keys).
2. :class:`QuantileCombineFn` bins each batch into a
   :class:`~beam_dp.summaries.histogram.GridHistogram` over the public grid with numpy
   (no per-row Python); accumulators merge by addition into the first one and ``compact``
   to their sparse form before a shuffle. Memory is O(grid), never O(rows).
3. ``extract_output`` runs the exact sampler on ``QuantileScore``'s integer scores once per
   window (and key) and returns a :class:`~beam_dp.release.Release`.

This module holds the constructors; the plan, budget split and auto-bound spec they compute
from the public options are :mod:`beam_dp.beam.quantile_spec`, and the graphs that need more
than one combine (``max_contributions="auto"``, ``refine=True``) are
:mod:`beam_dp.beam.quantile_graph`.

Public rules and privacy (see :mod:`beam_dp.summaries.quantiles` for the math):

* **Values**: NaN and null values are bad records (as is a null privacy unit):
  ``on_bad_record="fail"``, the default of every transform and job, raises naming the field;
  ``"skip"`` drops them. Every other value is clamped to ``[lower, upper]``. Neither how
  many were dropped nor how many were clamped is released.
* **Privacy unit**: ``record_level=True`` (without a ``unit_column``, asked for explicitly)
  is record-level privacy (every record is its own unit, nothing is shuffled or bounded; a
  person with ``r`` records is protected only at ``r·ε``). With a ``unit_column``, each
  unit's values are bounded to ``max_contributions`` (default 1 in the library, ``"auto"``
  in the jobs: see the README's "Library and job defaults"; chosen by a per-run salted
  hash) and the sensitivity is multiplied by it.
* **``max_contributions="auto"``** (unit level; quantile transforms and the mean): each
  unit's values are first bounded at ``bound_cap`` (default 1024; with ``max_keys_per_unit``
  keys); the exact histogram of rows per unit (per (unit, key) for ``.PerKey``) is merged
  globally per window and one exact selection
  (:func:`~beam_dp.summaries.contribution_bounds.choose_bound`, rule ``bound_rule``, quantile
  ``bound_alpha``) chooses the bound ``b`` among the powers of two up to the cap with
  ``bound_share`` (default 1/10) of each release's epsilon (times the ``m`` keys a unit
  reaches, whose counts it holds: the choice's sensitivity is multiplied by ``m``); every
  unit's rows are re-sampled uniformly to ``b`` and the quantiles run at ``b`` with the rest.
  Each release is charged its whole epsilon (or rho), as with a fixed bound; its record
  holds the chosen ``b`` (``max_contributions_per_unit``), the cap
  (``max_contributions_cap``) and the two parts (``accuracy.epsilon_bound_choice``,
  ``accuracy.epsilon_statistic``: under basic composition they sum to ``epsilon``); its
  accuracy is at ``b`` and the statistic's part. Under zCDP the statistic keeps
  ``1 - bound_share`` of the release's epsilon and the choice gets the rest of its rho
  (``accuracy.rho_bound_choice`` and ``accuracy.rho_statistic`` sum to at most ``rho``;
  the choice runs at the largest epsilon that rest of the ``m`` keys' rho pays for).
  ``refine=True`` is refused with ``"auto"``.
* **``max_keys_per_unit="auto"``** (``.PerKey``; quantiles, median, min, max and mean): each
  unit first keeps every public key (the cap is their number); before the batches are split
  by key, each unit adds one count to the exact histogram of distinct keys per unit, merged
  per window; one exact selection (the same ``choose_bound``, sensitivity that of one count)
  chooses ``K`` among the powers of two up to the cap with ``bound_share`` of the window's
  budget; every unit then keeps a uniform ``K`` of its keys (fresh salt) and each key's
  statistic runs at its share of the window's budget split over ``K`` keys
  (:func:`~beam_dp.beam.options.split_share`), the choice charged in equal parts to the
  ``K`` keys. Each record holds the chosen ``K`` (``max_keys_per_unit``), the cap
  (``max_keys_per_unit_cap``) and its parts (``accuracy.epsilon_bound_choice``,
  ``accuracy.epsilon_statistic``), so that the ledger's ``K`` entries of a window sum to the
  window's budget. Under zCDP each candidate ``K`` gets its own rho split and the one choice
  runs at the smallest epsilon any ``K`` leaves it. Not together with
  ``max_contributions="auto"``.
* **``resolution``**: the grid of the multiples of the column's resolution
  (:func:`~beam_dp.summaries.grids.resolution_grid`; ``"integer"``, ``"0.01"``), every
  point a value the column can hold (ties: :mod:`beam_dp.summaries.grids`).
* **Relation**: ``"add_remove"`` (default) or ``"replace"``; the many-quantile split adapts
  (:func:`~beam_dp.summaries.quantiles.plan_quantiles`).
* **Budget**: ``epsilon`` is a float or an allocated
  :class:`~beam_dp.accounting.BudgetShare` of mechanism ``method`` and
  ``rounds == plan rounds`` (levels of the recursive split, or the number of quantiles for
  ``split="independent"``); ``Release.ledger.rho`` is set when it is accounted by zCDP.
* **Accuracy**: every release's ``accuracy`` has ``rank_error`` (the bound on
  ``|rank(output) - alpha N|`` beyond the best grid point's, at ``confidence``, max over the
  quantiles), ``cell_width`` (of the grid cells next to the outputs) and ``score_loss``;
  ``Release.statement`` adds the same bound as ``rank_error_beyond_best_grid_point``, what a
  rank means with ties, and a sentence (:func:`beam_dp.release.quantile_statement`). A mean
  states ``value_error`` (``replace``: ± in value units) or ``sum_error`` (``add_remove``:
  ± ``sum_error / N``) and ``grid_error`` (:func:`beam_dp.release.mean_statement`).
* **``.PerKey``**: one release per public key (``keys``; records with other keys are dropped),
  with or without data. A unit influences at most ``m = min(max_keys_per_unit, len(keys))``
  keys (``m = 1`` at record level) in at most ``w = max_windows_per_unit`` windows; each
  release runs at ``ε / (m·w)``, or, with a budget share accounted by zCDP, at ``ρ / (m·w)``
  (``ε / √(m·w)``, rounded down) (:func:`~beam_dp.beam.options.split_share`, shared
  with the selection transforms), and records it, with ``max_keys_per_unit: m`` and
  ``max_windows_per_unit: w`` in its bounds, so the whole transform is ε-DP over all keys
  and windows. Under ``replace`` each key's and window's number of records is public (a
  neighbour changes a unit's values within its keys and windows), as for the selection
  transforms (:mod:`beam_dp.beam.selection`).
* **Windows**: each window gets its own release (``Release.window``). With a
  ``unit_column``, bounding keeps each unit's rows in at most ``max_windows_per_unit``
  windows (default 1; on unbounded input the first ones its rows arrive in, kept as per-unit
  state, see :mod:`beam_dp.beam.bounding`) and the bounds hold within each window. The
  windowings refused, and the rule on which windows release (a window releases iff it holds
  an input element, whatever bounding drops), are those of the selection transforms: both
  run on the one path :mod:`beam_dp.beam.plan` (:func:`~beam_dp.beam.plan.window_markers`
  says why the rule looks at the input): *which windows exist* is not protected (feed a batch with
  no rows per window as a heartbeat if it must be). In the global window an empty input
  still gets a release.
* The selection runs in ``extract_output``; nothing about a value ever reaches a log, an
  exception message or a metric, and exact counts only behind the operator's switch
  (:mod:`beam_dp.telemetry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar, Unpack

from apache_beam.pvalue import PCollection

from beam_dp.beam.options import split_share
from beam_dp.beam.plan import Built, PrivateTransform
from beam_dp.beam.quantile_combiners import (
    AutoMeanCombineFn,
    AutoQuantileCombineFn,
    MeanCombineFn,
    MeanSpec,
    QuantileCombineFn,
    QuantileSpec,
    grid_error,
)
from beam_dp.beam.quantile_graph import expand_auto_bound, expand_coarse_to_fine
from beam_dp.beam.quantile_options import (
    MeanOptions,
    MeanPerKeyOptions,
    QuantileOptions,
    QuantilePerKeyOptions,
    take_value_options,
)
from beam_dp.beam.quantile_spec import auto_bound_spec, build_quantiles
from beam_dp.summaries.quantiles import (
    MeanPlan,
    QuantilePlan,
    parse_quantiles,
    plan_mean,
)

__all__ = [
    "DEFAULT_NUM_POINTS",
    "MeanCombineFn",
    "MeanOptions",
    "PrivateMax",
    "PrivateMean",
    "PrivateMedian",
    "PrivateMin",
    "PrivateQuantiles",
    "QuantileCombineFn",
    "QuantileOptions",
    "grid_error",
]

# The specs under their former names (tests and benchmarks read them from here).
_QuantileSpec = QuantileSpec
_MeanSpec = MeanSpec

#: Default grid size of the quantile transforms (uniform over ``[lower, upper]``). Measured
#: (benchmarks/quantiles.py): at 10^6 lognormal values the best point of a 10^5-point grid was
#: 17-31 ranks from the median, of a 10^6-point grid 2-5; selection costs ~0.07 s per 10^6
#: points, so lower it for ``.PerKey`` with many small keys.
DEFAULT_NUM_POINTS = 1_000_000
#: Default grid size of the mean transforms.
DEFAULT_MEAN_POINTS = 10_000
#: Default tail of ``PrivateMin`` / ``PrivateMax``: the 0.01 and 0.99 quantiles.
DEFAULT_TAIL = 0.01

QuantilesLike = Sequence[float | Fraction]


# -------------------------------------------------------------------------- quantiles


class _QuantileTransform(PrivateTransform):
    """Private quantiles from a grid histogram (see the module docstring).

    Args:
        quantiles: the quantiles, each strictly between 0 and 1 (floats are read as the
            decimals they were written as: 0.9 is 9/10).
        **options: :class:`QuantileOptions` (``.PerKey``: :class:`QuantilePerKeyOptions`):
            this family's own (``lower``, ``upper``, ``unit_column``, ``value_column``,
            ``grid``, ``num_points``, ``max_contributions``, ``split``, ``refine``,
            ``refine_fraction``, ``refine_points``) and those of every private transform
            (:class:`~beam_dp.beam.options.PrivateOptions`; ``on_bad_record`` defaults to
            ``"fail"``: ``"skip"`` drops NaN/null values and null units, a public rule).

    Raises:
        ValueError, TypeError: at construction, naming the bad parameter and its rule (bad
        epsilon, ``lower >= upper``, NaN bounds, a grid too large, ...), before any pipeline
        runs.

    Privacy:
        epsilon-DP under ``relation`` over all the windows (``max_windows_per_unit``) and, for
        ``.PerKey``, all the keys, with ``max_contributions`` values per unit. Only grid points
        are released.
    """

    NAMESPACE: ClassVar[str] = "PrivateQuantiles"
    _STATISTIC: ClassVar[str] = "quantiles"
    _SCALAR: ClassVar[bool] = False

    def __init__(self, quantiles: object, **options: Any) -> None:
        super().__init__()
        values, specific = take_value_options(self, options, DEFAULT_NUM_POINTS)
        built, self._spec = build_quantiles(
            values, quantiles, statistic=self._STATISTIC, scalar=self._SCALAR, **specific
        )
        self._finish(built)

    @property
    def plan(self) -> QuantilePlan:
        """The public plan of the quantile selections (the fine pass with ``refine=True``; with
        ``max_contributions="auto"``, the plan at the cap: each release uses the chosen bound's)."""
        return self._spec.plan

    def _expand(self, pcoll: PCollection) -> PCollection:
        auto = self._spec.auto
        if auto is not None:
            merge = AutoQuantileCombineFn(self._spec)
            return expand_auto_bound(pcoll, self._plan, self._spec, auto, merge)
        if self._spec.cell_plan is None:
            return super()._expand(pcoll)
        return expand_coarse_to_fine(pcoll, self._plan, self._spec)


class PrivateQuantiles:
    """Private quantiles: ``PrivateQuantiles.Globally(quantiles, ...)`` and ``.PerKey``.

    Each window (and key) gets one :class:`~beam_dp.release.Release` whose value is the list
    of released grid points, one per requested quantile in request order (non-decreasing
    for increasing quantiles). Arguments: see ``_QuantileTransform``; ``.PerKey`` also takes
    ``keys`` (required), ``key_column`` and ``max_keys_per_unit``.
    """

    class Globally(_QuantileTransform):
        """Private quantiles of all the values, one release per window."""

        VARIANT = "Globally"

        def __init__(self, quantiles: QuantilesLike, **options: Unpack[QuantileOptions]) -> None:
            super().__init__(quantiles, **options)

    class PerKey(_QuantileTransform):
        """Private quantiles per public key, one release per key and window."""

        VARIANT = "PerKey"

        def __init__(
            self, quantiles: QuantilesLike, **options: Unpack[QuantilePerKeyOptions]
        ) -> None:
            super().__init__(quantiles, **options)


class _Median(_QuantileTransform):
    NAMESPACE = "PrivateMedian"
    _STATISTIC = "median"
    _SCALAR = True


class PrivateMedian:
    """The private median (``Release.value`` is one grid point): ``.Globally``, ``.PerKey``.

    Arguments as :class:`PrivateQuantiles` without ``quantiles``.
    """

    class Globally(_Median):
        """The private median of all the values, one release per window."""

        VARIANT = "Globally"

        def __init__(self, **options: Unpack[QuantileOptions]) -> None:
            super().__init__([Fraction(1, 2)], **options)

    class PerKey(_Median):
        """The private median per public key."""

        VARIANT = "PerKey"

        def __init__(self, **options: Unpack[QuantilePerKeyOptions]) -> None:
            super().__init__([Fraction(1, 2)], **options)


def _tail_quantile(tail: object, statistic: str) -> list[Fraction]:
    lowest = parse_quantiles([tail])
    if not lowest[0] < Fraction(1, 2):
        raise ValueError(f"'tail' must be strictly between 0 and 0.5; received {tail!r}")
    return [lowest[0] if statistic == "min" else 1 - lowest[0]]


class _ExtremeGlobally(_QuantileTransform):
    """``PrivateMin.Globally`` / ``PrivateMax.Globally``: the ``tail`` extreme quantile."""

    VARIANT = "Globally"
    _SCALAR = True

    def __init__(self, *, tail: float = DEFAULT_TAIL, **options: Unpack[QuantileOptions]) -> None:
        super().__init__(_tail_quantile(tail, self._STATISTIC), **options)


class _ExtremePerKey(_QuantileTransform):
    """``PrivateMin.PerKey`` / ``PrivateMax.PerKey``: the ``tail`` extreme quantile per key."""

    VARIANT = "PerKey"
    _SCALAR = True

    def __init__(
        self, *, tail: float = DEFAULT_TAIL, **options: Unpack[QuantilePerKeyOptions]
    ) -> None:
        super().__init__(_tail_quantile(tail, self._STATISTIC), **options)


class PrivateMin:
    """A private minimum: the ``tail`` quantile (default 0.01), an extreme quantile.

    The exact minimum has unbounded sensitivity in value; the ``tail`` quantile is its private
    stand-in. Choose ``tail`` so that ``tail * N`` is well above the release's ``rank_error``:
    otherwise the many grid points below the data (all with about the same score) can win.
    Arguments as :class:`PrivateQuantiles` without ``quantiles``, plus ``tail`` in (0, 0.5).
    """

    class Globally(_ExtremeGlobally):
        """A private minimum of all the values, one release per window."""

        NAMESPACE = "PrivateMin"
        _STATISTIC = "min"

    class PerKey(_ExtremePerKey):
        """A private minimum per public key."""

        NAMESPACE = "PrivateMin"
        _STATISTIC = "min"


class PrivateMax:
    """A private maximum: the ``1 - tail`` quantile (default 0.99). See :class:`PrivateMin`."""

    class Globally(_ExtremeGlobally):
        """A private maximum of all the values, one release per window."""

        NAMESPACE = "PrivateMax"
        _STATISTIC = "max"

    class PerKey(_ExtremePerKey):
        """A private maximum per public key."""

        NAMESPACE = "PrivateMax"
        _STATISTIC = "max"


# ------------------------------------------------------------------------------- mean


class _MeanTransform(PrivateTransform):
    """A private mean by the exponential mechanism over a public grid (seed 004).

    Args:
        **options: :class:`MeanOptions` (``.PerKey``: :class:`MeanPerKeyOptions`): as for
            the quantiles (grid default uniform, 10^4 points; ``epsilon``: ``rounds=1``),
            plus ``n``. ``relation="replace"`` with the public number of values ``n`` uses
            the seed's utility ``-|mean - r|`` (sensitivity ``k (upper - lower) / n``), with
            the mean read as the centred sum ``mid + sum(x - mid) / n`` over the public
            ``n``: the true mean when ``n`` values are kept, and defined (never an error) for
            any other count, so whether the release succeeds never depends on the data.
            ``"add_remove"`` (default) needs no ``n``: it uses ``-|sum(x) - N r|``,
            sensitivity ``k (upper - lower)`` (see :mod:`beam_dp.summaries.quantiles`).
            ``max_contributions="auto"`` chooses ``k`` privately as for the quantiles
            (``bound_share`` of epsilon; the mean at the rest). It removes the bias of one
            value per unit when values depend on the unit, but a larger ``k`` also scales the
            noise: measured, it is not always better than 1 (benchmarks/RESULTS.md, "Mean").

    Privacy:
        epsilon-DP under ``relation``; only a grid point is released. ``accuracy.score_loss``
        bounds ``|mean - output|`` (replace) or ``|sum - N output|`` (add_remove) beyond the
        grid term (at most half a cell in the mean's units).
    """

    NAMESPACE: ClassVar[str] = "PrivateMean"

    def __init__(self, **options: Any) -> None:
        super().__init__()
        values, specific = take_value_options(self, options, DEFAULT_MEAN_POINTS)
        unknown = set(specific) - {"n"}
        if unknown:  # a quantile keyword given to the mean
            raise TypeError(
                f"PrivateMean.{self.VARIANT}() got an unexpected keyword argument "
                f"{sorted(unknown)[0]!r}"
            )
        common = values.common
        budget = common.budget("mean", rounds=1)
        share = values.keys.split(budget, values.record_level, values.windows)
        per_key_epsilon = Fraction(share.epsilon)

        def plan_at(bound: int, epsilon: Fraction) -> MeanPlan:
            return plan_mean(
                values.grid,
                epsilon=epsilon,
                relation=common.relation,
                n=specific.get("n"),
                max_contributions=bound,
                method=common.method,
                confidence=common.confidence,
            )

        auto = None
        if values.auto is not None:
            window = split_share(budget, windows_per_unit=values.windows)
            auto = auto_bound_spec(
                values, share.rho, per_key_epsilon, rounds=1, plan_at=plan_at, window=window
            )
            at_cap = auto.plans[auto.cap]
            assert isinstance(at_cap, MeanPlan)
            plan = at_cap
        else:
            plan = plan_at(values.max_contributions, per_key_epsilon)
        self._spec = MeanSpec(
            **values.spec_fields(budget.name, per_key_epsilon, share.rho), plan=plan, auto=auto
        )
        display = {
            **values.display(budget.name, "mean", budget.epsilon),
            "max_contributions": "auto" if auto is not None else values.max_contributions,
            "privacy_unit": "record" if values.record_level else "unit_column",
            "contribution_bounds": str(values.ledger_bounds()),
        }
        self._finish(
            Built(
                values.plan(MeanCombineFn(self._spec)),
                release_name=budget.name,
                keys_per_unit=values.keys_per_unit,
                display=display,
                mechanism=common.method,
                rounds=1,
                shares=common.shares(),
            )
        )

    def _expand(self, pcoll: PCollection) -> PCollection:
        auto = self._spec.auto
        if auto is None:
            return super()._expand(pcoll)
        merge = AutoMeanCombineFn(self._spec)
        return expand_auto_bound(pcoll, self._plan, self._spec, auto, merge)


class PrivateMean:
    """A private mean: ``PrivateMean.Globally(...)`` and ``.PerKey(...)``.

    See ``_MeanTransform`` for the arguments and the two relations.
    """

    class Globally(_MeanTransform):
        """The private mean of all the values, one release per window."""

        VARIANT = "Globally"

        def __init__(self, **options: Unpack[MeanOptions]) -> None:
            super().__init__(**options)

    class PerKey(_MeanTransform):
        """The private mean per public key."""

        VARIANT = "PerKey"

        def __init__(self, **options: Unpack[MeanPerKeyOptions]) -> None:
            super().__init__(**options)
