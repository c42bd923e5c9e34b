"""The graph every private transform expands to: windows, keys, encode, bound, combine, label.

:func:`expand_plan` wires a :class:`~beam_dp.beam.plan.Plan` (steps listed in
:mod:`beam_dp.beam.plan`); :func:`keyed_input` and :func:`label_releases` are its two halves,
for transforms that combine more than once (the quantiles' coarse-to-fine passes).
:func:`window_markers` is the one rule for which windows release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindow, GlobalWindows

from beam_dp.batching import KEY, VALUE, ColumnBatch, num_rows, take
from beam_dp.beam.bounding import (
    BoundContributions,
    EncodeBatches,
    MatchBoundedWindows,
    check_windowing,
)
from beam_dp.beam.per_key_draw import (
    BatchedSelectFn,
    ReleaseShardFn,
    SelectBatchesPerKey,
    split_by_shard,
)
from beam_dp.release import Release

if TYPE_CHECKING:
    from beam_dp.beam.plan import Plan

__all__ = [
    "EMPTY",
    "AttachKeyFn",
    "AttachWindowFn",
    "MarkerFn",
    "expand_plan",
    "keyed_input",
    "label_releases",
    "split_by_key",
    "values_of",
    "window_markers",
]

#: An empty column batch: adds nothing to any accumulator.
EMPTY: ColumnBatch = {}


def _every_shard(_: Any, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
    for shard in range(num_shards):
        yield shard, EMPTY


# ---------------------------------------------------------------------- which windows release


class MarkerFn(beam.CombineFn):
    """One ``None`` per window that holds any element (to inject public keys there)."""

    def create_accumulator(self) -> None:
        return None

    def add_input(self, accumulator: None, element: Any) -> None:
        return None

    def merge_accumulators(self, accumulators: Iterable[None]) -> None:
        return None

    def extract_output(self, accumulator: None) -> None:
        return None


def window_markers(pcoll: PCollection, *, unit_level: bool) -> PCollection:
    """One ``None`` per window that releases: the one rule for every private transform.

    A window releases if and only if it holds at least one *input* element (in the global
    window: always, even without input), whatever encoding, bad records or bounding drop.

    Why the raw input and not the values after bounding: the set of releasing windows is
    itself released, without noise. Marked from the input, it is a function of which windows
    the input elements arrive in, a fact the operator controls and can make public: with a
    heartbeat (a batch with no rows, ``{}``) in every window, every window releases and the
    set depends on no one's data. Marked after bounding, it would also depend on each unit's
    records (a window where bounding dropped the only unit's rows, or where every row was a
    bad record or named an unknown key, would vanish), and on the salted choice of which of a
    unit's windows it keeps: one person's data would decide whether a window releases, beyond
    what ``max_windows_per_unit`` and the relation account for, and no heartbeat could hide
    it. So selection and quantile transforms both mark from the input. Without heartbeats,
    *which windows exist* is not protected (documented on the transforms).

    Args:
        pcoll: the transform's input.
        unit_level: whether the data goes through ``BoundContributions`` (the markers are
            then put in its output's windowing strategy, so that the two can be flattened).
    """
    windowfn = pcoll.windowing.windowfn
    if isinstance(windowfn, GlobalWindows):
        return pcoll.pipeline | "Once" >> beam.Create([None])
    marker = beam.CombineGlobally(MarkerFn()).without_defaults()
    markers = pcoll | "WindowsWithInput" >> marker
    if unit_level:
        markers = markers | "AsBoundedWindows" >> MatchBoundedWindows(windowfn)
    return markers


# ---------------------------------------------------------------------------- keys


def split_by_key(batch: ColumnBatch) -> Iterator[tuple[int, ColumnBatch]]:
    """Split a batch by its ``KEY`` column into ``(key position, sub-batch)`` pairs.

    Every unit's rows for one key stay together, so per-unit reductions remain correct.
    """
    if not num_rows(batch) or KEY not in batch:
        return
    keys = batch[KEY]
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    boundaries = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    for rows in np.split(order, boundaries):
        yield int(keys[rows[0]]), take(batch, rows)


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
            yield position, values_of(value)


def _every_key(_: Any, num_keys: int) -> Iterator[tuple[int, ColumnBatch]]:
    for position in range(num_keys):
        yield position, EMPTY


def _empty_batch(_: Any) -> ColumnBatch:
    return EMPTY


def _with_key(element: Any) -> tuple[int, Any]:
    return 0, element


def _as_list(releases: Release | list[Release]) -> list[Release]:
    return releases if isinstance(releases, list) else [releases]


def _drop_key(element: tuple[Any, Release | list[Release]]) -> list[Release]:
    return _as_list(element[1])


class AttachKeyFn(beam.DoFn):
    """``(key position, release or releases)`` to the releases labelled with their key."""

    def __init__(self, keys: tuple[Any, ...]) -> None:
        super().__init__()
        self._keys = keys

    def process(self, element: tuple[int, Release | list[Release]]) -> Iterator[Release]:
        position, releases = element
        for release in _as_list(releases):
            yield dataclasses.replace(release, key=self._keys[position])


class AttachWindowFn(beam.DoFn):
    """Record the window of each release (nothing for the global window)."""

    def process(self, release: Release, window: Any = beam.DoFn.WindowParam) -> Iterator[Release]:
        if isinstance(window, GlobalWindow) or not hasattr(window, "start"):
            yield release
        else:
            bounds = f"[{window.start.to_rfc3339()}, {window.end.to_rfc3339()})"
            yield dataclasses.replace(release, window=bounds)


# ---------------------------------------------------------------------------- the path


def _prepare(
    pcoll: PCollection, plan: Plan, *, split: bool = True
) -> tuple[PCollection, tuple[Any, ...]]:
    """Encoded (and bounded) batches, or raw values; and the combiner's side inputs.

    ``.PerKey`` batches are split by key unless ``split`` is False (the caller splits).
    """
    unit_level = plan.bounds is not None
    check_windowing(pcoll, unit_level=unit_level, max_windows_per_unit=plan.max_windows_per_unit)
    args: tuple[Any, ...] = ()
    if plan.side_candidates is not None:
        args = (beam.pvalue.AsList(plan.side_candidates),)
    if plan.encode_fn is not None:
        batches = pcoll | "Encode" >> beam.ParDo(plan.encode_fn, *args)
    elif plan.encode is not None:
        batches = pcoll | "Encode" >> EncodeBatches(**plan.encode)
    elif plan.keys is None:  # raw numbers (record-level privacy: nothing to bound)
        return pcoll, args
    else:
        return pcoll | "KeyValues" >> beam.ParDo(_KeyRawFn(plan.keys)), args
    if plan.bounds is not None:
        batches = batches | "BoundContributions" >> BoundContributions(
            plan.bounds,
            num_shards=plan.num_shards,
            salt=plan.salt,
            max_windows_per_unit=plan.max_windows_per_unit,
        )
    if plan.keys is not None and split:
        batches = batches | "SplitByKey" >> beam.FlatMap(split_by_key)
    return batches, args


def _with_markers(
    pcoll: PCollection, plan: Plan, values: PCollection, markers: PCollection | None = None
) -> PCollection:
    # Each marker brings an empty batch (per public key) so that its window releases, even
    # when all of its records were dropped or, in the global window, when there is no input.
    if markers is None:
        markers = window_markers(pcoll, unit_level=plan.bounds is not None)
    if plan.keys is None:
        empty = markers | "EmptyBatch" >> beam.Map(_empty_batch)
        return (values, empty) | "WithEmptyBatch" >> beam.Flatten()
    every_key = markers | "EveryPublicKey" >> beam.FlatMap(_every_key, len(plan.keys))
    return (values, every_key) | "WithEveryKey" >> beam.Flatten()


def keyed_input(pcoll: PCollection, plan: Plan) -> PCollection:
    """``(key position, batch)`` pairs with the markers: the input of a per-key combine.

    ``.Globally`` gets the single position 0. For transforms that combine more than once
    (the quantiles' coarse-to-fine passes); :func:`expand_plan` is the one-pass path.
    """
    values, _ = _prepare(pcoll, plan)
    keyed = _with_markers(pcoll, plan, values)
    if plan.keys is None:
        keyed = keyed | "Key" >> beam.Map(_with_key)
    return keyed


def unit_batches(pcoll: PCollection, plan: Plan) -> PCollection:
    """Encoded and bounded batches that hold every row of their units, not split by key.

    For a choice that needs each unit whole (``max_keys_per_unit="auto"``); continue with
    :func:`keyed_batches`.
    """
    values, _ = _prepare(pcoll, plan, split=False)
    return values


def keyed_batches(
    pcoll: PCollection, plan: Plan, batches: PCollection, markers: PCollection
) -> PCollection:
    """:func:`keyed_input` from :func:`unit_batches` (possibly re-bounded): split by key, with
    ``markers`` (:func:`window_markers` of ``pcoll``, computed once by the caller, who needs
    them too)."""
    split = batches | "SplitByKey" >> beam.FlatMap(split_by_key)
    return _with_markers(pcoll, plan, split, markers)


def label_releases(releases: PCollection, plan: Plan) -> PCollection:
    """``(key position, release(s))`` pairs to releases labelled with key and window."""
    if plan.keys is None:
        labelled = releases | "DropKey" >> beam.FlatMap(_drop_key)
    else:
        labelled = releases | "AttachKey" >> beam.ParDo(AttachKeyFn(plan.keys))
    return labelled | "AttachWindow" >> beam.ParDo(AttachWindowFn())


def expand_plan(pcoll: PCollection, plan: Plan) -> PCollection:
    """Encode, bound, combine once (per key), and label the releases with key and window.

    Every window that holds input gets a release (per public key for ``.PerKey``), and so
    does the global window without any input (:func:`window_markers`).
    """
    fn = plan.combine_fn
    if plan.keys is not None and isinstance(fn, BatchedSelectFn) and fn.batchable:
        keys_per_shard = fn.keys_per_shard()
        if keys_per_shard is not None:
            return _expand_sharded(pcoll, plan, fn, keys_per_shard, plan.keys)
    values, args = _prepare(pcoll, plan)
    with_markers = _with_markers(pcoll, plan, values)
    if plan.keys is None:
        releases = (
            with_markers
            | "Select" >> beam.CombineGlobally(plan.combine_fn, *args).without_defaults()
            | "Releases" >> beam.FlatMap(_as_list)
        )
    else:
        if isinstance(fn, BatchedSelectFn) and fn.batchable:
            select: beam.PTransform = SelectBatchesPerKey(fn, *args)
        else:
            select = beam.CombinePerKey(fn, *args)
        releases = (
            with_markers
            | "SelectPerKey" >> select
            | "AttachKey" >> beam.ParDo(AttachKeyFn(plan.keys))
        )
    return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())


def _expand_sharded(
    pcoll: PCollection,
    plan: Plan,
    fn: BatchedSelectFn,
    keys_per_shard: int,
    keys: tuple[Any, ...],
) -> PCollection:
    """``.PerKey`` with keys grouped in shards: one combine per shard, one draw per shard.

    Each shard's accumulator holds its keys' accumulators, batches are split by shard (not
    by key), and every shard gets an empty batch per releasing window (the markers), so every
    public key releases in exactly the windows it would with one combine per key.
    """
    num_keys = len(keys)
    num_shards = -(-num_keys // keys_per_shard)
    values, args = _prepare(pcoll, plan, split=False)
    sharded = values | "SplitByShard" >> beam.FlatMap(split_by_shard, keys_per_shard)
    markers = window_markers(pcoll, unit_level=plan.bounds is not None)
    every_shard = markers | "EveryShard" >> beam.FlatMap(_every_shard, num_shards)
    releases = (
        (sharded, every_shard)
        | "WithEveryShard" >> beam.Flatten()
        | "SelectPerShard" >> beam.CombinePerKey(fn.shard_fn(keys_per_shard), *args)
        | "ReleaseShard" >> beam.ParDo(ReleaseShardFn(fn, keys_per_shard, num_keys), *args)
        | "AttachKey" >> beam.ParDo(AttachKeyFn(keys))
    )
    return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())
