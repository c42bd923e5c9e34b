"""Private quantiles, medians, minima and maxima on Beam, from a histogram on a public grid.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms::

    releases = batches | PrivateQuantiles.Globally(
        [0.25, 0.5, 0.75], lower=0.0, upper=500.0, epsilon=1.0,
        unit_column="user_id", value_column="amount", max_contributions=5)

Read top to bottom: the options (:class:`QuantileOptions`), the spec of a release
(:class:`QuantileSpec`), the combiners (:class:`QuantileCombineFn` bins each batch into a
:class:`~beam_dp.summaries.histogram.GridHistogram` with numpy, and ``extract_output`` runs the
exact selections of :mod:`beam_dp.summaries.quantiles` once per window and key), the
coarse-to-fine passes of ``refine=True``, the construction (``_build_quantiles``: every plan and
epsilon fixed before any data is read) and the transforms. What every grid statistic shares
(the grid options, the histogram, the release record, ``"auto"`` bounds) is
:mod:`beam_dp.beam._grid`; the construction path :mod:`beam_dp.beam._transform`.

Privacy: only grid points (and the clamping bounds, as interval ends) are released, each
quantile's selection at its part of the release's epsilon
(:func:`~beam_dp.summaries.quantiles.plan_quantiles`); coarse to fine spends
``refine_fraction`` of it on the coarse cells. Each release states ``rank_error``, the bound
on the distance from ``alpha N`` to the output's rank range ``[#(x < output), #(x <= output)]``
beyond the best grid point's at ``confidence`` (:func:`beam_dp.release.quantile_statement`).
Units, keys and windows: ``docs/privacy_rules.md``.

Intervals (default on, ``interval=False`` turns them off): every release also carries, for each
quantile, ``[lower, upper]`` in the column's units that holds the data's own alpha-quantile
with probability at least ``confidence`` over the mechanism, all quantiles at once
(:mod:`beam_dp.summaries.quantiles.intervals`, method ``"rank_bracket"``). They are drawn in
the same ``extract_output`` from the same merged histogram as the quantiles (no second pass),
with ``interval_share`` (default 1/3) of the release's budget taken out of it, never on top:
the release's epsilon (rho) is the total it spends
(:func:`~beam_dp.summaries.quantiles.intervals.split_interval_budget`), and the transform's
``rounds`` counts the interval's ``2 m`` selections with the quantiles' rounds.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Unpack

import apache_beam as beam
from apache_beam.pvalue import AsDict, PCollection

from beam_dp._validation import check_positive_int, check_probability_open
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.beam._grid import (
    AutoBoundSpec,
    GridHistogramFn,
    GridParams,
    GridReleaseSpec,
    auto_bound_spec,
    expand_auto_bound,
    take_grid_options,
    values_of,
)
from beam_dp.beam._transform import (
    Built,
    GridOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    divide_budget,
)
from beam_dp.release import Release, ReleaseInterval, bound_notes, quantile_statement
from beam_dp.summaries.contribution_bounds import BoundChoice
from beam_dp.summaries.histogram import MAX_GRID_POINTS, Grid, GridHistogram
from beam_dp.summaries.quantiles import (
    DEFAULT_REFINE_FRACTION,
    DEFAULT_SPLIT,
    CellPlan,
    CellSelection,
    QuantilePlan,
    QuantileSelection,
    combine_passes,
    parse_quantiles,
    plan_cells,
    plan_quantiles,
    quantile_rounds,
    refine_grid,
    select_cells,
    select_quantiles,
)
from beam_dp.summaries.quantiles.intervals import (
    DEFAULT_INTERVAL_FRACTION,
    INTERVAL_METHOD,
    IntervalBudget,
    IntervalPlan,
    IntervalRelease,
    intervals_for_plan,
    select_intervals,
    split_interval_budget,
)

__all__ = [
    "DEFAULT_NUM_POINTS",
    "PrivateMax",
    "PrivateMedian",
    "PrivateMin",
    "PrivateQuantiles",
    "QuantileCombineFn",
    "QuantileOptions",
    "QuantilePerKeyOptions",
    "QuantileSpec",
]

#: Default grid size (uniform over ``[lower, upper]``). Measured (benchmarks/quantiles.py): at
#: 10^6 lognormal values the best point of a 10^5-point grid was 17-31 ranks from the median,
#: of a 10^6-point grid 2-5; selection costs ~0.07 s per 10^6 points, so lower it for
#: ``.PerKey`` with many small keys.
DEFAULT_NUM_POINTS = 1_000_000
#: Default tail of ``PrivateMin`` / ``PrivateMax``: the 0.01 and 0.99 quantiles.
DEFAULT_TAIL = 0.01

QuantilesLike = Sequence[float | Fraction]


# ------------------------------------------------------------------------------- options


class _QuantileArgs(GridOptions, total=False):
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
        interval: whether each release carries its quantiles' randomization intervals
            (default True; module docstring). False gives the whole budget to the quantiles.
        interval_share: the intervals' share of each release's budget (of epsilon; of rho
            under zCDP), strictly between 0 and 1 (default 1/3,
            :data:`~beam_dp.summaries.quantiles.intervals.DEFAULT_INTERVAL_FRACTION`: at 1/3
            the median's error grows about 1.5 times against the whole epsilon; measured in
            benchmarks/RESULTS.md, "Quantile intervals").
    """

    split: str
    refine: bool
    refine_fraction: float
    refine_points: int | None
    interval: bool
    interval_share: float


class QuantileOptions(_QuantileArgs, PrivateOptions, total=False):
    """Keyword options of the quantile ``.Globally`` transforms (``epsilon``: a float or a
    share of mechanism ``method`` with ``rounds`` equal to ``transform.rounds``: the
    quantiles' rounds and two per quantile for its interval)."""


class QuantilePerKeyOptions(_QuantileArgs, PerKeyOptions, total=False):
    """Keyword options of the quantile ``.PerKey`` transforms (``key_column`` default
    ``"key"``, ``max_keys_per_unit`` default 1)."""


# ---------------------------------------------------------------------------------- the spec


@dataclass(frozen=True, kw_only=True)
class QuantileSpec(GridReleaseSpec):
    """Everything a quantile release needs after the merge (public; fixed at construction).

    ``interval`` is the plan of the release's intervals and ``interval_budget`` how the
    release's budget is shared with them (None with ``interval=False``); with an ``"auto"``
    bound, ``intervals_at`` holds both at every candidate bound (:meth:`for_choice`).
    """

    statistic: str
    grid: Grid
    plan: QuantilePlan
    cell_plan: CellPlan | None
    refine_points: int
    scalar: bool
    interval: IntervalPlan | None = None
    interval_budget: IntervalBudget | None = None
    intervals_at: Mapping[int, tuple[IntervalPlan, IntervalBudget]] | None = None

    def for_choice(self, choice: BoundChoice) -> QuantileSpec:
        chosen = super().for_choice(choice)
        if self.intervals_at is None:
            return chosen
        plan, budget = self.intervals_at[choice.bound]
        return dataclasses.replace(chosen, interval=plan, interval_budget=budget)

    def interval_on(self, grid: Grid) -> IntervalPlan | None:
        """The interval plan on ``grid``: the fine grid of coarse to fine, a public output of
        the coarse pass, has its own candidates (and so its own shifts)."""
        if self.interval is None or grid is self.grid:
            return self.interval
        assert self.interval_budget is not None
        return intervals_for_plan(
            self.plan,
            grid,
            epsilon=self.interval_budget.interval_epsilon,
            confidence=self.interval.confidence,
        )

    def release_merged(self, accumulator: GridHistogram) -> Release:
        return self.release_on(accumulator, self.grid)

    def release_on(
        self, accumulator: GridHistogram, grid: Grid, coarse: CellSelection | None = None
    ) -> Release:
        """The quantiles of one merged histogram on ``grid`` and their intervals, drawn from the
        same histogram (after the quantiles: each interval is widened to hold its value)."""
        selection = select_quantiles(accumulator, grid, self.plan, rng=self.rng)
        if coarse is not None:
            selection = combine_passes(coarse, selection)
        plan = self.interval_on(grid)
        intervals = None
        if plan is not None:
            intervals = select_intervals(
                accumulator, grid, plan, list(selection.values), rng=self.rng
            )
        return self.release(selection, intervals)

    def _recorded_interval(self, intervals: IntervalRelease) -> ReleaseInterval:
        budget = self.interval_budget
        assert budget is not None
        return ReleaseInterval(
            quantiles=tuple(float(item.alpha) for item in intervals.intervals),
            lower=tuple(item.lower for item in intervals.intervals),
            upper=tuple(item.upper for item in intervals.intervals),
            confidence=intervals.confidence,
            method=INTERVAL_METHOD,
            epsilon=float(budget.interval_epsilon),
            rho=None if budget.interval_rho is None else float(budget.interval_rho),
            share=float(budget.share),
            scalar=self.scalar,
            public_range=(float(self.grid.lower), float(self.grid.upper)),
        )

    def _interval_sentence(self, intervals: IntervalRelease) -> str:
        """The intervals in words (public parameters only: the same for every key)."""
        budget = self.interval_budget
        assert budget is not None
        which = "its quantile" if len(intervals.intervals) > 1 else "the quantile"
        spent = (
            f"rho {float(budget.interval_rho):.3g} of the release's rho"
            if budget.interval_rho is not None
            else f"epsilon {float(budget.interval_epsilon):.3g} of the release's "
            f"{float(budget.epsilon):.3g}"
        )
        return (
            f"With probability {intervals.confidence:g} over the mechanism's randomness, every "
            f"released interval [lower, upper] holds {which} of the values kept after bounding, "
            "all at once (a randomization interval, in the values' units; the sampling error "
            f"of a population quantile is not in it). The intervals took {spent}; the rank "
            "bound that follows is the quantiles' own, at the rest."
        )

    def release(
        self, selection: QuantileSelection, intervals: IntervalRelease | None = None
    ) -> Release:
        extra = {
            "score_loss": selection.score_loss,
            "rank_error": selection.rank_error,
            "cell_width": selection.cell_width,
        }
        if selection.fine_rank_error is not None:
            extra["fine_rank_error"] = selection.fine_rank_error
        if intervals is not None and self.interval_budget is not None:
            # The quantiles' own part of the release's budget (the rank bounds are stated at it).
            extra["epsilon_quantiles"] = float(self.interval_budget.quantile_epsilon)
        value: Any = selection.values[0] if self.scalar else list(selection.values)
        named = {"median": "the median", "min": "the minimum", "max": "the maximum"}
        released = [
            (named.get(self.statistic, f"the {float(alpha):g}-quantile"), point)
            for alpha, point in zip(self.plan.quantiles, selection.values, strict=True)
        ]
        statement = quantile_statement(
            [float(q) for q in self.plan.quantiles],
            rank_error=selection.rank_error,
            confidence=self.confidence,
            several_rounds=self.plan.split in ("recursive", "joint"),
            pairs=any(node.second_target is not None for node in self.plan.nodes),
            two_pass=self.cell_plan is not None,
            rank_error_share=selection.rank_error_share,
        )
        if intervals is not None:
            statement = dataclasses.replace(
                statement,
                description=f"{self._interval_sentence(intervals)} {statement.description}",
            )
        return self.record(
            selection,
            statistic=self.statistic,
            value=value,
            mechanism=self.plan.method,
            rounds=selection.rounds,
            notes=bound_notes(released, lower=self.grid.lower, upper=self.grid.upper),
            extra_accuracy=extra,
            statement=statement,
            interval=None if intervals is None else self._recorded_interval(intervals),
        )


# ----------------------------------------------------------------------------- the combiners


class QuantileCombineFn(GridHistogramFn):
    """Grid histogram of the values; ``extract_output`` releases the private quantiles.

    With ``coarse=True`` (the first pass of the coarse-to-fine option) the output is the
    chosen coarse cells, a :class:`~beam_dp.summaries.quantiles.CellSelection`, instead of a
    release.
    """

    def __init__(self, spec: QuantileSpec, *, coarse: bool = False) -> None:
        super().__init__(spec.grid)
        self._spec = spec
        self._coarse = coarse

    def extract_output(self, accumulator: GridHistogram) -> Release | CellSelection:
        spec = self._spec
        if self._coarse:
            assert spec.cell_plan is not None
            return select_cells(accumulator, spec.grid, spec.cell_plan, rng=spec.rng)
        return spec.release_merged(accumulator)

    def display_data(self) -> dict[str, Any]:
        return {
            "statistic": self._spec.statistic,
            "grid": repr(self._spec.grid),
            "pass": "coarse" if self._coarse else "single",
        }


class AutoQuantileCombineFn(QuantileCombineFn):
    """:class:`QuantileCombineFn` whose output is the merged histogram, released later.

    With ``max_contributions="auto"`` the release needs the privately chosen bound, a
    singleton side input per window. It is not given to the combine: Beam's Dask runner
    silently drops the output of a ``CombinePerKey`` that has a side input (measured, Beam
    2.x), while a ``Map`` with one works everywhere. So the combine yields ``(histogram)``
    and :func:`release_at_choice` (a ``Map`` with the side input) runs the selection.
    """

    def extract_output(self, accumulator: GridHistogram) -> GridHistogram:  # type: ignore[override]
        return accumulator.compact()


# ---------------------------------------------------------------------------- coarse to fine


@dataclass
class FinePartial:
    """Second-pass accumulator: the (public) coarse outcome and a histogram on its fine grid."""

    coarse: CellSelection | None
    histogram: GridHistogram | None


class BinFineFn(beam.DoFn):
    """Bin a batch on the fine grid inside its key's coarse cells (a side input)."""

    def __init__(self, spec: QuantileSpec) -> None:
        super().__init__()
        self._spec = spec
        self._cache: dict[tuple[int, ...], Grid] = {}

    def process(
        self,
        element: tuple[Any, Any],
        coarse: Mapping[Any, CellSelection],
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[tuple[Any, FinePartial]]:
        # Asking for the window (unused) keeps Beam from holding the batch after the call
        # (beam_dp.beam._calls).
        del window
        key, batch = element
        selection = coarse[key]
        grid = self._cache.get(selection.cells)
        if grid is None:
            grid = refine_grid(self._spec.grid, selection.cells, self._spec.refine_points)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[selection.cells] = grid
        histogram = GridHistogram(grid.num_slots)
        values = values_of(batch)
        if values.size:
            histogram.add_slots(grid.slots(values))
        yield key, FinePartial(selection, histogram.compact())


class FineCombineFn(beam.CombineFn):
    """Merge second-pass histograms; ``extract_output`` releases the refined quantiles."""

    def __init__(self, spec: QuantileSpec) -> None:
        super().__init__()
        self._spec = spec

    def create_accumulator(self) -> FinePartial:
        return FinePartial(None, None)

    def add_input(self, accumulator: FinePartial, element: FinePartial) -> FinePartial:
        return self.merge_accumulators([accumulator, element])

    def merge_accumulators(self, accumulators: Iterable[FinePartial]) -> FinePartial:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            if other.histogram is None:
                continue
            if first.histogram is None:
                first.coarse = other.coarse
                first.histogram = GridHistogram(other.histogram.num_slots).merge(other.histogram)
            else:
                first.histogram.merge(other.histogram)
        return first

    def compact(self, accumulator: FinePartial) -> FinePartial:
        if accumulator.histogram is not None:
            accumulator.histogram.compact()
        return accumulator

    def extract_output(self, accumulator: FinePartial) -> Release:
        spec = self._spec
        coarse, histogram = accumulator.coarse, accumulator.histogram
        if coarse is None or histogram is None:  # pragma: no cover - every key gets a marker
            raise RuntimeError("the fine pass received no coarse outcome")
        grid = refine_grid(spec.grid, coarse.cells, spec.refine_points)
        return spec.release_on(histogram, grid, coarse)


# ------------------------------------------------------------------------------ construction


def _build_quantiles(
    variant: _QuantileTransform,
    own: Mapping[str, Any],
    shared: Mapping[str, Any],
    *,
    quantiles: object,
) -> Built:
    """A quantile transform from its keywords (:meth:`PrivateTransform._build`)."""
    values, specific = take_grid_options(variant, own, shared, DEFAULT_NUM_POINTS)
    return _plan_quantiles(
        values, quantiles, statistic=variant._STATISTIC, scalar=variant._SCALAR, **specific
    )


def _plan_quantiles(
    values: GridParams,
    quantiles: object,
    *,
    statistic: str,
    scalar: bool,
    split: str = DEFAULT_SPLIT,
    refine: bool = False,
    refine_fraction: float = DEFAULT_REFINE_FRACTION,
    refine_points: int | None = None,
    interval: bool = True,
    interval_share: float | Fraction | None = None,
) -> Built:
    """Every plan and epsilon of a quantile release, from public options only.

    The rounds come from the quantiles, the split and the interval alone; the budget share is
    divided over the keys and windows one unit reaches, then between the quantiles and their
    intervals (:func:`_interval_split`); the plan is one pass, or the coarse and fine passes
    of ``refine=True``, or with an ``"auto"`` bound one plan per candidate bound
    (:func:`~beam_dp.beam._grid.auto_bound_spec`).
    """
    options, the_grid = values.options, values.grid
    parsed = parse_quantiles(quantiles)
    if not isinstance(refine, bool):
        raise TypeError(f"'refine' must be a bool; received {refine!r}")
    share = _check_interval(interval, interval_share)
    distinct = len(set(parsed))
    fine_points = 0
    if refine:
        check_probability_open(refine_fraction, "refine_fraction")
        fine_points = the_grid.num_points if refine_points is None else refine_points
        check_positive_int(fine_points, "refine_points")
        if fine_points < 2 or distinct * fine_points > MAX_GRID_POINTS:
            raise ValueError(
                f"'refine_points' must be >= 2 and at most {MAX_GRID_POINTS:,} divided by "
                f"the number of quantiles ({distinct}); received {fine_points!r}"
            )
    elif refine_points is not None:
        raise ValueError("'refine_points' applies only with refine=True")
    # The quantiles, the split and the interval decide them: two ends per distinct quantile.
    own_rounds = quantile_rounds(parsed, split)
    rounds = quantile_rounds(parsed, split, interval=share is not None)
    interval_rounds = rounds - own_rounds
    budget = options.budget(statistic, rounds=rounds)
    release = options.per_release(budget, values.record_level)  # one key in one window

    def divided(release_epsilon: Fraction) -> IntervalBudget | None:
        if share is None:
            return None
        rate = None if release.rho is None else ZCDP_RATE[privacy_kind(options.method)]
        return split_interval_budget(
            release_epsilon,
            share=share,
            quantile_rounds=own_rounds,
            interval_rounds=interval_rounds,
            zcdp_rate=rate,
        )

    def own_part(release_epsilon: Fraction) -> Fraction:
        parts = divided(release_epsilon)
        return release_epsilon if parts is None else parts.quantile_epsilon

    interval_budget = divided(Fraction(release.epsilon))
    epsilon = own_part(Fraction(release.epsilon))
    plan_options: dict[str, Any] = {
        "relation": options.relation,
        "max_contributions": values.max_contributions,
        "method": options.method,
        "split": split,
        "confidence": options.confidence,
    }
    cell_plan = None
    auto: AutoBoundSpec | None = None
    interval_plan: IntervalPlan | None = None
    intervals_at: dict[int, tuple[IntervalPlan, IntervalBudget]] | None = None
    if refine and values.auto is not None:
        option = "max_contributions" if values.auto.target == "rows" else "max_keys_per_unit"
        raise ValueError(
            f"{option}='auto' does not combine with refine=True yet; give an integer "
            f"{option} or leave refine off"
        )
    if refine:
        beta = (1.0 - options.confidence) / 2
        coarse_epsilon = epsilon * Fraction(refine_fraction)
        cell_plan = plan_cells(
            parsed,
            epsilon=coarse_epsilon,
            num_cells=the_grid.num_points - 1,
            relation=options.relation,
            max_contributions=values.max_contributions,
            method=options.method,
            failure_probability=beta,
        )
        plan = plan_quantiles(
            parsed,
            epsilon=epsilon - coarse_epsilon,
            num_candidates=distinct * fine_points,
            failure_probability=beta,
            **plan_options,
        )
    elif values.auto is not None:

        def plan_at(bound: int, statistic_epsilon: Fraction) -> QuantilePlan:
            return plan_quantiles(
                parsed,
                epsilon=own_part(statistic_epsilon),
                num_candidates=the_grid.num_points,
                **{**plan_options, "max_contributions": bound},
            )

        auto = auto_bound_spec(
            values,
            release.rho,
            Fraction(release.epsilon),  # the choice's share, then the statistic's parts
            rounds=rounds,
            plan_at=plan_at,
            window=divide_budget(budget, windows_per_unit=options.max_windows_per_unit),
        )
        at_cap = auto.plans[auto.cap]
        assert isinstance(at_cap, QuantilePlan)
        plan = at_cap
        if share is not None:
            intervals_at = {}
            for bound in auto.candidates:
                at = auto.plans[bound]
                assert isinstance(at, QuantilePlan)
                part = auto.statistic_epsilon
                if auto.per_bound is not None:  # max_keys_per_unit="auto": each K its own
                    part = auto.per_bound[bound].statistic_epsilon
                parts = divided(part)
                assert parts is not None
                intervals_at[bound] = (
                    intervals_for_plan(
                        at, the_grid, epsilon=parts.interval_epsilon, confidence=options.confidence
                    ),
                    parts,
                )
            interval_plan, interval_budget = intervals_at[auto.cap]
    else:
        plan = plan_quantiles(
            parsed, epsilon=epsilon, num_candidates=the_grid.num_points, **plan_options
        )
    if share is not None and interval_plan is None:
        assert interval_budget is not None
        interval_plan = intervals_for_plan(
            plan,
            the_grid,
            epsilon=interval_budget.interval_epsilon,
            confidence=options.confidence,
        )
    spec = QuantileSpec(
        **values.spec_fields(release),
        statistic=statistic,
        grid=the_grid,
        plan=plan,
        cell_plan=cell_plan,
        refine_points=fine_points,
        scalar=scalar,
        auto=auto,
        interval=interval_plan,
        interval_budget=interval_budget,
        intervals_at=intervals_at,
    )
    rank_error = plan.rank_error + (0.0 if cell_plan is None else max(cell_plan.loss_bounds))
    display = {
        **values.display(budget.name, statistic, budget.epsilon),
        "max_contributions": "auto" if auto is not None else values.max_contributions,
        "quantiles": str([float(q) for q in parsed]),
        "split": plan.split,
        "rounds": plan.rounds,
        "refine": refine,
        "privacy_unit": "record" if values.record_level else "unit_column",
        "contribution_bounds": str(values.ledger_bounds()),
        "rank_error_bound": rank_error,
        "interval": interval_plan is not None,
    }
    if interval_budget is not None:
        display["interval_share"] = float(interval_budget.share)
    if interval_plan is not None:
        display["interval_rounds"] = interval_plan.rounds
    if options.keys is not None:
        display["epsilon_per_key"] = float(release.epsilon)
    return Built(
        values.wiring(QuantileCombineFn(spec)),
        release_name=budget.name,
        keys_per_unit=values.keys_per_unit,
        display=display,
        mechanism=options.method,
        rounds=rounds,
        shares=options.shares(),
        spec=spec,
    )


def _check_interval(interval: object, interval_share: object) -> Fraction | None:
    """The intervals' share as an exact decimal (1/3 by default), or None with
    ``interval=False`` (errors name the option and its rule)."""
    if not isinstance(interval, bool):
        raise TypeError(f"'interval' must be a bool; received {interval!r}")
    if not interval:
        if interval_share is not None:
            raise ValueError(
                "'interval_share' applies only with interval=True (the default); received "
                f"interval=False and interval_share={interval_share!r}"
            )
        return None
    if interval_share is None:
        return DEFAULT_INTERVAL_FRACTION
    check_probability_open(interval_share, "interval_share")  # a number in (0, 1), not NaN
    if isinstance(interval_share, Fraction):
        return interval_share
    return Fraction(repr(float(interval_share)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the transforms


class _QuantileTransform(PrivateTransform):
    """Private quantiles from a grid histogram (see the module docstring).

    Args:
        quantiles: the quantiles, each strictly between 0 and 1 (floats are read as the
            decimals they were written as: 0.9 is 9/10).
        **options: :class:`QuantileOptions` (``.PerKey``: :class:`QuantilePerKeyOptions`):
            ``split`` and the ``refine`` options, the grid options
            (:class:`~beam_dp.beam._transform.GridOptions`) and those of every private
            transform (:class:`~beam_dp.beam._transform.PrivateOptions`).

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
    _spec: QuantileSpec

    def __init__(self, quantiles: object, **options: Any) -> None:
        super().__init__()
        self._build(options, functools.partial(_build_quantiles, quantiles=quantiles))

    @property
    def plan(self) -> QuantilePlan:
        """The public plan of the quantile selections (the fine pass with ``refine=True``; with
        ``max_contributions="auto"``, the plan at the cap: each release uses the chosen bound's)."""
        return self._spec.plan

    def _expand(self, pcoll: PCollection) -> PCollection:
        spec = self._spec
        if spec.auto is not None:
            merge = AutoQuantileCombineFn(spec)
            return expand_auto_bound(pcoll, self._wiring, spec, spec.auto, merge)
        if spec.cell_plan is None:
            return super()._expand(pcoll)
        # Coarse to fine: two combines over the same keyed input (the same window markers).
        keyed = self._wiring.keyed_input(pcoll)
        coarse = keyed | "CoarsePass" >> beam.CombinePerKey(QuantileCombineFn(spec, coarse=True))
        releases = (
            keyed
            | "BinFine" >> beam.ParDo(BinFineFn(spec), AsDict(coarse))
            | "FinePass" >> beam.CombinePerKey(FineCombineFn(spec))
        )
        return self._wiring.label(releases)


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
