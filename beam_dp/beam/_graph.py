"""The graph every private transform expands to: encode, bound, keys, windows, combine, label.

A transform's constructor builds a :class:`Wiring` (public parameters only); its ``expand`` is
:meth:`Wiring.expand`:

1. check the windowing (:func:`~beam_dp.beam._contributions.check_windowing`);
2. encode batches (or take raw numbers: a grid transform's ``value_column=None``);
3. bound contributions (:class:`~beam_dp.beam._contributions.BoundContributions`), unless each
   record is its own unit;
4. add the markers of :func:`window_markers`: an empty batch in every window that releases
   (per public key for ``.PerKey``), so that every window and key that releases does, with or
   without data;
5. one ``CombineGlobally``, or one ``CombinePerKey`` over key positions, whose
   ``extract_output`` samples the release(s); a :class:`BatchedSelectFn` (one selection per
   key) releases many keys with one vectorised exact draw instead: keys grouped in shards of
   about :data:`BATCH_WEIGHT` accumulator entries, or, with candidates from a side input,
   batched after a per-key combine (:class:`SelectBatchesPerKey`);
6. label each release with its public key and window.

:meth:`Wiring.keyed_input` and :meth:`Wiring.label` are the two halves of that path, for
transforms that combine more than once (a bound chosen privately, coarse to fine). Why the
windows that release are read from the input: ``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindow, GlobalWindows

from beam_dp.batching import KEY, ColumnBatch, ContributionBounds, num_rows, take
from beam_dp.beam._calls import FlatMapFn
from beam_dp.beam._contributions import (
    BoundContributions,
    EncodeBatches,
    MatchBoundedWindows,
    check_windowing,
)
from beam_dp.release import Release

__all__ = [
    "BATCH_WEIGHT",
    "EMPTY",
    "BatchedSelectFn",
    "SelectBatchesPerKey",
    "Wiring",
    "split_by_key",
    "split_by_shard",
    "window_markers",
]

#: An empty column batch: adds nothing to any accumulator.
EMPTY: ColumnBatch = {}


# ----------------------------------------------------------------------------- the wiring


@dataclass(frozen=True, eq=False)
class Wiring:
    """What ``expand`` wires together (public parameters only; built at construction).

    Attributes:
        encode: options of the encode step (``encode_batch`` keyword arguments), or None when
            the elements are raw numbers (``.PerKey``: ``(key, value)`` pairs).
        combine_fn: the combiner whose ``extract_output`` returns the release(s).
        bounds: contribution bounds, or None for record-level privacy (no shuffle).
        num_shards, salt: passed to ``BoundContributions``.
        side_candidates: candidates as a PCollection (a side input of ``encode_fn`` and of
            the combiner), if any.
        keys: public keys of a ``.PerKey`` transform.
        encode_fn: a DoFn that encodes instead of ``EncodeBatches(**encode)`` (candidates
            from a side input, raw labels for DP key selection).
        max_windows_per_unit: the windows a unit keeps rows in (enforced by
            ``BoundContributions`` on windowed input).
        graph: a graph other than the one-pass path (``graph(pcoll, wiring)``): DP key
            selection with a privately chosen ``max_candidates_per_unit``.
    """

    encode: dict[str, Any] | None
    combine_fn: beam.CombineFn
    bounds: ContributionBounds | None
    num_shards: int
    salt: int | None
    side_candidates: PCollection | None = None
    keys: tuple[Any, ...] | None = None
    encode_fn: beam.DoFn | None = None
    max_windows_per_unit: int = 1
    graph: Callable[[PCollection, Wiring], PCollection] | None = None

    def expand(self, pcoll: PCollection) -> PCollection:
        """Encode, bound, combine once (per key), and label the releases with key and window.

        Every window that holds input gets a release (per public key for ``.PerKey``), and so
        does the global window without any input (:func:`window_markers`).
        """
        if self.graph is not None:
            return self.graph(pcoll, self)
        fn = self.combine_fn
        if self.keys is not None and isinstance(fn, BatchedSelectFn) and fn.batchable:
            keys_per_shard = fn.keys_per_shard()
            if keys_per_shard is not None:
                return self._expand_sharded(pcoll, fn, keys_per_shard, self.keys)
        values, args = self._prepare(pcoll)
        with_markers = self._with_markers(pcoll, values)
        if self.keys is None:
            releases = (
                with_markers
                | "Select" >> beam.CombineGlobally(self.combine_fn, *args).without_defaults()
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
                | "AttachKey" >> beam.ParDo(AttachKeyFn(self.keys))
            )
        return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())

    def keyed_input(self, pcoll: PCollection) -> PCollection:
        """``(key position, batch)`` pairs with the markers: the input of a per-key combine.

        ``.Globally`` gets the single position 0. For transforms that combine more than once;
        :meth:`expand` is the one-pass path.
        """
        values, _ = self._prepare(pcoll)
        keyed = self._with_markers(pcoll, values)
        if self.keys is None:
            keyed = keyed | "Key" >> beam.Map(_with_key)
        return keyed

    def unit_batches(self, pcoll: PCollection) -> PCollection:
        """Encoded and bounded batches that hold every row of their units, not split by key.

        For a choice that needs each unit whole (``max_keys_per_unit="auto"``); continue with
        :meth:`keyed_batches`.
        """
        values, _ = self._prepare(pcoll, by_key=False)
        return values

    def keyed_batches(
        self, pcoll: PCollection, batches: PCollection, markers: PCollection
    ) -> PCollection:
        """:meth:`keyed_input` from :meth:`unit_batches` (possibly re-bounded): split by key,
        with ``markers`` (:meth:`markers` of ``pcoll``, computed once by the caller, who needs
        them too)."""
        split = batches | "SplitByKey" >> beam.FlatMap(split_by_key)
        return self._with_markers(pcoll, split, markers)

    def markers(self, pcoll: PCollection) -> PCollection:
        """One ``None`` per window of ``pcoll`` that releases (:func:`window_markers`)."""
        return window_markers(pcoll, unit_level=self.bounds is not None)

    def label(self, releases: PCollection) -> PCollection:
        """``(key position, release(s))`` pairs to releases labelled with key and window."""
        if self.keys is None:
            labelled = releases | "DropKey" >> beam.FlatMap(_drop_key)
        else:
            labelled = releases | "AttachKey" >> beam.ParDo(AttachKeyFn(self.keys))
        return labelled | "AttachWindow" >> beam.ParDo(AttachWindowFn())

    def _prepare(
        self, pcoll: PCollection, *, by_key: bool = True
    ) -> tuple[PCollection, tuple[Any, ...]]:
        """Encoded (and bounded) batches, or raw values; and the combiner's side inputs.

        ``.PerKey`` batches are split by key unless ``by_key`` is False (the caller splits).
        """
        unit_level = self.bounds is not None
        check_windowing(
            pcoll, unit_level=unit_level, max_windows_per_unit=self.max_windows_per_unit
        )
        args: tuple[Any, ...] = ()
        if self.side_candidates is not None:
            args = (beam.pvalue.AsList(self.side_candidates),)
        if self.encode_fn is not None:
            batches = pcoll | "Encode" >> beam.ParDo(self.encode_fn, *args)
        elif self.encode is not None:
            batches = pcoll | "Encode" >> EncodeBatches(**self.encode)
        elif self.keys is None:  # raw numbers (record-level privacy: nothing to bound)
            return pcoll, args
        else:
            return pcoll | "KeyValues" >> beam.ParDo(_KeyRawFn(self.keys)), args
        if self.bounds is not None:
            batches = batches | "BoundContributions" >> BoundContributions(
                self.bounds,
                num_shards=self.num_shards,
                salt=self.salt,
                max_windows_per_unit=self.max_windows_per_unit,
            )
        if self.keys is not None and by_key:
            batches = batches | "SplitByKey" >> beam.FlatMap(split_by_key)
        return batches, args

    def _with_markers(
        self, pcoll: PCollection, values: PCollection, markers: PCollection | None = None
    ) -> PCollection:
        # Each marker brings an empty batch (per public key) so that its window releases, even
        # when all of its records were dropped or, in the global window, when there is no input.
        if markers is None:
            markers = self.markers(pcoll)
        if self.keys is None:
            empty = markers | "EmptyBatch" >> beam.Map(_empty_batch)
            return (values, empty) | "WithEmptyBatch" >> beam.Flatten()
        every_key = markers | "EveryPublicKey" >> beam.FlatMap(_every_key, len(self.keys))
        return (values, every_key) | "WithEveryKey" >> beam.Flatten()

    def _expand_sharded(
        self,
        pcoll: PCollection,
        fn: BatchedSelectFn,
        keys_per_shard: int,
        keys: tuple[Any, ...],
    ) -> PCollection:
        """``.PerKey`` with keys grouped in shards: one combine per shard, one draw per shard.

        Each shard's accumulator holds its keys' accumulators, batches are split by shard (not
        by key), and every shard gets an empty batch per releasing window (the markers), so
        every public key releases in exactly the windows it would with one combine per key.
        """
        num_keys = len(keys)
        num_shards = -(-num_keys // keys_per_shard)
        values, args = self._prepare(pcoll, by_key=False)
        sharded = values | "SplitByShard" >> beam.ParDo(FlatMapFn(split_by_shard, keys_per_shard))
        markers = self.markers(pcoll)
        every_shard = markers | "EveryShard" >> beam.FlatMap(_every_shard, num_shards)
        releases = (
            (sharded, every_shard)
            | "WithEveryShard" >> beam.Flatten()
            | "SelectPerShard" >> beam.CombinePerKey(fn.shard_fn(keys_per_shard), *args)
            | "ReleaseShard" >> beam.ParDo(ReleaseShardFn(fn, keys_per_shard, num_keys), *args)
            | "AttachKey" >> beam.ParDo(AttachKeyFn(keys))
        )
        return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())


# ------------------------------------------------------------------- which windows release


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
    Why the input and not the values after bounding, and what heartbeats protect:
    ``docs/privacy_rules.md`` (Windows).

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


# --------------------------------------------------------------------------- keys and labels


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


class _KeyRawFn(beam.DoFn):
    """``(key, value)`` to ``(key position, value)``; other keys are dropped (the grid
    combiners read the value: :func:`beam_dp.beam._grid.values_of`)."""

    def __init__(self, keys: tuple[Any, ...]) -> None:
        super().__init__()
        self._keys = keys
        self._positions: dict[Any, int] | None = None

    def process(self, element: tuple[Any, Any]) -> Iterator[tuple[int, Any]]:
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
            yield position, value


def _every_key(_: Any, num_keys: int) -> Iterator[tuple[int, ColumnBatch]]:
    for position in range(num_keys):
        yield position, EMPTY


def _every_shard(_: Any, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
    for shard in range(num_shards):
        yield shard, EMPTY


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


# ----------------------------------------------------------------------- many keys, one draw


class BatchedSelectFn(beam.CombineFn):
    """A selection combiner that can also release many keys' selections in one draw.

    ``extract_output`` releases one key (as every combiner here does). When :attr:`batchable`
    is True, a ``.PerKey`` transform instead takes each key's merged scores
    (:meth:`scores_of`) and releases a batch of keys with :meth:`release_batch`, which must
    give every key the releases ``extract_output`` would (same law, independent across keys,
    same records): how keys are grouped into batches then changes the cost only.
    """

    @property
    def batchable(self) -> bool:
        """Whether :meth:`release_batch` applies (e.g. one selection per key, not top-k)."""
        return False

    def scores_of(self, accumulator: Any, *args: Any) -> Any:
        """What :meth:`release_batch` needs of one key's merged accumulator (small, picklable)."""
        raise NotImplementedError

    def release_batch(self, scores: Sequence[Any], *args: Any) -> list[list[Release]]:
        """Each key's releases (in the order of ``scores``), as ``extract_output`` gives them."""
        raise NotImplementedError

    def row_size(self) -> int | None:
        """The size of one key's accumulator, or None when unknown while building (candidates
        from a side input)."""
        return None

    def keys_per_shard(self) -> int | None:
        """Keys per shard for :meth:`shard_fn` (a shard weighs about :data:`BATCH_WEIGHT`), or
        None to batch keys after a per-key combine (when :meth:`row_size` is unknown)."""
        size = self.row_size()
        return None if size is None else max(1, BATCH_WEIGHT // (size + _KEY_WEIGHT))

    def shard_fn(self, keys_per_shard: int) -> beam.CombineFn:
        """A combiner of ``(shard, batch)`` whose accumulator holds all keys of one shard
        (keys ``shard * keys_per_shard + i``) and whose ``extract_output`` gives a sequence
        of one accumulator per key of the shard (each for :meth:`scores_of`)."""
        raise NotImplementedError

    def batch_weight(self, scores: Any) -> int:
        """A key's share of a batch (its candidates; batches hold about ``BATCH_WEIGHT``)."""
        return 1 if scores is None else int(np.shape(scores)[0]) + _KEY_WEIGHT


#: The weight of one batch or shard of keys (:meth:`BatchedSelectFn.batch_weight`): about
#: 2^18 accumulator entries (2 MB of int64 per shard accumulator; memory and cost only).
BATCH_WEIGHT = 1 << 18


# Each key counts as this many extra entries (its Python objects): ~4k keys of 2 candidates.
_KEY_WEIGHT = 62


class ScoresOnlyFn(beam.CombineFn):
    """A :class:`BatchedSelectFn` whose ``extract_output`` yields the merged scores only."""

    def __init__(self, combine_fn: BatchedSelectFn) -> None:
        super().__init__()
        self._fn = combine_fn

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._fn.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._fn.teardown(*args, **kwargs)

    def create_accumulator(self, *args: Any) -> Any:
        return self._fn.create_accumulator(*args)

    def add_input(self, accumulator: Any, element: Any, *args: Any) -> Any:
        return self._fn.add_input(accumulator, element, *args)

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any) -> Any:
        return self._fn.merge_accumulators(accumulators, *args)

    def compact(self, accumulator: Any, *args: Any) -> Any:
        return self._fn.compact(accumulator, *args)

    def extract_output(self, accumulator: Any, *args: Any) -> Any:
        return self._fn.scores_of(accumulator, *args)

    def display_data(self) -> dict[str, Any]:
        return dict(self._fn.display_data())


class ReleaseBatchFn(beam.DoFn):
    """A batch of ``(key position, scores)`` to ``(key position, releases)``, one draw."""

    def __init__(self, combine_fn: BatchedSelectFn) -> None:
        super().__init__()
        self._fn = combine_fn

    def process(
        self,
        batch: Sequence[tuple[int, Any]],
        candidates: Any = None,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[tuple[int, list[Release]]]:
        # Asking for the window (unused) keeps Beam from holding the element after the call
        # (beam_dp.beam._calls).
        del window
        # ``candidates``: the one side input a wiring may have (``side_candidates``); a
        # named parameter, as Beam reads ``*args: Any`` as a type hint on the side inputs.
        args = () if candidates is None else (candidates,)
        releases = self._fn.release_batch([scores for _, scores in batch], *args)
        for (position, _), released in zip(batch, releases, strict=True):
            yield position, released


class ReleaseShardFn(beam.DoFn):
    """``(shard, per-key accumulators)`` to ``(key position, releases)``, one draw per shard."""

    def __init__(self, combine_fn: BatchedSelectFn, keys_per_shard: int, num_keys: int) -> None:
        super().__init__()
        self._fn = combine_fn
        self._keys_per_shard = keys_per_shard
        self._num_keys = num_keys

    def process(
        self,
        element: tuple[int, Sequence[Any]],
        candidates: Any = None,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[tuple[int, list[Release]]]:
        # Asking for the window (unused) keeps Beam from holding the element after the call
        # (beam_dp.beam._calls).
        del window
        # ``candidates``: as in ReleaseBatchFn (a named parameter, not ``*args``).
        args = () if candidates is None else (candidates,)
        shard, accumulators = element
        first = shard * self._keys_per_shard
        count = min(self._keys_per_shard, self._num_keys - first)  # the last shard is short
        scores = [self._fn.scores_of(accumulators[i], *args) for i in range(count)]
        for i, released in enumerate(self._fn.release_batch(scores, *args)):
            yield first + i, released


def split_by_shard(batch: ColumnBatch, keys_per_shard: int) -> Iterator[tuple[int, ColumnBatch]]:
    """Split a batch by shard of its ``KEY`` column (``position // keys_per_shard``).

    All rows of a key stay in one sub-batch, so every unit's rows for that key stay together.
    """
    if not num_rows(batch) or KEY not in batch:
        return
    shards = batch[KEY] // keys_per_shard
    if shards.size and int(shards.min()) == int(shards.max()):
        yield int(shards[0]), batch
        return
    order = np.argsort(shards, kind="stable")
    sorted_shards = shards[order]
    boundaries = np.flatnonzero(sorted_shards[1:] != sorted_shards[:-1]) + 1
    for rows in np.split(order, boundaries):
        yield int(shards[rows[0]]), take(batch, rows)


class SelectBatchesPerKey(beam.PTransform):
    """``(key position, batch)`` pairs to ``(key position, releases)``, keys drawn in batches.

    Each key's scores are merged by one ``CombinePerKey`` (as the per-key path does), then
    ``BatchElements`` groups keys of the same window within a bundle (no shuffle) and one
    :meth:`BatchedSelectFn.release_batch` call releases each group. Which keys share a batch
    depends on bundling only; each key's release is drawn independently with its own law.

    Privacy:
        Unchanged from one ``extract_output`` per key: the same selection, ε (or ρ) and
        release record per key, keys independent; the batches are an evaluation order.
    """

    def __init__(self, combine_fn: BatchedSelectFn, *args: Any) -> None:
        super().__init__()
        self._fn = combine_fn
        self._args = args

    def expand(self, pcoll: PCollection) -> PCollection:
        fn = self._fn
        return (
            pcoll
            | "MergedScores" >> beam.CombinePerKey(ScoresOnlyFn(fn), *self._args)
            | "BatchKeys"
            >> beam.BatchElements(
                min_batch_size=BATCH_WEIGHT,
                max_batch_size=BATCH_WEIGHT,
                element_size_fn=lambda element: fn.batch_weight(element[1]),
                record_metrics=False,
            )
            | "ReleaseBatch" >> beam.ParDo(ReleaseBatchFn(fn), *self._args)
        )
