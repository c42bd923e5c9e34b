"""Private selection on Beam: heavy hitters, best price, elections and a user's own score.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms, as Beam's own
combiners (``Count.Globally``, ``Top.PerKey``)::

    releases = batches | TopCandidates.Globally(
        candidate_column="site", candidates=sites, unit_column="user_id", epsilon=0.5)

The transforms take **batches** (pyarrow RecordBatches or Tables, mappings of columns, lists of
dicts). A release is planned without Beam (:mod:`beam_dp.summaries.selection`: the
:class:`~beam_dp.summaries.selection.SelectionSpec` with its sensitivity, monotonicity, budget
and rounds, the bounds the pipeline enforces, the exact sampler run once on the merged scores,
the release record); this module reads the keywords, resolves the budget and wires the plan
into a combiner. Read top to bottom: the options of each statistic, the combiners (each batch
reduced with numpy into an integer vector indexed by candidate; vectors merge by addition;
``.PerKey`` with ``k = 1`` releases many keys with one vectorised exact draw), the wiring, and
the transforms. Only :class:`ExponentialSelect` takes a declared sensitivity, for a user's
score.

Candidates (``candidates=``) are public: a sequence of labels, a path to a text file (one
label per line), or a PCollection of labels used as a side input (for counts-based scores;
every worker sorts it, so labels must be mutually comparable). When the candidates are not
public, ``TopCandidates.Globally(candidates=None, key_selection=KeySelection(...))`` runs DP
key selection first (:mod:`beam_dp.beam.key_selection`, the one family module this one
imports).

Privacy: a budget share names the mechanism ``method`` (``method + "_top_k"`` with
``rounds=k`` for top-k); ``Release.ledger.rho`` is set when it is accounted by zCDP. Units
(``record_level=True``), keys, windows and the budget division:
``docs/privacy_rules.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, Required, TypedDict, Unpack

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import PCollection

from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ColumnBatch,
    ContributionBounds,
    PublicIndex,
    encode_batch,
    num_rows,
)
from beam_dp.batching.columns import LabelMatch, with_source
from beam_dp.beam._contributions import is_heartbeat
from beam_dp.beam._graph import BatchedSelectFn, split_by_key
from beam_dp.beam._transform import (
    Built,
    CommonOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    PublicList,
    check_column,
    divide_budget,
    static_labels,
    take_options,
)
from beam_dp.beam.key_selection import KeySelection, key_selection_wiring
from beam_dp.release import Release
from beam_dp.scores import Revenue
from beam_dp.summaries.counts import (
    PerUnitRule,
    at_least_counts,
    candidate_counts,
    merge_into,
    reduce_per_unit,
    threshold_histogram,
)
from beam_dp.summaries.selection import (
    Counts,
    Labels,
    PackedGrid,
    SelectionPlan,
    SelectionSpec,
    check_declared_score,
    check_election_score,
    check_key_selection_relation,
    check_max_candidates_per_unit,
    check_per_unit_rule,
    check_release_names,
    describe,
    election_score,
    plan_best_price,
    plan_custom,
    plan_election,
    plan_top_after_key_selection,
    plan_top_candidates,
    revenue_score,
    sorted_labels,
)

__all__ = [
    "BestPrice",
    "CandidateCountsFn",
    "Election",
    "ExponentialSelect",
    "RevenueFn",
    "TopCandidates",
]


# ------------------------------------------------------------------------------- options


Candidates = Sequence[Any] | str | os.PathLike[str] | PCollection

# A statistic's own keywords are declared once, in a TypedDict of the functional form (its
# Required[...] stays visible at run time, __required_keys__, which a class body under
# ``from __future__ import annotations`` would hide), and combined with PrivateOptions /
# PerKeyOptions into each variant's ``**options``; its build function reads them and applies
# their defaults.
_TopCandidatesOwn = TypedDict(  # noqa: UP013 (Required read at run time)
    "_TopCandidatesOwn",
    {
        "candidate_column": Required[str],
        "unit_column": str | None,
        "k": int,
        # "auto" is refused with its reason (and taken by a KeySelection in job configs)
        "max_candidates_per_unit": int | Literal["auto"] | None,
    },
    total=False,
)


_MaybePublicCandidates = TypedDict(  # noqa: UP013 (Required read at run time)
    "_MaybePublicCandidates",
    {"candidates": Required[Candidates | None], "key_selection": KeySelection | None},
    total=False,
)


_PublicCandidates = TypedDict(  # noqa: UP013 (Required read at run time)
    "_PublicCandidates", {"candidates": Required[Candidates]}
)


class TopCandidatesArgs(_TopCandidatesOwn, _MaybePublicCandidates, total=False):
    """:class:`TopCandidates`' own keywords (``.Globally``)."""


class TopCandidatesGloballyOptions(TopCandidatesArgs, PrivateOptions, total=False):
    """Every keyword of ``TopCandidates.Globally``."""


class TopCandidatesPerKeyOptions(_TopCandidatesOwn, _PublicCandidates, PerKeyOptions, total=False):
    """Every keyword of ``TopCandidates.PerKey``."""


BestPriceArgs = TypedDict(  # noqa: UP013 (Required read at run time)
    "BestPriceArgs",
    {
        "value_column": Required[str],
        "unit_column": str | None,
        "prices": Sequence[Any] | Revenue | None,
        "per_unit": str,
    },
    total=False,
)


class BestPriceGloballyOptions(BestPriceArgs, PrivateOptions, total=False):
    """Every keyword of ``BestPrice.Globally``."""


class BestPricePerKeyOptions(BestPriceArgs, PerKeyOptions, total=False):
    """Every keyword of ``BestPrice.PerKey``."""


_ElectionOwn = TypedDict(  # noqa: UP013 (Required read at run time)
    "_ElectionOwn",
    {"candidate_column": Required[str], "unit_column": str | None, "score": str},
    total=False,
)


class ElectionArgs(_ElectionOwn, _PublicCandidates, total=False):
    """:class:`Election`'s own keywords."""


class ElectionGloballyOptions(ElectionArgs, PrivateOptions, total=False):
    """Every keyword of ``Election.Globally``."""


class ElectionPerKeyOptions(ElectionArgs, PerKeyOptions, total=False):
    """Every keyword of ``Election.PerKey``."""


# ``score_fn`` stays positional.
ExponentialSelectArgs = TypedDict(  # noqa: UP013 (Required read at run time)
    "ExponentialSelectArgs",
    {
        "candidates": Required[PublicList],
        "sensitivity": Required[float | Fraction],
        "monotone": Required[bool],
        "unit_column": str | None,
        "candidate_column": str | None,
        "value_column": str | None,
        "bounds": ContributionBounds | None,
        "statistic": str,
        "k": int,
    },
    total=False,
)


class ExponentialSelectGloballyOptions(ExponentialSelectArgs, PrivateOptions, total=False):
    """Every keyword of ``ExponentialSelect.Globally``."""


class ExponentialSelectPerKeyOptions(ExponentialSelectArgs, PerKeyOptions, total=False):
    """Every keyword of ``ExponentialSelect.PerKey``."""


# ----------------------------------------------------------------------------- the combiners


class _LabelCache:
    """The sorted labels of a side input, recomputed only when the side input object changes.

    Static labels may be a tuple or a one-dimensional numpy array (a price grid: one buffer to
    pickle instead of a million floats).
    """

    def __init__(self, static: Labels | None) -> None:
        self._static = static
        self._source: Any = None
        self._labels: Labels = ()

    @property
    def static(self) -> Labels | None:
        """The static labels (None: from a side input)."""
        return self._static

    def get(self, args: Sequence[Any]) -> Labels:
        if self._static is not None:
            return self._static
        side = args[0]
        if side is not self._source:
            self._labels = sorted_labels(side)
            self._source = side
        return self._labels

    def __getstate__(self) -> tuple[Labels | None]:
        # A one-element tuple (never falsy, so that copy and pickle call __setstate__).
        return (self._static,)

    def __setstate__(self, state: tuple[Labels | None]) -> None:
        self.__init__(state[0])  # type: ignore[misc]


class _VectorSelectFn(BatchedSelectFn):
    """Base combiner: an int64 vector accumulator that adds per batch and merges by addition.

    Subclasses define the accumulator length, what one batch adds, and the scores. As a
    :class:`~beam_dp.beam._graph.BatchedSelectFn`, ``.PerKey`` transforms release many keys'
    selections at once (:meth:`scores_of`, :meth:`release_batch`) when ``k = 1``.
    """

    def __init__(self, spec: SelectionSpec, labels: Labels | None) -> None:
        super().__init__()
        self._spec = spec
        self._labels = _LabelCache(labels)

    def _size(self, num_candidates: int) -> int:
        return num_candidates

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        raise NotImplementedError

    def _scores(self, accumulator: Counts) -> Any:
        return accumulator

    def create_accumulator(self, *args: Any) -> Counts:
        return np.zeros(self._size(len(self._labels.get(args))), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            accumulator += self._summarise(batch, len(self._labels.get(args)))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> list[Release]:
        labels = self._labels.get(args)
        if len(labels) == 0:  # an empty side input: nothing to select from, nothing released
            return []
        return [self._spec.release(self._scores(accumulator), labels)]

    @property
    def batchable(self) -> bool:
        """One selection per key (``k = 1``): keys can be released in batches."""
        return self._spec.k == 1

    def row_size(self) -> int | None:
        static = self._labels.static
        return None if static is None else self._size(len(static))

    def shard_fn(self, keys_per_shard: int) -> beam.CombineFn:
        return _ShardFn(self, keys_per_shard)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        """Add a batch into the rows ``rows`` (one per record: its key's row) of a shard's
        accumulator; by default one key at a time (all of a key's rows together)."""
        keyed = dict(batch)
        keyed[KEY] = rows
        for row, sub in split_by_key(keyed):
            accumulator[row] += self._summarise(sub, n)

    def scores_of(self, accumulator: Counts, *args: Any) -> Any:
        """The merged scores :meth:`extract_output` would select from (None: no candidate)."""
        if len(self._labels.get(args)) == 0:
            return None
        return self._scores(accumulator)

    def release_batch(self, scores: Sequence[Any], *args: Any) -> list[list[Release]]:
        """Each key's releases, as :meth:`extract_output` would give them, drawn together."""
        labels = self._labels.get(args)
        present = [row for row in scores if row is not None]
        releases = iter(self._spec.release_many(present, labels) if len(labels) else [])
        return [[] if row is None else [next(releases)] for row in scores]

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()


class CandidateCountsFn(_VectorSelectFn):
    """Rows per candidate: distinct units (heavy hitters) or votes (elections).

    After bounding with distinct candidates (or one vote per unit), or when every record is
    its own unit, the rows naming a candidate are exactly its distinct units or votes, so a
    batch adds ``bincount(candidate)``.

    Args:
        spec: the selection's parameters.
        labels: the public candidates, or None when they come from a side input.
        score: ``"counts"`` (the count itself) or ``"margin"`` (two candidates:
            ``#r - #other``).
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels | None,
        score: Literal["counts", "margin"] = "counts",
    ) -> None:
        super().__init__(spec, labels)
        self._score = score

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        return candidate_counts(batch[CANDIDATE], num_candidates)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        # Rows per (key, candidate) at once: the same counts as one bincount per key.
        cells = accumulator.shape[0] * n
        positions = np.asarray(batch[CANDIDATE], dtype=np.int64).ravel()
        if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= n):
            raise ValueError(f"candidate positions must lie in [0, {n})")  # as candidate_counts
        flat = rows * n + positions
        accumulator += np.bincount(flat, minlength=cells).reshape(accumulator.shape)

    def _scores(self, accumulator: Counts) -> Counts:
        if self._score == "margin":
            margin = accumulator[0] - accumulator[1]
            return np.array([margin, -margin], dtype=np.int64)
        return accumulator


class RevenueFn(_VectorSelectFn):
    """Revenue ``p * #{units with x >= p}`` from a histogram of one value per unit.

    The accumulator is the histogram of per-unit values over the price thresholds
    (``len(prices) + 1`` buckets); the number of buyers at each price is a reversed cumulative
    sum of it.

    Args:
        spec: the selection's parameters.
        labels: the prices as release labels (a tuple, or a float array: a large grid then
            pickles as one buffer).
        thresholds: the nearest float of each price, sorted (``x >= price`` exactly when
            ``x >= threshold`` for a decimal price; see ``Revenue``).
        scaled_prices: each price in integer score steps (``price / Revenue.unit``).
        per_unit: how a unit's several values become one (``"min"``, ``"max"``, ``"mean"``);
            None when every record is its own unit.
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels,
        thresholds: npt.NDArray[np.float64],
        scaled_prices: Counts,
        per_unit: PerUnitRule | None,
    ) -> None:
        super().__init__(spec, labels)
        self._thresholds = thresholds
        self._scaled_prices = scaled_prices
        self._per_unit = per_unit
        self._packed: PackedGrid | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Beam pickles (and bz2-compresses) a combiner many times while it builds and starts a
        # job: a grid given as START:STOP:STEP (runs of equal steps) goes as a few numbers,
        # not as two arrays of a million entries (seconds per pickle).
        state = dict(self.__dict__)
        state["_packed"] = None
        if self._packed is None:
            self._packed = PackedGrid.pack(self._scaled_prices, self._thresholds)
        if self._packed is not None:
            state["_grid"] = self._packed
            state["_labels_are_thresholds"] = self._labels.static is self._thresholds
            state["_scaled_prices"] = state["_thresholds"] = None
            if state["_labels_are_thresholds"]:
                state["_labels"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        grid = state.pop("_grid", None)
        labels_are_thresholds = state.pop("_labels_are_thresholds", False)
        self.__dict__.update(state)
        if grid is not None:
            self._scaled_prices, self._thresholds = grid.unpack()
            self._packed = grid
            if labels_are_thresholds:
                self._labels = _LabelCache(self._thresholds)

    def _size(self, num_candidates: int) -> int:
        return num_candidates + 1

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        values = batch[VALUE]
        if self._per_unit is not None:
            values = reduce_per_unit(batch[UNIT], values, self._per_unit)
        return threshold_histogram(values, self._thresholds)

    def _scores(self, accumulator: Counts) -> Any:
        buyers = at_least_counts(accumulator)
        if int(self._scaled_prices[-1]) * int(buyers[0] if buyers.size else 0) < (1 << 61):
            return self._scaled_prices * buyers
        # Beyond int64: exact Python integers (the sampler accepts them).
        return np.array(
            [int(p) * int(b) for p, b in zip(self._scaled_prices, buyers, strict=True)],
            dtype=object,
        )


class _ShardFn(beam.CombineFn):
    """One shard of a ``.PerKey`` selection's keys: a ``(keys_per_shard, size)`` accumulator.

    Row ``i`` is what the per-key combiner's accumulator would be for key
    ``shard * keys_per_shard + i`` (``position % keys_per_shard``); ``extract_output`` gives
    the rows, released by :class:`~beam_dp.beam._graph.ReleaseShardFn`.
    """

    def __init__(self, fn: _VectorSelectFn, keys_per_shard: int) -> None:
        super().__init__()
        self._fn = fn
        self._keys_per_shard = keys_per_shard

    def create_accumulator(self, *args: Any) -> Counts:
        size = self._fn._size(len(self._fn._labels.get(args)))
        return np.zeros((self._keys_per_shard, size), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            rows = np.asarray(batch[KEY], dtype=np.int64) % self._keys_per_shard
            n = len(self._fn._labels.get(args))
            self._fn._summarise_keys(batch, rows, accumulator, n)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> Counts:
        return accumulator

    def display_data(self) -> dict[str, Any]:
        return self._fn.display_data()


class CustomScoreFn(beam.CombineFn):
    """Wrap a user's score ``CombineFn``: it accumulates batches, we select on its output.

    The user's combiner receives the same column batches as the built-in ones (every batch
    holds all bounded rows of each unit in it) and its ``extract_output`` must return one score
    per candidate (ints, floats or Fractions). Its accumulator is used as it is.
    """

    def __init__(self, spec: SelectionSpec, labels: tuple[Any, ...], score_fn: beam.CombineFn):
        super().__init__()
        self._spec = spec
        self._labels = labels
        self._score_fn = score_fn

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.teardown(*args, **kwargs)

    def create_accumulator(self) -> Any:
        return self._score_fn.create_accumulator()

    def add_input(self, accumulator: Any, batch: ColumnBatch) -> Any:
        if not num_rows(batch):
            return accumulator
        return self._score_fn.add_input(accumulator, batch)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return self._score_fn.merge_accumulators(accumulators)

    def compact(self, accumulator: Any) -> Any:
        return self._score_fn.compact(accumulator)

    def extract_output(self, accumulator: Any) -> list[Release]:
        scores = self._score_fn.extract_output(accumulator)
        values = list(scores) if not isinstance(scores, np.ndarray) else scores
        if len(values) != len(self._labels):
            raise ValueError(
                f"the score CombineFn returned {len(values)} scores for "
                f"{len(self._labels)} candidates"
            )
        if not isinstance(values, np.ndarray) and any(isinstance(v, Fraction) for v in values):
            return [self._spec.release(values, self._labels)]
        return [self._spec.release(np.asarray(values), self._labels)]

    def display_data(self) -> dict[str, Any]:
        return {**self._spec.display_data(), "score_fn": type(self._score_fn).__name__}


class EncodeWithSideCandidatesFn(beam.DoFn):
    """Encode batches against candidates that arrive as a side input (a list of labels).

    Labels are put in sorted order (as the combiners do), so positions agree everywhere.
    """

    def __init__(self, options: dict[str, Any], match: LabelMatch) -> None:
        super().__init__()
        self._options = options
        self._match = match
        self._source: Any = None
        self._index: PublicIndex | None = None

    def process(
        self, element: Any, candidates: Sequence[Any], window: Any = beam.DoFn.WindowParam
    ) -> Iterator[ColumnBatch]:
        # Asking for the window (unused) keeps Beam from holding the element after the call
        # (beam_dp.beam._calls).
        del window
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        if candidates is not self._source:
            labels = sorted_labels(candidates)
            # No public candidate: nothing can be selected and nothing is encoded.
            self._index = PublicIndex(labels, self._match) if labels else None
            self._source = candidates
        if self._index is not None:
            encoded = encode_batch(batch, candidates=self._index, **options)
            if num_rows(encoded):
                yield encoded


# -------------------------------------------------------------------------------- the wiring


def resolve_candidates(
    candidates: object, *, side_input_ok: bool
) -> tuple[tuple[Any, ...] | None, PCollection | None]:
    """``(labels, None)`` for public labels, ``(None, pcoll)`` for a side-input PCollection."""
    if isinstance(candidates, PCollection):
        if not side_input_ok:
            raise TypeError(
                "'candidates' as a PCollection is supported for count scores only "
                "(TopCandidates, Election with score='plurality')"
            )
        return None, candidates
    return static_labels(candidates), None


def selection_built(
    plan: SelectionPlan,
    *,
    options: CommonOptions,
    unit_column: str | None,
    encode: dict[str, Any],
    combine_fn: beam.CombineFn,
    labels: Labels | None,
    side: PCollection | None = None,
    epsilon_total: float,
) -> Built:
    """A selection over ``plan``: encode with the keys, bound, combine."""
    record_level = unit_column is None
    encode = options.encode_options(unit_column, encode)
    if side is not None:  # the encoder reads the candidates from the side input
        del encode["candidates"]
    wiring = options.wiring(
        combine_fn,
        record_level=record_level,
        encode=encode,
        bounds=plan.bounds,
        encode_fn=None if side is None else EncodeWithSideCandidatesFn(encode, options.label_match),
        side_candidates=side,
    )
    display = describe(
        plan.spec,
        labels=labels,
        bounds=plan.bounds,
        keys=options.keys,
        epsilon_total=epsilon_total,
    )
    return Built(
        wiring,
        release_name=plan.spec.name,
        keys_per_unit=options.keys_per_unit(record_level),
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=options.shares(),
        spec=plan.spec,
    )


def public_index(labels: tuple[Any, ...] | None, match: LabelMatch) -> PublicIndex | None:
    return None if labels is None else PublicIndex(labels, match)


# ---------------------------------------------------------------------------- top candidates


def _top_candidates(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"), k=own.get("k", 1))
    candidate_column, candidates = own["candidate_column"], own["candidates"]
    unit_column, key_selection = own.get("unit_column"), own.get("key_selection")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    check_max_candidates_per_unit(own.get("max_candidates_per_unit"))
    if candidates is None:
        if options.keys is not None:
            raise ValueError("TopCandidates.PerKey needs public 'candidates'")
        if key_selection is None:
            raise ValueError(
                "'candidates' is None: pass the public candidates, or key_selection="
                "KeySelection(epsilon=..., delta=..., max_candidates_per_unit=...) to select "
                "them privately from the data first"
            )
        return _top_after_key_selection(key_selection, candidate_column, unit_column, options)
    if key_selection is not None:
        raise ValueError(
            "'key_selection' applies only when the candidates are not public "
            "(candidates=None); public candidates need no key selection"
        )
    labels, side = resolve_candidates(candidates, side_input_ok=True)
    options.check_k(None if labels is None else len(labels))
    record_level = unit_column is None
    budget = options.budget("top_candidates")
    plan = plan_top_candidates(
        options,
        options.per_release(budget, record_level),
        labels=labels,
        record_level=record_level,
        max_candidates_per_unit=own.get("max_candidates_per_unit"),
    )
    return selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(plan.spec, labels),
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


def _top_after_key_selection(
    selection: KeySelection,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
) -> Built:
    """``TopCandidates.Globally(candidates=None, key_selection=...)``: DP key selection, then
    the top-k among the selected labels, on the same counts, in one pass."""
    if not isinstance(selection, KeySelection):
        raise TypeError("'key_selection' must be a KeySelection")
    check_key_selection_relation(options.relation)
    budget = options.budget("top_candidates")
    check_release_names(budget.name, selection.resolve()[0])
    record_level = unit_column is None
    labels_per_unit = 1 if record_level else selection.held_per_unit()
    top = plan_top_after_key_selection(
        options,
        divide_budget(budget, windows_per_unit=options.windows_per_unit(record_level)),
        labels_per_unit=labels_per_unit,
        record_level=record_level,
    )
    wiring, spec = key_selection_wiring(
        selection,
        candidate_column=candidate_column,
        unit_column=unit_column,
        options=options,
        top=top,
    )
    display = describe(
        top, labels=None, bounds=wiring.bounds, keys=None, epsilon_total=budget.epsilon
    )
    display.update(
        num_candidates="selected from the data",
        key_selection_epsilon=spec.epsilon,
        key_selection_delta=spec.delta,
        max_candidates_per_unit="auto" if selection.auto() else spec.max_candidates_per_unit,
    )
    return Built(
        wiring,
        release_name=budget.name,
        keys_per_unit=1,
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=(*options.shares(), *selection.shares()),
        # the selected labels always; the top-k among them only if some label was selected
        releases=((spec.name, False), (budget.name, True)),
    )


class TopCandidates:
    """Heavy hitters: the candidate(s) that most distinct privacy units contributed.

    A selection over public candidates by the exponential mechanism (McSherry and Talwar
    2007) or permute-and-flip (McKenna and Sheldon 2020).

    Score: ``q(r) = #{units that contributed r}`` (:class:`~beam_dp.scores.DistinctUnitCount`).
    A unit that names a candidate many times counts once (contribution bounding deduplicates
    ``(unit, candidate)``); ``max_candidates_per_unit`` optionally also bounds how many distinct
    candidates a unit keeps. ``k > 1`` releases a ranked top-k by peeling (``k`` selections at
    ``ε/k``; the value is the list of labels in the order chosen).

    Args (both variants):
        candidate_column: the field naming the candidate.
        candidates: public labels (a sequence, a file path, or a PCollection side input), or
            None with ``key_selection`` (``.Globally`` only).
        unit_column: the privacy-unit field (or ``record_level=True``, a shared option, for
            record-level privacy).
        k: how many candidates to release (a ``BudgetShare`` as ``epsilon`` must then be of
            mechanism ``method + "_top_k"`` with ``rounds=k``).
        max_candidates_per_unit: distinct candidates kept per unit (None: no bound).
        key_selection: a :class:`KeySelection` when ``candidates`` is None (``.Globally``).
        **options: those of every private transform
            (:class:`~beam_dp.beam._transform.PrivateOptions`; ``name`` defaults to
            ``"top_candidates"``), and for ``.PerKey`` the keys
            (:class:`~beam_dp.beam._transform.PerKeyOptions`).

    Privacy:
        Sensitivity 1 under both relations, whatever ``max_candidates_per_unit`` (each
        candidate's count moves by at most one); monotone under ``add_remove`` only. Releases
        the chosen label(s). With ``key_selection``, the labels are first selected privately
        from the data (an extra (ε, δ) release, recorded separately), then the top-k among
        them. Units, keys and windows: ``docs/privacy_rules.md``.
    """

    class Globally(PrivateTransform):
        """Top candidate(s) over the whole input, one release per window."""

        def __init__(self, **options: Unpack[TopCandidatesGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _top_candidates)

    class PerKey(PrivateTransform):
        """Top candidate(s) per public key (e.g. per country), one release per key."""

        def __init__(self, **options: Unpack[TopCandidatesPerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _top_candidates)


# -------------------------------------------------------------------------------- best price


def _best_price(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"))
    value_column, unit_column = own["value_column"], own.get("unit_column")
    per_unit = own.get("per_unit", "max")
    check_column(value_column, "value_column")
    check_column(unit_column, "unit_column", optional=True)
    check_per_unit_rule(per_unit)
    score = revenue_score(own.get("prices"))
    record_level = unit_column is None
    budget = options.budget("best_price")
    plan = plan_best_price(
        options, options.per_release(budget, record_level), score=score, record_level=record_level
    )
    # The nearest float of each price is both the release label and the threshold: for
    # decimal prices, x >= price exactly when x >= threshold (see Revenue); the integer score
    # step is Revenue.unit. Labels stay an array: a 10^6-price grid pickles as one buffer.
    thresholds = score.thresholds
    rule = None if record_level else per_unit
    built = selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={"value_column": value_column},
        combine_fn=RevenueFn(plan.spec, thresholds, thresholds, score.scaled_prices, rule),
        labels=thresholds,
        epsilon_total=budget.epsilon,
    )
    built.display["per_unit"] = "record" if rule is None else rule
    return built


class BestPrice:
    """The posted price that maximises revenue (pricing a digital good: McSherry and Talwar 2007).

    Each privacy unit has one willingness to pay ``x_u``. A unit with several records is
    reduced to one value by ``per_unit``: ``"max"`` (default: the most the unit said it would
    pay, so it buys at every price up to it), ``"min"`` (the most cautious reading) or
    ``"mean"``. Candidates are a public price grid (default $0.01, ..., $1.99); the score is the
    revenue ``q(p) = p · #{units with x_u >= p}`` (:class:`~beam_dp.scores.Revenue`), with
    values compared to prices as exact decimals (``+inf`` buys at every price). The release
    value is the chosen price as a float.

    Args (both variants):
        value_column: the willingness-to-pay field (numeric; NaN and null are bad records).
        unit_column: the privacy-unit field; or ``record_level=True`` (each record is
            one buyer).
        prices: the public grid: exact decimals, strictly increasing (default 0.01 ... 1.99),
            or a :class:`~beam_dp.scores.Revenue` already built from it (a large grid is then
            read once for several transforms).
        per_unit: ``"max"`` (default), ``"min"`` or ``"mean"``.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``"best_price"``).

    Privacy:
        Sensitivity ``max(prices)`` under both relations, monotone under both (one value per
        unit: every count moves the same way). Releases one price.
    """

    class Globally(PrivateTransform):
        """The best price over the whole input, one release per window."""

        def __init__(self, **options: Unpack[BestPriceGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _best_price)

    class PerKey(PrivateTransform):
        """The best price per public key (e.g. per country), one release per key."""

        def __init__(self, **options: Unpack[BestPricePerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _best_price)


# ---------------------------------------------------------------------------------- election


def _election(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"))
    candidate_column, candidates = own["candidate_column"], own["candidates"]
    unit_column, score = own.get("unit_column"), own.get("score", "plurality")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    check_election_score(score)
    labels, side = resolve_candidates(candidates, side_input_ok=score == "plurality")
    score_object = election_score(score, labels)
    record_level = unit_column is None
    budget = options.budget("election")
    plan = plan_election(
        options,
        options.per_release(budget, record_level),
        score=score_object,
        record_level=record_level,
    )
    return selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(
            plan.spec, labels, "margin" if score == "margin" else "counts"
        ),
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


class Election:
    """An election among public candidates: one vote per privacy unit.

    ``score="plurality"`` (default): ``q(r) = #votes for r``
    (:class:`~beam_dp.scores.PluralityVote`). ``score="margin"``: two candidates,
    ``q(r) = #r - #other`` (:class:`~beam_dp.scores.VoteMargin`); with ``relation="replace"``
    (a switched vote) its sensitivity is 2, and ``method="exponential"`` reproduces the seed
    (P(Melon-pan) = 0.525 at ε = 0.1 for 3 votes to 1). A unit with several vote records keeps
    one of them, chosen pseudo-randomly per pipeline run by contribution bounding.

    Args (both variants):
        candidate_column: the field holding the vote.
        candidates: the public candidates (a sequence, a file path, or a PCollection side
            input for plurality).
        unit_column: the voter field; None when each record is one voter's only vote.
        score: ``"plurality"`` (default) or ``"margin"``.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``"election"``).

    Privacy:
        Plurality: sensitivity 1, monotone under ``add_remove`` only. Margin: sensitivity 1
        (``add_remove``) or 2 (``replace``), never monotone. Releases the winner's label.
    """

    class Globally(PrivateTransform):
        """The winner over the whole input, one release per window."""

        def __init__(self, **options: Unpack[ElectionGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _election)

    class PerKey(PrivateTransform):
        """One winner per public key (e.g. per village), one release per key."""

        def __init__(self, **options: Unpack[ElectionPerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _election)


# ---------------------------------------------------------------------------- a user's score


def _custom(
    score_fn: beam.CombineFn,
    variant: PrivateTransform,
    own: Mapping[str, Any],
    shared: Mapping[str, Any],
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"), k=own.get("k", 1))
    unit_column, candidate_column = own.get("unit_column"), own.get("candidate_column")
    value_column, statistic = own.get("value_column"), own.get("statistic", "custom")
    if not isinstance(score_fn, beam.CombineFn):
        raise TypeError(
            f"'score_fn' must be a beam.CombineFn; received type {type(score_fn).__name__}"
        )
    requested = check_declared_score(
        own["sensitivity"], own["monotone"], own.get("bounds"), statistic
    )
    for column, name in (
        (unit_column, "unit_column"),
        (candidate_column, "candidate_column"),
        (value_column, "value_column"),
    ):
        check_column(column, name, optional=True)
    labels = static_labels(own["candidates"])
    options.check_k(len(labels))
    record_level = unit_column is None
    budget = options.budget(statistic)
    plan = plan_custom(
        options,
        options.per_release(budget, record_level),
        statistic=statistic,
        sensitivity=own["sensitivity"],
        monotone=own["monotone"],
        requested=requested,
        record_level=record_level,
    )
    index = None if candidate_column is None else public_index(labels, options.label_match)
    built = selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": index,
            "value_column": value_column,
        },
        combine_fn=CustomScoreFn(plan.spec, labels, score_fn),
        labels=labels,
        epsilon_total=budget.epsilon,
    )
    built.display["score_fn"] = type(score_fn).__name__
    return built


class ExponentialSelect:
    """Private selection with a user's score: a ``CombineFn`` plus its declared sensitivity.

    ``score_fn`` is a ``beam.CombineFn`` whose inputs are encoded column batches (dicts of
    numpy arrays): ``"unit"`` (the stable unit hash; absent with record-level privacy),
    ``"candidate"`` (the position in ``candidates``, if ``candidate_column`` is given),
    ``"value"`` (float64, if ``value_column`` is given) and ``"key"``. Every batch holds *all*
    the bounded rows of each unit in it, so per-unit logic can run inside ``add_input``. Its
    ``extract_output`` returns one score per candidate (ints, floats or Fractions; higher is
    better). The library enforces ``bounds`` and runs the same exact selection and release as
    the built-in scores.

    Args (both variants):
        score_fn: the score ``CombineFn``.
        candidates: the public labels (a sequence or a file path).
        sensitivity: the declared sensitivity in the score's units (> 0, finite).
        monotone: the declared monotonicity under ``relation``.
        unit_column: the privacy-unit field (or ``record_level=True`` for record-level
            privacy).
        candidate_column, value_column: fields encoded for ``score_fn``.
        bounds: the contribution bounds to enforce (default: one row per unit; its
            ``max_keys_per_unit`` is replaced by the ``.PerKey`` argument).
        statistic: the ledger's statistic name (default ``"custom"``).
        k: how many candidates to release, as in :class:`TopCandidates`.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``statistic``).

    Privacy:
        The caller declares ``sensitivity`` (the largest change of any candidate's score
        between neighbours under ``relation``, given ``bounds``) and ``monotone``; the
        guarantee is only as good as that declaration. Releases the chosen label(s).
    """

    class Globally(PrivateTransform):
        """Select over the whole input, one release per window."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectGloballyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))

    class PerKey(PrivateTransform):
        """One selection per public key, one release per key."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectPerKeyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))
