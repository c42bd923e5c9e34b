"""The CombineFns behind :mod:`beam_dp.beam.quantiles` and what each release states.

Every combiner follows Beam's contract: the accumulator is a
:class:`~beam_dp.summaries.histogram.GridHistogram` over the public grid (or an
:class:`~beam_dp.summaries.histogram.ExactSum` for the mean), batches are binned with numpy,
``merge_accumulators`` modifies only the first accumulator, ``compact`` shrinks the state
before a shuffle, and ``extract_output`` runs the exact sampler once on the merged
accumulator (:mod:`beam_dp.summaries.quantiles`) and returns a
:class:`~beam_dp.release.Release`. The specs are public parameters fixed at construction.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

import apache_beam as beam
import numpy as np

from beam_dp.beam.plan import values_of
from beam_dp.mechanisms import RandomSource
from beam_dp.release import (
    Release,
    bound_notes,
    make_release,
    mean_statement,
    quantile_statement,
)
from beam_dp.summaries.contribution_bounds import BoundChoice, choose_bound
from beam_dp.summaries.histogram import ExactSum, Grid, GridHistogram
from beam_dp.summaries.quantiles import (
    MEAN_RESOLUTION,
    CellPlan,
    CellSelection,
    MeanPlan,
    MeanSelection,
    QuantilePlan,
    QuantileSelection,
    combine_passes,
    refine_grid,
    select_cells,
    select_mean,
    select_quantiles,
)

__all__ = [
    "AutoBoundSpec",
    "AutoMeanCombineFn",
    "AutoQuantileCombineFn",
    "BinFineFn",
    "FineCombineFn",
    "FinePartial",
    "GridReleaseSpec",
    "MeanCombineFn",
    "MeanSpec",
    "QuantileCombineFn",
    "QuantileSpec",
    "grid_error",
    "release_at_choice",
]


_Mergeable = TypeVar("_Mergeable", GridHistogram, ExactSum)


def _merge_into_first(accumulators: Iterable[_Mergeable]) -> _Mergeable:
    """Beam's contract: merge every accumulator into the first one (the only one modified)."""
    iterator = iter(accumulators)
    first = next(iterator)
    for other in iterator:
        first.merge(other)
    return first


_Spec = TypeVar("_Spec", bound="GridReleaseSpec")


@dataclass(frozen=True, kw_only=True)
class GridReleaseSpec:
    """What every grid statistic records (quantiles, mean): public, fixed at construction.

    Built from a transform's options by
    :meth:`~beam_dp.beam.quantile_options.ValueParams.spec_fields`; :meth:`record` is the one
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
        selection: QuantileSelection | MeanSelection,
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


@dataclass(frozen=True, kw_only=True)
class QuantileSpec(GridReleaseSpec):
    """Everything a quantile release needs after the merge (public; fixed at construction)."""

    statistic: str
    grid: Grid
    plan: QuantilePlan
    cell_plan: CellPlan | None
    refine_points: int
    scalar: bool

    def release_merged(self, accumulator: GridHistogram) -> Release:
        return self.release(select_quantiles(accumulator, self.grid, self.plan, rng=self.rng))

    def release(self, selection: QuantileSelection) -> Release:
        extra = {
            "score_loss": selection.score_loss,
            "rank_error": selection.rank_error,
            "cell_width": selection.cell_width,
        }
        if selection.fine_rank_error is not None:
            extra["fine_rank_error"] = selection.fine_rank_error
        value: Any = selection.values[0] if self.scalar else list(selection.values)
        named = {"median": "the median", "min": "the minimum", "max": "the maximum"}
        released = [
            (named.get(self.statistic, f"the {float(alpha):g}-quantile"), point)
            for alpha, point in zip(self.plan.quantiles, selection.values, strict=True)
        ]
        return self.record(
            selection,
            statistic=self.statistic,
            value=value,
            mechanism=self.plan.method,
            rounds=selection.rounds,
            notes=bound_notes(released, lower=self.grid.lower, upper=self.grid.upper),
            extra_accuracy=extra,
            statement=quantile_statement(
                [float(q) for q in self.plan.quantiles],
                rank_error=selection.rank_error,
                confidence=self.confidence,
                several_rounds=self.plan.split in ("recursive", "joint"),
                pairs=any(node.second_target is not None for node in self.plan.nodes),
                two_pass=self.cell_plan is not None,
            ),
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
        return _merge_into_first(accumulators)

    def compact(self, accumulator: GridHistogram) -> GridHistogram:
        return accumulator.compact()


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


def release_at_choice(
    element: tuple[Any, Any], choice: BoundChoice, spec: GridReleaseSpec
) -> tuple[Any, Release]:
    """``(key, merged accumulator)`` to ``(key, release)`` at the chosen bound (its plan and
    the statistic's part of epsilon; all plans are public, made at construction)."""
    key, accumulator = element
    return key, spec.for_choice(choice).release_merged(accumulator)


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
        self, element: tuple[Any, Any], coarse: Mapping[Any, CellSelection]
    ) -> Iterator[tuple[Any, FinePartial]]:
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
        fine = select_quantiles(histogram, grid, spec.plan, rng=spec.rng)
        return spec.release(combine_passes(coarse, fine))


@functools.lru_cache(maxsize=8)
def grid_error(grid: Grid) -> float:
    """The farthest any point of ``[lower, upper]`` is from its nearest grid point (public).

    The statistic a mean estimates lies in ``[lower, upper]``, so the best grid point is at
    most this far from it: the grid-resolution part of the mean's ``value_error``.
    """
    points = grid.points
    ends = max(float(points[0]) - grid.lower, grid.upper - float(points[-1]))
    inner = float(np.max(np.diff(points))) / 2.0 if points.size > 1 else 0.0
    return max(ends, inner)


@dataclass(frozen=True, kw_only=True)
class MeanSpec(GridReleaseSpec):
    """Everything a mean release needs after the merge (public; fixed at construction)."""

    plan: MeanPlan

    def release_merged(self, accumulator: ExactSum) -> Release:
        return self.release(select_mean(accumulator, self.plan, rng=self.rng))

    def release(self, selection: MeanSelection) -> Release:
        return self.record(
            selection,
            statistic="mean",
            value=selection.value,
            mechanism=self.plan.method,
            notes=bound_notes(
                [("the mean", selection.value)],
                lower=self.plan.grid.lower,
                upper=self.plan.grid.upper,
            ),
            extra_accuracy={
                "score_loss": selection.score_loss,
                "cell_width": selection.cell_width,
            },
            statement=mean_statement(
                relation=self.relation,
                score_loss=selection.score_loss,
                # One step of the integer scores (they are rounded down to it).
                rounding_error=float(self.plan.sensitivity) / MEAN_RESOLUTION,
                grid_error=grid_error(self.plan.grid),
                confidence=self.confidence,
                n=self.plan.n,
            ),
        )


class MeanCombineFn(beam.CombineFn):
    """Exact sum and count of the clamped values; ``extract_output`` releases the mean."""

    def __init__(self, spec: MeanSpec) -> None:
        super().__init__()
        self._spec = spec

    def create_accumulator(self) -> ExactSum:
        grid = self._spec.plan.grid
        return ExactSum(grid.lower, grid.upper)

    def add_input(self, accumulator: ExactSum, element: Any) -> ExactSum:
        values = values_of(element)
        if values.size:
            accumulator.add(values)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[ExactSum]) -> ExactSum:
        return _merge_into_first(accumulators)

    def extract_output(self, accumulator: ExactSum) -> Release:
        return self._spec.release_merged(accumulator)

    def display_data(self) -> dict[str, Any]:
        return {"statistic": "mean", "grid": repr(self._spec.plan.grid)}


class AutoMeanCombineFn(MeanCombineFn):
    """:class:`MeanCombineFn` whose output is the merged exact sum, released later by
    :func:`release_at_choice` at the chosen bound (as :class:`AutoQuantileCombineFn`)."""

    def extract_output(self, accumulator: ExactSum) -> ExactSum:  # type: ignore[override]
        return accumulator
