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

Public rules and privacy (see :mod:`beam_dp.summaries.quantiles` for the math):

* **Values**: NaN and null values are dropped (records with a null privacy unit too, with
  ``on_bad_record="skip"``, the default here; ``"fail"`` raises instead); every other value
  is clamped to ``[lower, upper]``. Neither how many were dropped nor how many were clamped
  is released.
* **Privacy unit**: ``unit_column=None`` is record-level privacy (every record is its own
  unit, nothing is shuffled or bounded; a person with ``r`` records is protected only at
  ``r·ε``). With a ``unit_column``, each unit's values are bounded to ``max_contributions``
  (chosen by a per-run salted hash) and the sensitivity is multiplied by it.
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
  (``ε / √(m·w)``, rounded down) (:func:`~beam_dp.beam.selection_spec.split_share`, shared
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
  an input element, whatever bounding drops), are those of the selection transforms
  (:mod:`beam_dp.beam.selection`): *which windows exist* is not protected (feed a batch with
  no rows per window as a heartbeat if it must be). In the global window an empty input
  still gets a release.
* The selection runs in ``extract_output``; nothing about a value ever reaches a log, an
  exception message or a metric, and exact counts only behind the operator's switch
  (:mod:`beam_dp.telemetry`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import AsDict, PCollection

from beam_dp._validation import (
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.accounting import BudgetShare
from beam_dp.batching import VALUE, ColumnBatch, ContributionBounds, PublicIndex
from beam_dp.beam.bounding import BoundContributions, EncodeBatches, check_windowing
from beam_dp.beam.selection_combiners import AttachWindowFn, split_by_key
from beam_dp.beam.selection_core import window_markers
from beam_dp.beam.selection_spec import check_windows_per_unit, resolve_budget, split_share
from beam_dp.mechanisms import RandomSource
from beam_dp.release import Release, make_release, mean_statement, quantile_statement
from beam_dp.summaries.histogram import (
    MAX_GRID_POINTS,
    ExactSum,
    Grid,
    GridHistogram,
)
from beam_dp.summaries.quantiles import (
    DEFAULT_REFINE_FRACTION,
    DEFAULT_SPLIT,
    MEAN_RESOLUTION,
    CellPlan,
    CellSelection,
    MeanPlan,
    MeanSelection,
    QuantilePlan,
    QuantileSelection,
    combine_passes,
    parse_quantiles,
    plan_cells,
    plan_mean,
    plan_quantiles,
    refine_grid,
    select_cells,
    select_mean,
    select_quantiles,
)

__all__ = [
    "DEFAULT_NUM_POINTS",
    "MeanCombineFn",
    "PrivateMax",
    "PrivateMean",
    "PrivateMedian",
    "PrivateMin",
    "PrivateQuantiles",
    "QuantileCombineFn",
]

#: Default grid size of the quantile transforms (uniform over ``[lower, upper]``). Measured
#: (benchmarks/quantiles.py): at 10^6 lognormal values the best point of a 10^5-point grid was
#: 17-31 ranks from the median, of a 10^6-point grid 2-5; selection costs ~0.07 s per 10^6
#: points, so lower it for ``.PerKey`` with many small keys.
DEFAULT_NUM_POINTS = 1_000_000
#: Default grid size of the mean transforms.
DEFAULT_MEAN_POINTS = 10_000
#: Default tail of ``PrivateMin`` / ``PrivateMax``: the 0.01 and 0.99 quantiles.
DEFAULT_TAIL = 0.01

EMPTY: ColumnBatch = {}
GridLike = str | Sequence[float] | npt.NDArray[np.float64] | Grid


# ------------------------------------------------------------------------------ parameters


def _check_column(value: object, name: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty column name; received {value!r}")


def _check_method(method: object) -> str:
    if method not in ("permute_and_flip", "exponential"):
        raise ValueError(
            f"'method' must be 'permute_and_flip' or 'exponential'; received {method!r}"
        )
    return str(method)


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
class _Common:
    """Validated parameters shared by every transform of this module."""

    lower: float
    upper: float
    unit_column: str | None
    value_column: str | None
    relation: str
    max_contributions: int
    method: str
    key_column: str | None
    keys: tuple[Any, ...] | None
    max_keys_per_unit: int | None
    confidence: float
    num_shards: int
    salt: int | None
    on_bad_record: str
    rng: RandomSource | None
    max_windows_per_unit: int = 1

    @property
    def record_level(self) -> bool:
        return self.unit_column is None

    @property
    def keys_per_unit(self) -> int:
        if self.keys is None or self.record_level:
            return 1
        if self.max_keys_per_unit is None:
            return len(self.keys)
        return min(self.max_keys_per_unit, len(self.keys))

    def ledger_bounds(self) -> dict[str, int]:
        if self.record_level:
            bounds = {"record_level_privacy": 1, "max_contributions_per_unit": 1}
        else:
            bounds = {"max_contributions_per_unit": self.max_contributions}
        if self.keys is not None:
            bounds["max_keys_per_unit"] = self.keys_per_unit
        bounds["max_windows_per_unit"] = self.max_windows_per_unit
        return bounds

    def contribution_bounds(self) -> ContributionBounds | None:
        if self.record_level:
            return None
        return ContributionBounds(
            max_contributions_per_unit=self.max_contributions,
            max_keys_per_unit=self.max_keys_per_unit if self.keys is not None else None,
        )


def _common(
    *,
    lower: object,
    upper: object,
    unit_column: object,
    value_column: object,
    relation: object,
    max_contributions: object,
    method: object,
    key_column: object,
    keys: object,
    max_keys_per_unit: object,
    per_key: bool,
    confidence: object,
    num_shards: object,
    salt: object,
    on_bad_record: object,
    rng: object,
    max_windows_per_unit: object = 1,
) -> _Common:
    Grid.uniform(lower, upper, 2)  # type: ignore[arg-type]  # validates the bounds
    _check_column(unit_column, "unit_column", optional=True)
    _check_column(value_column, "value_column", optional=True)
    check_relation(relation)  # type: ignore[arg-type]
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
    chosen_method = _check_method(method)
    check_probability_open(confidence, "confidence")
    check_positive_int(num_shards, "num_shards")
    if on_bad_record not in ("fail", "skip"):
        raise ValueError(f"'on_bad_record' must be 'fail' or 'skip'; received {on_bad_record!r}")
    if salt is not None and (isinstance(salt, bool) or not isinstance(salt, int)):
        raise ValueError(f"'salt' must be an integer or None; received {salt!r}")
    if rng is not None and not isinstance(rng, RandomSource):
        raise TypeError("'rng' must be None (the OS CSPRNG) or a beam_dp RandomSource")
    windows = check_windows_per_unit(max_windows_per_unit, unit_column is None)
    labels: tuple[Any, ...] | None = None
    if per_key:
        if value_column is not None:
            _check_column(key_column, "key_column")
        elif key_column is not None:
            raise ValueError("'key_column' needs batches: set 'value_column' too")
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise TypeError("'keys' must be a sequence of public keys")
        labels = tuple(keys)
        PublicIndex(labels)  # distinct, non-empty, finite
        if max_keys_per_unit is not None:
            check_positive_int(max_keys_per_unit, "max_keys_per_unit")
    return _Common(
        lower=float(lower),  # type: ignore[arg-type]
        upper=float(upper),  # type: ignore[arg-type]
        unit_column=unit_column,  # type: ignore[arg-type]
        value_column=value_column,  # type: ignore[arg-type]
        relation=str(relation),
        max_contributions=int(max_contributions),  # type: ignore[call-overload]
        method=chosen_method,
        key_column=key_column if per_key else None,  # type: ignore[arg-type]
        keys=labels,
        max_keys_per_unit=max_keys_per_unit if per_key else None,  # type: ignore[arg-type]
        confidence=float(confidence),  # type: ignore[arg-type]
        num_shards=int(num_shards),  # type: ignore[call-overload]
        salt=salt,
        on_bad_record=str(on_bad_record),
        rng=rng,
        max_windows_per_unit=windows,
    )


# --------------------------------------------------------------------- combine functions


def _values(element: Any) -> npt.NDArray[np.float64]:
    """The values of one input element: an encoded column batch, an array or a number."""
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


@dataclass(frozen=True)
class _QuantileSpec:
    """Everything a quantile release needs after the merge (public; fixed at construction)."""

    name: str
    statistic: str
    grid: Grid
    plan: QuantilePlan
    cell_plan: CellPlan | None
    refine_points: int
    scalar: bool
    relation: str
    epsilon: float
    rho: float | None
    bounds: Mapping[str, int]
    confidence: float
    rng: RandomSource | None

    def release(self, selection: QuantileSelection) -> Release:
        extra = {
            "score_loss": selection.score_loss,
            "rank_error": selection.rank_error,
            "cell_width": selection.cell_width,
        }
        if selection.fine_rank_error is not None:
            extra["fine_rank_error"] = selection.fine_rank_error
        value: Any = selection.values[0] if self.scalar else list(selection.values)
        return make_release(
            name=self.name,
            statistic=self.statistic,
            value=value,
            mechanism=self.plan.method,
            epsilon=self.epsilon,
            sensitivity=selection.sensitivity,
            neighbouring=self.relation,
            monotone=False,
            num_candidates=selection.num_candidates,
            contribution_bounds=self.bounds,
            confidence=self.confidence,
            rounds=selection.rounds,
            extra_accuracy=extra,
            statement=quantile_statement(
                [float(q) for q in self.plan.quantiles],
                rank_error=selection.rank_error,
                confidence=self.confidence,
                several_rounds=self.plan.split == "recursive",
                two_pass=self.cell_plan is not None,
            ),
            rho=self.rho,
            rng_secure=selection.secure,
        )


class QuantileCombineFn(beam.CombineFn):
    """Grid histogram of the values; ``extract_output`` releases the private quantiles.

    The accumulator is a :class:`~beam_dp.summaries.histogram.GridHistogram` (an int64 array
    over the grid's slots, sparse while few are used). With ``coarse=True`` (the first pass
    of the coarse-to-fine option) the output is the chosen coarse cells, a
    :class:`~beam_dp.summaries.quantiles.CellSelection`, instead of a release.
    """

    def __init__(self, spec: _QuantileSpec, *, coarse: bool = False) -> None:
        super().__init__()
        self._spec = spec
        self._coarse = coarse

    def create_accumulator(self) -> GridHistogram:
        return GridHistogram(self._spec.grid.num_slots)

    def add_input(self, accumulator: GridHistogram, element: Any) -> GridHistogram:
        values = _values(element)
        if values.size:
            accumulator.add_slots(self._spec.grid.slots(values))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[GridHistogram]) -> GridHistogram:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            first.merge(other)
        return first

    def compact(self, accumulator: GridHistogram) -> GridHistogram:
        return accumulator.compact()

    def extract_output(self, accumulator: GridHistogram) -> Release | CellSelection:
        spec = self._spec
        if self._coarse:
            assert spec.cell_plan is not None
            return select_cells(accumulator, spec.grid, spec.cell_plan, rng=spec.rng)
        return spec.release(select_quantiles(accumulator, spec.grid, spec.plan, rng=spec.rng))

    def display_data(self) -> dict[str, Any]:
        return {
            "statistic": self._spec.statistic,
            "grid": repr(self._spec.grid),
            "pass": "coarse" if self._coarse else "single",
        }


@dataclass
class _FinePartial:
    """Second-pass accumulator: the (public) coarse outcome and a histogram on its fine grid."""

    coarse: CellSelection | None
    histogram: GridHistogram | None


class _BinFineFn(beam.DoFn):
    """Bin a batch on the fine grid inside its key's coarse cells (a side input)."""

    def __init__(self, spec: _QuantileSpec) -> None:
        super().__init__()
        self._spec = spec
        self._cache: dict[tuple[int, ...], Grid] = {}

    def process(
        self, element: tuple[Any, Any], coarse: Mapping[Any, CellSelection]
    ) -> Iterator[tuple[Any, _FinePartial]]:
        key, batch = element
        selection = coarse[key]
        grid = self._cache.get(selection.cells)
        if grid is None:
            grid = refine_grid(self._spec.grid, selection.cells, self._spec.refine_points)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[selection.cells] = grid
        histogram = GridHistogram(grid.num_slots)
        values = _values(batch)
        if values.size:
            histogram.add_slots(grid.slots(values))
        yield key, _FinePartial(selection, histogram.compact())


class _FineCombineFn(beam.CombineFn):
    """Merge second-pass histograms; ``extract_output`` releases the refined quantiles."""

    def __init__(self, spec: _QuantileSpec) -> None:
        super().__init__()
        self._spec = spec

    def create_accumulator(self) -> _FinePartial:
        return _FinePartial(None, None)

    def add_input(self, accumulator: _FinePartial, element: _FinePartial) -> _FinePartial:
        return self.merge_accumulators([accumulator, element])

    def merge_accumulators(self, accumulators: Iterable[_FinePartial]) -> _FinePartial:
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

    def compact(self, accumulator: _FinePartial) -> _FinePartial:
        if accumulator.histogram is not None:
            accumulator.histogram.compact()
        return accumulator

    def extract_output(self, accumulator: _FinePartial) -> Release:
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


@dataclass(frozen=True)
class _MeanSpec:
    name: str
    plan: MeanPlan
    relation: str
    epsilon: float
    rho: float | None
    bounds: Mapping[str, int]
    confidence: float
    rng: RandomSource | None

    def release(self, selection: MeanSelection) -> Release:
        return make_release(
            name=self.name,
            statistic="mean",
            value=selection.value,
            mechanism=self.plan.method,
            epsilon=self.epsilon,
            sensitivity=selection.sensitivity,
            neighbouring=self.relation,
            monotone=False,
            num_candidates=selection.num_candidates,
            contribution_bounds=self.bounds,
            confidence=self.confidence,
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
            rho=self.rho,
            rng_secure=selection.secure,
        )


class MeanCombineFn(beam.CombineFn):
    """Exact sum and count of the clamped values; ``extract_output`` releases the mean."""

    def __init__(self, spec: _MeanSpec) -> None:
        super().__init__()
        self._spec = spec

    def create_accumulator(self) -> ExactSum:
        grid = self._spec.plan.grid
        return ExactSum(grid.lower, grid.upper)

    def add_input(self, accumulator: ExactSum, element: Any) -> ExactSum:
        values = _values(element)
        if values.size:
            accumulator.add(values)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[ExactSum]) -> ExactSum:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            first.merge(other)
        return first

    def extract_output(self, accumulator: ExactSum) -> Release:
        spec = self._spec
        return spec.release(select_mean(accumulator, spec.plan, rng=spec.rng))

    def display_data(self) -> dict[str, Any]:
        return {"statistic": "mean", "grid": repr(self._spec.plan.grid)}


# ------------------------------------------------------------------------------ plumbing


class _KeyRawFn(beam.DoFn):
    """``(key, number or array)`` to ``(key position, array)``; other keys are dropped."""

    def __init__(self, keys: tuple[Any, ...]) -> None:
        super().__init__()
        self._keys = keys
        self._positions: dict[Any, int] | None = None

    def process(self, element: tuple[Any, Any]) -> Iterator[tuple[int, npt.NDArray[np.float64]]]:
        if self._positions is None:
            self._positions = {key: i for i, key in enumerate(self._keys)}
        try:
            key, value = element
        except (TypeError, ValueError):
            raise TypeError(
                "with value_column=None, .PerKey elements must be (key, value) pairs"
            ) from None
        position = self._positions.get(key)
        if position is not None:
            yield position, _values(value)


def _every_key(_: Any, num_keys: int) -> Iterator[tuple[int, ColumnBatch]]:
    for position in range(num_keys):
        yield position, EMPTY


class _AttachKeyFn(beam.DoFn):
    def __init__(self, keys: tuple[Any, ...]) -> None:
        super().__init__()
        self._keys = keys

    def process(self, element: tuple[int, Release]) -> Iterator[Release]:
        position, release = element
        yield dataclasses.replace(release, key=self._keys[position])


def _drop_key(element: tuple[Any, Any]) -> Any:
    return element[1]


def _with_key(element: Any) -> tuple[int, Any]:
    return 0, element


def _prepare(pcoll: PCollection, common: _Common) -> PCollection:
    """Input to value batches (encoded, bounded) or raw values; keyed for ``.PerKey``.

    The windowing is checked first (:func:`~beam_dp.beam.bounding.check_windowing`).
    """
    bounds = common.contribution_bounds()
    check_windowing(
        pcoll, unit_level=bounds is not None, max_windows_per_unit=common.max_windows_per_unit
    )
    if common.value_column is None:
        if common.keys is None:
            return pcoll
        return pcoll | "KeyValues" >> beam.ParDo(_KeyRawFn(common.keys))
    batches = pcoll | "Encode" >> EncodeBatches(
        unit_column=common.unit_column,
        value_column=common.value_column,
        key_column=common.key_column,
        keys=None if common.keys is None else PublicIndex(common.keys),
        on_bad_record=common.on_bad_record,  # type: ignore[arg-type]
    )
    if bounds is not None:
        batches = batches | "BoundContributions" >> BoundContributions(
            bounds,
            num_shards=common.num_shards,
            salt=common.salt,
            max_windows_per_unit=common.max_windows_per_unit,
        )
    if common.keys is None:
        return batches
    return batches | "SplitByKey" >> beam.FlatMap(split_by_key)


def _markers(pcoll: PCollection, common: _Common) -> PCollection:
    """The windows that release: the selection transforms' rule (``window_markers``)."""
    return window_markers(pcoll, unit_level=common.contribution_bounds() is not None)


def _with_every_key(pcoll: PCollection, keyed: PCollection, common: _Common) -> PCollection:
    assert common.keys is not None
    every_key = _markers(pcoll, common) | "EveryPublicKey" >> beam.FlatMap(
        _every_key, len(common.keys)
    )
    return (keyed, every_key) | "WithEveryKey" >> beam.Flatten()


def _empty_batch(_: Any) -> ColumnBatch:
    return EMPTY


def _with_empty(pcoll: PCollection, values: PCollection, common: _Common) -> PCollection:
    # An empty batch in every window that releases (in the global window: even without input).
    empty = _markers(pcoll, common) | "EmptyBatch" >> beam.Map(_empty_batch)
    return (values, empty) | "WithEmptyBatch" >> beam.Flatten()


def _expand_combine(pcoll: PCollection, common: _Common, combine_fn: beam.CombineFn) -> PCollection:
    values = _prepare(pcoll, common)
    if common.keys is None:
        releases = (
            _with_empty(pcoll, values, common)
            | "Select" >> beam.CombineGlobally(combine_fn).without_defaults()
        )
    else:
        releases = (
            _with_every_key(pcoll, values, common)
            | "SelectPerKey" >> beam.CombinePerKey(combine_fn)
            | "AttachKey" >> beam.ParDo(_AttachKeyFn(common.keys))
        )
    return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())


def _expand_refined(pcoll: PCollection, common: _Common, spec: _QuantileSpec) -> PCollection:
    values = _prepare(pcoll, common)
    if common.keys is None:
        keyed = _with_empty(pcoll, values, common) | "Key" >> beam.Map(_with_key)
    else:
        keyed = _with_every_key(pcoll, values, common)
    coarse = keyed | "CoarsePass" >> beam.CombinePerKey(QuantileCombineFn(spec, coarse=True))
    releases = (
        keyed
        | "BinFine" >> beam.ParDo(_BinFineFn(spec), AsDict(coarse))
        | "FinePass" >> beam.CombinePerKey(_FineCombineFn(spec))
    )
    if common.keys is None:
        releases = releases | "DropKey" >> beam.Map(_drop_key)
    else:
        releases = releases | "AttachKey" >> beam.ParDo(_AttachKeyFn(common.keys))
    return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())


# -------------------------------------------------------------------------- transforms


class _QuantileTransform(beam.PTransform):
    """Private quantiles from a grid histogram (see the module docstring).

    Args:
        quantiles: the quantiles, each strictly between 0 and 1 (floats are read as the
            decimals they were written as: 0.9 is 9/10).
        lower, upper: public clamping bounds (finite, ``lower < upper``): values outside are
            clamped, NaN and null values dropped.
        epsilon: a float (> 0) or an allocated ``BudgetShare`` of mechanism ``method`` with
            ``rounds`` equal to the plan's rounds (``transform.plan.rounds``).
        unit_column: the privacy-unit field, or None for record-level privacy.
        value_column: the numeric field of the input batches (default ``"value"``); None when
            the elements are numbers or arrays of numbers (``.PerKey``: ``(key, values)``
            pairs), which is record-level only.
        grid: ``"uniform"`` (default), ``"log"`` (for heavy tails; needs ``lower > 0``),
            explicit points inside ``[lower, upper]``, or a ``Grid``.
        num_points: grid size for ``"uniform"`` and ``"log"`` (2 to ``MAX_GRID_POINTS``).
        relation: ``"add_remove"`` (default) or ``"replace"``.
        max_contributions: values kept per privacy unit (needs ``unit_column``); the
            sensitivity is multiplied by it.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
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
        key_column, keys, max_keys_per_unit: ``.PerKey`` only: the partition-key field, the
            public keys (records with other keys are dropped; every key gets a release) and
            the keys kept per unit (default 1; None for no bound, which splits epsilon over
            all keys).
        name: the release name (default: the statistic; a budget share's name otherwise).
        confidence: probability with which the accuracy bounds hold together (default 0.95).
        num_shards, salt: of the contribution-bounding shuffle (``BoundContributions``).
        on_bad_record: ``"skip"`` (default: NaN/null values and null units are dropped, a
            public rule) or ``"fail"`` (raise instead).
        rng: None (the OS CSPRNG); a seeded ``RandomSource`` only in tests.
        max_windows_per_unit: on windowed input (with a ``unit_column``), the windows a unit
            keeps values in (enforced; default 1); each window's release runs at
            ``ε / max_windows_per_unit``.

    Raises:
        ValueError, TypeError: at construction, naming the bad parameter and its rule (bad
        epsilon, ``lower >= upper``, NaN bounds, a grid too large, ...), before any pipeline
        runs.

    Privacy:
        epsilon-DP under ``relation`` over all the windows (``max_windows_per_unit``) and, for
        ``.PerKey``, all the keys, with ``max_contributions`` values per unit. Only grid points
        are released.
    """

    _NAMESPACE: ClassVar[str] = "PrivateQuantiles"
    _VARIANT: ClassVar[str] = "Globally"
    _PER_KEY: ClassVar[bool] = False
    _STATISTIC: ClassVar[str] = "quantiles"
    _SCALAR: ClassVar[bool] = False

    def __init__(
        self,
        quantiles: Sequence[float | Fraction],
        *,
        lower: float,
        upper: float,
        epsilon: float | BudgetShare,
        unit_column: str | None,
        value_column: str | None = "value",
        grid: GridLike = "uniform",
        num_points: int = DEFAULT_NUM_POINTS,
        relation: str = "add_remove",
        max_contributions: int = 1,
        method: str = "permute_and_flip",
        split: str = DEFAULT_SPLIT,
        refine: bool = False,
        refine_fraction: float = DEFAULT_REFINE_FRACTION,
        refine_points: int | None = None,
        key_column: str | None = "key",
        keys: Sequence[Any] | None = None,
        max_keys_per_unit: int | None = 1,
        name: str | None = None,
        confidence: float = 0.95,
        num_shards: int = 32,
        salt: int | None = None,
        on_bad_record: str = "skip",
        rng: RandomSource | None = None,
        max_windows_per_unit: int = 1,
    ) -> None:
        super().__init__()
        per_key = self._PER_KEY
        if not per_key and keys is not None:
            raise ValueError("'keys' applies only to .PerKey")
        if per_key and keys is None:
            raise ValueError("'keys' (the public partition keys) is required for .PerKey")
        common = _common(
            lower=lower,
            upper=upper,
            unit_column=unit_column,
            value_column=value_column,
            relation=relation,
            max_contributions=max_contributions,
            method=method,
            key_column=key_column if value_column is not None else None,
            keys=keys,
            max_keys_per_unit=max_keys_per_unit,
            per_key=per_key,
            confidence=confidence,
            num_shards=num_shards,
            salt=salt,
            on_bad_record=on_bad_record,
            rng=rng,
            max_windows_per_unit=max_windows_per_unit,
        )
        parsed = parse_quantiles(quantiles)
        the_grid = make_grid(grid, common.lower, common.upper, num_points)
        if not isinstance(refine, bool):
            raise TypeError(f"'refine' must be a bool; received {refine!r}")
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
        # The rounds depend on the quantiles and the split only: plan once to learn them.
        rounds = plan_quantiles(
            parsed, epsilon=1.0, num_candidates=the_grid.num_points, split=split
        ).rounds
        budget = resolve_budget(
            epsilon,
            name=name,
            default_name=self._STATISTIC,
            mechanism=common.method,
            rounds=rounds,
        )
        share = split_share(
            budget,
            keys_per_unit=common.keys_per_unit,
            windows_per_unit=common.max_windows_per_unit,
        )
        per_key_epsilon = Fraction(share.epsilon)
        rho = share.rho
        options: dict[str, Any] = {
            "relation": common.relation,
            "max_contributions": common.max_contributions,
            "method": common.method,
            "split": split,
            "confidence": common.confidence,
        }
        cell_plan = None
        if refine:
            beta = (1.0 - common.confidence) / 2
            coarse_epsilon = per_key_epsilon * Fraction(refine_fraction)
            cell_plan = plan_cells(
                parsed,
                epsilon=coarse_epsilon,
                num_cells=the_grid.num_points - 1,
                relation=common.relation,
                max_contributions=common.max_contributions,
                method=common.method,
                failure_probability=beta,
            )
            plan = plan_quantiles(
                parsed,
                epsilon=per_key_epsilon - coarse_epsilon,
                num_candidates=distinct * fine_points,
                failure_probability=beta,
                **options,
            )
        else:
            plan = plan_quantiles(
                parsed, epsilon=per_key_epsilon, num_candidates=the_grid.num_points, **options
            )
        self._common_params = common
        self._spec = _QuantileSpec(
            name=budget.name,
            statistic=self._STATISTIC,
            grid=the_grid,
            plan=plan,
            cell_plan=cell_plan,
            refine_points=fine_points,
            scalar=self._SCALAR,
            relation=common.relation,
            epsilon=float(per_key_epsilon),
            rho=rho,
            bounds=common.ledger_bounds(),
            confidence=common.confidence,
            rng=common.rng,
        )
        self._release_name = budget.name
        rank_error = plan.rank_error + (0.0 if cell_plan is None else max(cell_plan.loss_bounds))
        self._display: dict[str, Any] = {
            "name": budget.name,
            "statistic": self._STATISTIC,
            "quantiles": str([float(q) for q in parsed]),
            "epsilon": budget.epsilon,
            "lower": common.lower,
            "upper": common.upper,
            "grid": the_grid.kind,
            "num_points": the_grid.num_points,
            "relation": common.relation,
            "method": common.method,
            "split": plan.split,
            "rounds": plan.rounds,
            "refine": refine,
            "privacy_unit": "record" if common.record_level else "unit_column",
            "contribution_bounds": str(common.ledger_bounds()),
            "rank_error_bound": rank_error,
        }
        if common.keys is not None:
            self._display["num_keys"] = len(common.keys)
            self._display["epsilon_per_key"] = float(per_key_epsilon)

    @property
    def plan(self) -> QuantilePlan:
        """The public plan of the quantile selections (the fine pass with ``refine=True``)."""
        return self._spec.plan

    @property
    def keys_per_unit(self) -> int:
        """How many of the releases (per window) one unit can influence (1 for ``.Globally``)."""
        return self._common_params.keys_per_unit

    @property
    def max_windows_per_unit(self) -> int:
        """How many windows' releases one unit can influence (enforced by bounding)."""
        return self._common_params.max_windows_per_unit

    def expand(self, pcoll: PCollection) -> PCollection:
        if self._spec.cell_plan is not None:
            return _expand_refined(pcoll, self._common_params, self._spec)
        return _expand_combine(pcoll, self._common_params, QuantileCombineFn(self._spec))

    def default_label(self) -> str:
        return f"{self._NAMESPACE}.{self._VARIANT}({self._release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._display)


class PrivateQuantiles:
    """Private quantiles: ``PrivateQuantiles.Globally(quantiles, ...)`` and ``.PerKey``.

    Each window (and key) gets one :class:`~beam_dp.release.Release` whose value is the list
    of released grid points, one per requested quantile in request order (non-decreasing
    for increasing quantiles). Arguments: see ``_QuantileTransform``; ``.PerKey`` also takes
    ``keys`` (required), ``key_column`` and ``max_keys_per_unit``.
    """

    class Globally(_QuantileTransform):
        """Private quantiles of all the values, one release per window."""

        _VARIANT = "Globally"

    class PerKey(_QuantileTransform):
        """Private quantiles per public key, one release per key and window."""

        _VARIANT = "PerKey"
        _PER_KEY = True


class _Median(_QuantileTransform):
    def __init__(self, **options: Any) -> None:
        super().__init__([Fraction(1, 2)], **options)


class _Extreme(_QuantileTransform):
    _QUANTILE: ClassVar[str] = "min"

    def __init__(self, *, tail: float = DEFAULT_TAIL, **options: Any) -> None:
        lowest = parse_quantiles([tail])[0]
        if not lowest < Fraction(1, 2):
            raise ValueError(f"'tail' must be strictly between 0 and 0.5; received {tail!r}")
        super().__init__([lowest if self._QUANTILE == "min" else 1 - lowest], **options)


class PrivateMedian:
    """The private median (``Release.value`` is one grid point): ``.Globally``, ``.PerKey``.

    Arguments as :class:`PrivateQuantiles` without ``quantiles``.
    """

    class Globally(_Median):
        """The private median of all the values, one release per window."""

        _NAMESPACE = "PrivateMedian"
        _STATISTIC = "median"
        _SCALAR = True

    class PerKey(_Median):
        """The private median per public key."""

        _NAMESPACE = "PrivateMedian"
        _VARIANT = "PerKey"
        _PER_KEY = True
        _STATISTIC = "median"
        _SCALAR = True


class PrivateMin:
    """A private minimum: the ``tail`` quantile (default 0.01), an extreme quantile.

    The exact minimum has unbounded sensitivity in value; the ``tail`` quantile is its private
    stand-in. Choose ``tail`` so that ``tail * N`` is well above the release's ``rank_error``:
    otherwise the many grid points below the data (all with about the same score) can win.
    Arguments as :class:`PrivateQuantiles` without ``quantiles``, plus ``tail`` in (0, 0.5).
    """

    class Globally(_Extreme):
        """A private minimum of all the values, one release per window."""

        _NAMESPACE = "PrivateMin"
        _STATISTIC = "min"
        _SCALAR = True
        _QUANTILE = "min"

    class PerKey(_Extreme):
        """A private minimum per public key."""

        _NAMESPACE = "PrivateMin"
        _VARIANT = "PerKey"
        _PER_KEY = True
        _STATISTIC = "min"
        _SCALAR = True
        _QUANTILE = "min"


class PrivateMax:
    """A private maximum: the ``1 - tail`` quantile (default 0.99). See :class:`PrivateMin`."""

    class Globally(_Extreme):
        """A private maximum of all the values, one release per window."""

        _NAMESPACE = "PrivateMax"
        _STATISTIC = "max"
        _SCALAR = True
        _QUANTILE = "max"

    class PerKey(_Extreme):
        """A private maximum per public key."""

        _NAMESPACE = "PrivateMax"
        _VARIANT = "PerKey"
        _PER_KEY = True
        _STATISTIC = "max"
        _SCALAR = True
        _QUANTILE = "max"


class _MeanTransform(beam.PTransform):
    """A private mean by the exponential mechanism over a public grid (seed 004).

    Args:
        lower, upper: public clamping bounds; the grid lies inside them.
        epsilon: a float or an allocated ``BudgetShare`` (mechanism ``method``, ``rounds=1``).
        unit_column, value_column, max_contributions, key_column, keys, max_keys_per_unit,
        name, confidence, num_shards, salt, on_bad_record, rng, max_windows_per_unit: as for
        the quantiles.
        relation: ``"replace"`` with the public number of values ``n`` uses the seed's
            utility ``-|mean - r|`` (sensitivity ``k (upper - lower) / n``), with the mean
            read as the centred sum ``mid + sum(x - mid) / n`` over the public ``n``: the true
            mean when ``n`` values are kept, and defined (never an error) for any other count,
            so whether the release succeeds never depends on the data. ``"add_remove"``
            (default) needs no ``n``: it uses ``-|sum(x) - N r|``, sensitivity
            ``k (upper - lower)`` (see :mod:`beam_dp.summaries.quantiles`).
        n: the public number of values (``replace`` only; per key for ``.PerKey``).
        grid, num_points: the candidate grid (default uniform, 10^4 points).

    Privacy:
        epsilon-DP under ``relation``; only a grid point is released. ``accuracy.score_loss``
        bounds ``|mean - output|`` (replace) or ``|sum - N output|`` (add_remove) beyond the
        grid term (at most half a cell in the mean's units).
    """

    _NAMESPACE: ClassVar[str] = "PrivateMean"
    _VARIANT: ClassVar[str] = "Globally"
    _PER_KEY: ClassVar[bool] = False

    def __init__(
        self,
        *,
        lower: float,
        upper: float,
        epsilon: float | BudgetShare,
        unit_column: str | None,
        value_column: str | None = "value",
        relation: str = "add_remove",
        n: int | None = None,
        grid: GridLike = "uniform",
        num_points: int = DEFAULT_MEAN_POINTS,
        max_contributions: int = 1,
        method: str = "permute_and_flip",
        key_column: str | None = "key",
        keys: Sequence[Any] | None = None,
        max_keys_per_unit: int | None = 1,
        name: str | None = None,
        confidence: float = 0.95,
        num_shards: int = 32,
        salt: int | None = None,
        on_bad_record: str = "skip",
        rng: RandomSource | None = None,
        max_windows_per_unit: int = 1,
    ) -> None:
        super().__init__()
        per_key = self._PER_KEY
        if not per_key and keys is not None:
            raise ValueError("'keys' applies only to .PerKey")
        if per_key and keys is None:
            raise ValueError("'keys' (the public partition keys) is required for .PerKey")
        common = _common(
            lower=lower,
            upper=upper,
            unit_column=unit_column,
            value_column=value_column,
            relation=relation,
            max_contributions=max_contributions,
            method=method,
            key_column=key_column if value_column is not None else None,
            keys=keys,
            max_keys_per_unit=max_keys_per_unit,
            per_key=per_key,
            confidence=confidence,
            num_shards=num_shards,
            salt=salt,
            on_bad_record=on_bad_record,
            rng=rng,
            max_windows_per_unit=max_windows_per_unit,
        )
        the_grid = make_grid(grid, common.lower, common.upper, num_points)
        budget = resolve_budget(
            epsilon, name=name, default_name="mean", mechanism=common.method, rounds=1
        )
        share = split_share(
            budget,
            keys_per_unit=common.keys_per_unit,
            windows_per_unit=common.max_windows_per_unit,
        )
        per_key_epsilon = Fraction(share.epsilon)
        plan = plan_mean(
            the_grid,
            epsilon=per_key_epsilon,
            relation=common.relation,
            n=n,
            max_contributions=common.max_contributions,
            method=common.method,
            confidence=common.confidence,
        )
        self._common_params = common
        self._spec = _MeanSpec(
            name=budget.name,
            plan=plan,
            relation=common.relation,
            epsilon=float(per_key_epsilon),
            rho=share.rho,
            bounds=common.ledger_bounds(),
            confidence=common.confidence,
            rng=common.rng,
        )
        self._release_name = budget.name
        self._display: dict[str, Any] = {
            "name": budget.name,
            "statistic": "mean",
            "epsilon": budget.epsilon,
            "lower": common.lower,
            "upper": common.upper,
            "grid": the_grid.kind,
            "num_points": the_grid.num_points,
            "relation": common.relation,
            "method": common.method,
            "privacy_unit": "record" if common.record_level else "unit_column",
            "contribution_bounds": str(common.ledger_bounds()),
        }
        if common.keys is not None:
            self._display["num_keys"] = len(common.keys)

    def expand(self, pcoll: PCollection) -> PCollection:
        return _expand_combine(pcoll, self._common_params, MeanCombineFn(self._spec))

    def default_label(self) -> str:
        return f"{self._NAMESPACE}.{self._VARIANT}({self._release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._display)


class PrivateMean:
    """A private mean: ``PrivateMean.Globally(...)`` and ``.PerKey(...)``.

    See ``_MeanTransform`` for the arguments and the two relations.
    """

    class Globally(_MeanTransform):
        """The private mean of all the values, one release per window."""

        _VARIANT = "Globally"

    class PerKey(_MeanTransform):
        """The private mean per public key."""

        _VARIANT = "PerKey"
        _PER_KEY = True
