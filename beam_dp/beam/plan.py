"""The one pipeline shape of every private transform: per key, per window.

Every ``.Globally`` / ``.PerKey`` transform of :mod:`beam_dp.beam.selection`,
:mod:`beam_dp.beam.key_selection` and :mod:`beam_dp.beam.quantiles` is built into a
:class:`Plan` in its constructor, and its ``expand`` is :func:`expand_plan`:

1. check the windowing (:func:`~beam_dp.beam.bounding.check_windowing`);
2. encode batches (or take raw numbers, for the quantiles' ``value_column=None``);
3. bound contributions, unless each record is its own unit;
4. add the markers of :func:`window_markers`: an empty batch in every window that releases
   (for ``.PerKey``: one per public key), so that every window and key that releases does,
   with or without data;
5. one ``CombineGlobally`` (or ``CombinePerKey`` over key positions) whose
   ``extract_output`` samples the release(s); for ``.PerKey`` with a :class:`BatchedSelectFn`
   (one selection per key), keys are grouped in shards of about :data:`BATCH_WEIGHT`
   accumulator entries, one combine per shard (every shard gets the markers), and each
   shard's keys are released by one vectorised exact draw (:func:`_expand_sharded`); with
   candidates from a side input, one combine per key yields merged scores and
   ``BatchElements`` groups keys for the draw (:class:`SelectBatchesPerKey`);
6. label each release with its public key and its window.

:class:`PrivateTransform` is the base of every built transform: its label, display data and
what one unit can reach (keys, windows), and the ledger mechanism and rounds it spends.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindow, GlobalWindows

from beam_dp.batching import KEY, VALUE, ColumnBatch, ContributionBounds, num_rows, take
from beam_dp.beam.bounding import (
    BoundContributions,
    EncodeBatches,
    MatchBoundedWindows,
    check_windowing,
)
from beam_dp.beam.options import CommonOptions, KeyOptions, PerKeyOptions, take_options
from beam_dp.release import Release

__all__ = [
    "BATCH_WEIGHT",
    "EMPTY",
    "AttachKeyFn",
    "AttachWindowFn",
    "BatchedSelectFn",
    "Built",
    "MarkerFn",
    "Plan",
    "PrivateTransform",
    "ReleaseBatchFn",
    "ReleaseShardFn",
    "ScoresOnlyFn",
    "SelectBatchesPerKey",
    "expand_plan",
    "keyed_input",
    "label_releases",
    "split_by_key",
    "split_by_shard",
    "values_of",
    "window_markers",
]

#: An empty column batch: adds nothing to any accumulator.
EMPTY: ColumnBatch = {}


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``expand`` wires together; built and validated in ``__init__``.

    Attributes:
        encode: options of the encode step (``encode_batch`` keyword arguments), or None
            when the elements are raw numbers (``.PerKey``: ``(key, value)`` pairs).
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


# ------------------------------------------------------------------ many keys, one draw


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
        self, batch: Sequence[tuple[int, Any]], candidates: Any = None
    ) -> Iterator[tuple[int, list[Release]]]:
        # ``candidates``: the one side input a plan may have (``Plan.side_candidates``); a
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
        self, element: tuple[int, Sequence[Any]], candidates: Any = None
    ) -> Iterator[tuple[int, list[Release]]]:
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


def _every_shard(_: Any, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
    for shard in range(num_shards):
        yield shard, EMPTY


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


def _with_markers(pcoll: PCollection, plan: Plan, values: PCollection) -> PCollection:
    # Each marker brings an empty batch (per public key) so that its window releases, even
    # when all of its records were dropped or, in the global window, when there is no input.
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


@dataclass(frozen=True, eq=False)
class Built:
    """A transform's :class:`Plan` and the public facts about what it releases and spends.

    Attributes:
        plan: what ``expand`` wires together.
        release_name: the release (budget share) name.
        keys_per_unit: the releases per window one unit can influence (``m`` for ``.PerKey``).
        display: display data (public parameters only).
        mechanism, rounds: the ledger mechanism and rounds a budget share must name.
    """

    plan: Plan
    release_name: str
    keys_per_unit: int
    display: dict[str, Any]
    mechanism: str
    rounds: int


class PrivateTransform(beam.PTransform):
    """Base of every ``.Globally`` / ``.PerKey`` transform: a :class:`Built` plan.

    Subclasses read their ``**options`` with :meth:`_options` and end their constructor with
    :meth:`_finish`, or do both with :meth:`_build`. ``NAMESPACE`` and ``VARIANT`` default to
    the two parts of the class's qualified name (``TopCandidates.Globally``).
    """

    NAMESPACE: ClassVar[str] = ""
    VARIANT: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__qualname__.split(".")
        if len(parts) >= 2:
            cls.NAMESPACE = cls.__dict__.get("NAMESPACE", parts[-2])
            cls.VARIANT = cls.__dict__.get("VARIANT", parts[-1])

    def _build(
        self, options: Mapping[str, Any], build: Callable[[CommonOptions, KeyOptions, Any], Built]
    ) -> None:
        """Build this variant from its ``**options``, by one path for every statistic.

        The variant's ``__init__`` declares ``**options: Unpack[X]``, ``X`` a TypedDict that
        combines the statistic's own keywords with :class:`~beam_dp.beam.options.PrivateOptions`
        (or ``PerKeyOptions``). ``X``, read from that signature (as ``pipelines.statistics``
        reads it), decides which keywords are the statistic's own (passed to ``build`` as one
        mapping, which applies their defaults), which of them are required, and the names a
        misspelt keyword is matched against. The shared ones (and ``k``, when the statistic
        has it) are validated by :meth:`_options`.

        Raises:
            TypeError: for a keyword the variant does not take (naming the nearest one it
                does) or a missing required keyword of the statistic.
        """
        accepted, required = _accepted_options(type(self))
        transform = f"{self.NAMESPACE}.{self.VARIANT}"
        for key in options:
            if key not in accepted and key not in _SHARED_NAMES:
                near = difflib.get_close_matches(key, sorted(accepted), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise TypeError(f"{transform}() got an unexpected keyword argument {key!r}{hint}")
        for key in sorted(required - options.keys()):
            raise TypeError(f"{transform}() missing required keyword argument {key!r}")
        own = {key: value for key, value in options.items() if key not in _SHARED_NAMES}
        shared = {key: value for key, value in options.items() if key in _SHARED_NAMES}
        common, keys = self._options(shared, **({"k": own["k"]} if "k" in own else {}))
        self._finish(build(common, keys, own))

    def _options(
        self, options: Mapping[str, Any], *, k: int = 1, **family: Any
    ) -> tuple[CommonOptions, KeyOptions]:
        """This variant's ``**options`` validated (:func:`~beam_dp.beam.options.take_options`)."""
        return take_options(
            options,
            transform=f"{self.NAMESPACE}.{self.VARIANT}",
            per_key=self.VARIANT == "PerKey",
            k=k,
            **family,
        )

    def _finish(self, built: Built) -> None:
        self._built = built
        self._plan = built.plan
        self._release_name = built.release_name
        self._keys_per_unit = built.keys_per_unit
        self._display = built.display
        self._mechanism = built.mechanism
        self._rounds = built.rounds

    def expand(self, pcoll: PCollection) -> PCollection:
        return expand_plan(pcoll, self._plan)

    def default_label(self) -> str:
        return f"{self.NAMESPACE}.{self.VARIANT}({self._release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._display)

    @property
    def keys_per_unit(self) -> int:
        """How many of this transform's releases (per window) one unit can influence:
        1 for ``.Globally``, ``m`` for ``.PerKey`` (see ``ledger_entries_to_record``)."""
        return self._keys_per_unit

    @property
    def max_windows_per_unit(self) -> int:
        """How many windows' releases one unit can influence (enforced by bounding)."""
        return self._plan.max_windows_per_unit

    @property
    def mechanism(self) -> str:
        """The ledger mechanism a budget share for this transform must name."""
        return self._mechanism

    @property
    def rounds(self) -> int:
        """The rounds a budget share for this transform must cover (``k``, or a quantile
        plan's levels)."""
        return self._rounds


#: The keywords every transform shares (validated by ``take_options``, which also refuses a
#: per-key one given to ``.Globally``).
_SHARED_NAMES = frozenset(PerKeyOptions.__required_keys__ | PerKeyOptions.__optional_keys__)


def _accepted_options(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """The keywords ``cls(**options)`` accepts, from its ``Unpack[TypedDict]`` annotation, and
    the statistic's own required ones."""
    hint = typing.get_type_hints(cls.__dict__["__init__"])["options"]
    (options,) = typing.get_args(hint)
    accepted = frozenset(options.__required_keys__ | options.__optional_keys__)
    return accepted, frozenset(options.__required_keys__) - _SHARED_NAMES
