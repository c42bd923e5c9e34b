"""What one privacy unit contributes: encode, shuffle by unit, bound rows, keys and windows.

:class:`EncodeBatches` turns reader output into numpy column batches; :class:`BoundContributions`
brings every row of a unit to one shard (batches, not rows, move through the shuffle) and keeps
what the bounds allow, with :func:`beam_dp.batching.bound_rows`, per window: on windowed input
:func:`kept_windows` (bounded input) or :class:`WindowAdmissions` (streaming input, per-unit
state) choose the windows a unit keeps. :func:`check_windowing` is the one rule on accepted
windowings. The privacy rules of units, keys and windows, and why each holds:
``docs/privacy_rules.md``.

**Telemetry.** Nothing data-dependent reaches a metric or a log line unless
:func:`beam_dp.telemetry.enable_exact_counts` was called before the transform was built (not
private): rows read, bad records skipped, records with an unknown candidate or key, rows kept
and dropped by bounding, as Beam metrics in the :data:`METRICS_NAMESPACE` namespace.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Unpack, cast

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.coders import Coder, PickleCoder
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PCollection
from apache_beam.runners.portability.flink_runner import FlinkRunner
from apache_beam.runners.portability.portable_runner import PortableRunner
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import (
    BoundedWindow,
    FixedWindows,
    GlobalWindows,
    NonMergingWindowFn,
    SlidingWindows,
    TimestampedValue,
    WindowFn,
)

from beam_dp.batching import (
    UNIT,
    ColumnBatch,
    ContributionBounds,
    bound_rows,
    concat_batches,
    encode_batch,
    num_rows,
    take,
)
from beam_dp.batching.columns import EncodeOptions, EncodeStats, encode_options, with_source
from beam_dp.beam._calls import FlatMapFn
from beam_dp.telemetry import exact_counts_enabled

__all__ = [
    "METRICS_NAMESPACE",
    "BoundContributions",
    "EncodeBatches",
    "MatchBoundedWindows",
    "WindowAdmissions",
    "check_windowing",
    "is_heartbeat",
    "kept_windows",
]

#: The metrics namespace of every exact (not private, switched-on) count.
METRICS_NAMESPACE = "beam_dp"
_PROGRESS_EVERY = 1_000_000
_LOG = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ encode


def is_heartbeat(batch: object) -> bool:
    """Whether ``batch`` is a heartbeat: an element with no columns and no rows (``{}``,
    ``[]``). It holds no record, so it is not encoded; it only marks its window, which then
    releases (``window_markers`` in :mod:`beam_dp.beam._graph`)."""
    return isinstance(batch, (Mapping, list, tuple)) and len(batch) == 0


class _EncodeFn(beam.DoFn):
    def __init__(self, options: dict[str, Any]):
        super().__init__()
        self._options = options
        # Read in the driver and pickled with the DoFn: the setting holds on every worker.
        self._exact_counts = exact_counts_enabled()
        self._seen = 0
        self._next_report = _PROGRESS_EVERY
        if self._exact_counts:
            self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")
            self._bad = Metrics.counter(METRICS_NAMESPACE, "bad_records_skipped")
            self._unknown = Metrics.counter(
                METRICS_NAMESPACE, "records_with_unknown_candidate_or_key"
            )

    def process(self, element: Any) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        stats = EncodeStats()
        encoded = encode_batch(batch, stats=stats, **options)
        if self._exact_counts:  # NOT PRIVATE: only behind the operator's switch
            self._report(stats)
        if num_rows(encoded):
            yield encoded

    def _report(self, stats: EncodeStats) -> None:
        self._rows.inc(stats.rows_read)
        self._seen += stats.rows_read
        if self._seen >= self._next_report:
            _LOG.info("encoded %d rows so far on this worker (exact counts are on)", self._seen)
            self._next_report *= 2
        if stats.bad_records:
            self._bad.inc(stats.bad_records)
        if stats.unknown_labels:
            self._unknown.inc(stats.unknown_labels)


class EncodeBatches(beam.PTransform):
    """Reader output (RecordBatches, Tables, lists of dicts) to encoded column batches.

    Elements may also be ``(file name, batch)`` pairs, as :class:`beam_dp.io.ReadExport`
    emits them; errors then name the file.

    See :func:`beam_dp.batching.encode_batch` for the arguments and the bad-record rules.
    No value is ever logged; exact counts only behind the operator's switch (module docstring).
    """

    def __init__(self, **options: Unpack[EncodeOptions]):
        super().__init__()
        self._options: dict[str, Any] = encode_options(options)

    def expand(self, pcoll: PCollection) -> PCollection:
        return pcoll | beam.ParDo(_EncodeFn(self._options))


# --------------------------------------------------------------------------- units to shards


def split_to_shards(batch: ColumnBatch, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
    """Split a batch by the stable hash of its units into ``(shard, sub-batch)`` pairs: every
    row of a unit goes to the same shard."""
    # 16-bit shard ids sort with numpy's linear-time radix sort.
    shard = (batch[UNIT] % np.uint64(num_shards)).astype(
        np.uint16 if num_shards <= 1 << 16 else np.int64
    )
    order = np.argsort(shard, kind="stable")
    sorted_shards = shard[order]
    boundaries = np.flatnonzero(np.diff(sorted_shards)) + 1
    for rows in np.split(order, boundaries):
        if rows.size:
            yield int(shard[rows[0]]), take(batch, rows)


class BoundingCounts:
    """The exact rows kept and dropped by a bounding step, as metrics.

    Built in a DoFn's ``__init__`` (in the driver) and pickled with it, so the operator's
    switch read here holds on every worker. NOT PRIVATE: without the switch nothing is counted.
    """

    def __init__(self) -> None:
        self._enabled = exact_counts_enabled()
        if self._enabled:
            self._kept = Metrics.counter(METRICS_NAMESPACE, "rows_kept_after_bounding")
            self._dropped = Metrics.counter(METRICS_NAMESPACE, "rows_dropped_by_bounding")

    def record(self, kept: int, total: int) -> None:
        """Count ``kept`` rows of ``total`` as kept and the rest as dropped (switch on only)."""
        if self._enabled:  # NOT PRIVATE: only behind the operator's switch
            self._kept.inc(kept)
            self._dropped.inc(total - kept)


class BoundShardFn(beam.DoFn):
    """Bound one shard's rows (every row of its units) with :func:`bound_rows`."""

    def __init__(self, bounds: ContributionBounds, salt: int):
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._counts = BoundingCounts()

    def process(self, element: tuple[int, Iterable[ColumnBatch]]) -> Iterator[ColumnBatch]:
        _, batches = element
        rows = concat_batches(batches)
        bounded = bound_rows(rows, self._bounds, self._salt)
        kept = num_rows(bounded)
        self._counts.record(kept, num_rows(rows))
        if kept:
            yield bounded


_SHARD_PIECES = BagStateSpec("shard_pieces", PickleCoder())
_SHARD_COMPLETE = TimerSpec("shard_complete", TimeDomain.WATERMARK)
_SHARD_PIECES_STATE = beam.DoFn.StateParam(_SHARD_PIECES)
_SHARD_COMPLETE_TIMER = beam.DoFn.TimerParam(_SHARD_COMPLETE)


class BoundShardWithStateFn(BoundShardFn):
    """Gather one shard's rows in state, then bound them as :class:`BoundShardFn` does.

    Input: ``(shard, sub-batch)`` in the global window of bounded input. The runner keeps each
    shard's sub-batches in that shard's state; the watermark timer fires once the input has
    ended, so every row of the shard's units reaches one :func:`bound_rows` call, as after a
    ``GroupByKey``.

    Why: Flink's batch runner hands a grouped stage's whole share of the input to the SDK
    worker as one bundle and keeps that bundle's output on the TaskManager's heap until the
    bundle ends, while a keyed stage with state runs one bundle per key: here, one shard
    (``benchmarks/SCALE.md``).
    """

    def process(  # type: ignore[override]
        self,
        element: tuple[int, ColumnBatch],
        pieces: Any = _SHARD_PIECES_STATE,
        complete: Any = _SHARD_COMPLETE_TIMER,
        window: Any = beam.DoFn.WindowParam,
    ) -> None:
        pieces.add(element[1])
        complete.set(window.max_timestamp())

    @on_timer(_SHARD_COMPLETE)
    def bound_shard(self, pieces: Any = _SHARD_PIECES_STATE) -> Iterator[ColumnBatch]:
        shard_rows = list(pieces.read())
        pieces.clear()
        for bounded in BoundShardFn.process(self, (0, shard_rows)):
            yield from split_between_units(bounded, PIECE_ROWS)


#: Rows per batch out of :class:`BoundShardWithStateFn` (about 1 MB of units and values).
PIECE_ROWS = 1 << 16


def split_between_units(batch: ColumnBatch, max_rows: int) -> Iterator[ColumnBatch]:
    """``batch`` in pieces of about ``max_rows`` rows, cut only between units: every unit's
    rows stay in one piece (a piece exceeds ``max_rows`` only by the rows of the unit it
    ends with), as the steps after bounding require.

    Why: a runner's messages carry whole elements, and Beam's Java runners write up to 100
    messages to an SDK worker before they check that it reads them, so an element of a whole
    shard (~12 MB) lets a TaskManager buffer over a GB for one stage (``benchmarks/SCALE.md``).
    """
    rows = num_rows(batch)
    if rows <= max_rows:
        yield batch
        return
    order = np.argsort(batch[UNIT], kind="stable")
    units = batch[UNIT][order]
    starts = np.flatnonzero(np.diff(units)) + 1  # where a new unit begins
    first = 0
    while first < rows:
        # the first unit start at or after first + max_rows (or the end)
        at = int(np.searchsorted(starts, first + max_rows))
        last = int(starts[at]) if at < starts.size else rows
        yield take(batch, order[first:last])
        first = last


def groups_with_state(pipeline: beam.Pipeline) -> bool:
    """Whether bounded input is grouped by keyed state rather than by a ``GroupByKey``:
    on Flink (see :class:`BoundShardWithStateFn`)."""
    return isinstance(getattr(pipeline, "runner", None), FlinkRunner)


# -------------------------------------------------------------------------- which windowings


def check_windowing(pcoll: PCollection, *, unit_level: bool, max_windows_per_unit: int) -> bool:
    """The one rule on which windowings a private transform accepts; True if windowed.

    The global window (``max_windows_per_unit`` 1); any non-merging windowing with a unit
    column; ``FixedWindows`` only at record level (``unit_level=False``). Why:
    ``docs/privacy_rules.md`` (Windows).

    Raises:
        ValueError: naming the windowing and the rule, when the pipeline is built.
    """
    windowfn = pcoll.windowing.windowfn
    if isinstance(windowfn, GlobalWindows):
        if max_windows_per_unit != 1:
            raise ValueError(
                f"'max_windows_per_unit' is {max_windows_per_unit!r}, but the input is in the "
                "global window (every unit is in one window): leave it at 1, or window the "
                "input first"
            )
        return False
    name = type(windowfn).__name__
    if windowfn.is_merging():
        raise ValueError(
            f"the input is windowed with a merging window function ({name}, e.g. Sessions), "
            "which private transforms refuse: one unit's records can merge or split windows, "
            "so no window's release would be private; use FixedWindows or SlidingWindows"
        )
    if not unit_level and not isinstance(windowfn, FixedWindows):
        raise ValueError(
            f"with record-level privacy (unit_column=None) the input may be windowed only "
            f"with FixedWindows, which put each record in one window; received {name}. "
            "Give a unit_column (and max_windows_per_unit) to bound the windows a unit "
            "reaches"
        )
    return True


_U64 = npt.NDArray[np.uint64]


_WindowTag = bytes


def _mix64(x: _U64) -> _U64:
    """The SplitMix64 finaliser (a bijection of uint64 with good avalanche), vectorised."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _window_hash(tag: _WindowTag) -> int:
    """A stable 64-bit hash of a window's encoding (the same on every worker and run)."""
    return int.from_bytes(hashlib.blake2b(tag, digest_size=8).digest(), "little")


def kept_windows(
    units: _U64, windows: npt.NDArray[np.int64], window_hashes: _U64, salt: int, limit: int
) -> npt.NDArray[np.bool_]:
    """Which rows survive a bound of ``limit`` windows per unit (a boolean mask).

    Args:
        units: the unit hash of each row.
        windows: the position of each row's window in ``window_hashes``.
        window_hashes: a stable hash of each window (:func:`_window_hash` of its encoding).
        salt: the run's salt.
        limit: the windows kept per unit.

    Each distinct (unit, window) pair gets the priority ``mix(mix(unit ^ salt) ^ hash)``; a
    unit keeps the rows of its ``limit`` pairs of lowest priority. The choice depends only on
    the unit's own windows and the salt, never on other units' rows or on processing order.
    """
    if units.size == 0:
        return np.zeros(0, dtype=bool)
    salt64 = np.uint64(salt & 0xFFFFFFFFFFFFFFFF)
    hashes = window_hashes[windows]
    priority = _mix64(_mix64(units ^ salt64) ^ hashes)
    order = np.lexsort((windows, hashes, priority, units))
    su, sw = units[order], windows[order]
    pair_starts = np.ones(su.size, dtype=bool)
    pair_starts[1:] = (su[1:] != su[:-1]) | (sw[1:] != sw[:-1])
    unit_starts = np.ones(su.size, dtype=bool)
    unit_starts[1:] = su[1:] != su[:-1]
    pair_index = np.cumsum(pair_starts) - 1
    first_pair_of_unit = np.maximum.accumulate(np.where(unit_starts, pair_index, 0))
    keep = np.zeros(units.size, dtype=bool)
    keep[order] = (pair_index - first_pair_of_unit) < limit
    return keep


class TagWindowFn(beam.DoFn):
    """``element`` to ``(window encoding, element)``: the window travels with the data."""

    def __init__(self, coder: Coder) -> None:
        super().__init__()
        self._coder = coder

    def process(
        self, element: Any, window: Any = beam.DoFn.WindowParam
    ) -> Iterator[tuple[_WindowTag, Any]]:
        yield self._coder.encode(window), element


def split_tagged_to_shards(
    element: tuple[_WindowTag, ColumnBatch], num_shards: int
) -> Iterator[tuple[int, tuple[_WindowTag, ColumnBatch]]]:
    tag, batch = element
    for shard, part in split_to_shards(batch, num_shards):
        yield shard, (tag, part)


class BoundWindowsFn(beam.DoFn):
    """Bound one shard's units over their windows, then within each kept window.

    Output: ``(window encoding, bounded rows of that window)`` with a timestamp inside the
    window, in the global window (``RestoreWindows`` puts it back in its own window).
    """

    def __init__(
        self, bounds: ContributionBounds, salt: int, max_windows_per_unit: int, coder: Coder
    ) -> None:
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._limit = max_windows_per_unit
        self._coder = coder
        self._counts = BoundingCounts()

    def process(
        self, element: tuple[int, Iterable[tuple[_WindowTag, ColumnBatch]]]
    ) -> Iterator[TimestampedValue]:
        _, items = element
        parts: dict[_WindowTag, list[ColumnBatch]] = {}
        for tag, batch in items:
            parts.setdefault(tag, []).append(batch)
        tags = sorted(parts)
        batches = [concat_batches(parts[tag]) for tag in tags]
        sizes = [num_rows(batch) for batch in batches]
        if not sum(sizes):
            return
        units = np.concatenate([batch[UNIT] for batch in batches if num_rows(batch)])
        windows = np.repeat(np.arange(len(tags), dtype=np.int64), sizes)
        hashes = np.array([_window_hash(tag) for tag in tags], dtype=np.uint64)
        keep = kept_windows(units, windows, hashes, self._salt, self._limit)
        offset = 0
        kept_total = 0
        for tag, batch, size in zip(tags, batches, sizes, strict=True):
            rows = np.flatnonzero(keep[offset : offset + size])
            offset += size
            if not rows.size:
                continue
            bounded = bound_rows(take(batch, rows), self._bounds, self._salt)
            kept = num_rows(bounded)
            kept_total += kept
            if kept:
                window = self._coder.decode(tag)
                yield TimestampedValue((tag, bounded), window.max_timestamp())
        self._counts.record(kept_total, offset)


_I64 = npt.NDArray[np.int64]


_FREE = -1  # an empty slot in WindowAdmissions.slots
_EARLIER = -2  # a slot taken by a window of an earlier run (WindowAdmissions.with_used)


def _no_units() -> _U64:
    return np.zeros(0, dtype=np.uint64)


def _no_slots() -> _I64:
    return np.zeros((0, 1), dtype=np.int64)


@dataclass(frozen=True)
class WindowAdmissions:
    """Per-unit state of the streaming window bound: the windows each unit was admitted in.

    A unit is admitted in the first ``limit`` distinct windows its rows arrive in (in the
    order :meth:`admit` sees them), and only in those: a row survives if and only if its
    window is one of them. Each :meth:`admit` call returns a new state; nothing is mutated.

    Attributes:
        limit: the windows admitted per unit (``max_windows_per_unit``).
        units: the unit hashes seen so far, sorted.
        slots: one row per unit of ``units``, ``limit`` window numbers (positions in
            ``windows``) filled from the left; ``-1`` is a free slot.
        windows: the number given to each window encoding seen so far.

    Size: ``8 · (1 + limit)`` bytes per unit ever seen, plus one entry per distinct window.

    **Privacy:** which rows of a unit survive depends only on that unit's own rows (their
    windows and arrival order); another unit's rows never change a unit's admitted windows,
    so adding or removing a unit changes only that unit's rows in at most ``limit`` windows.
    """

    limit: int
    units: _U64 = field(default_factory=_no_units)
    slots: _I64 = field(default_factory=_no_slots)
    windows: dict[_WindowTag, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"'limit' must be an integer >= 1; received {self.limit!r}")
        if self.units.size == 0 and self.slots.size == 0:  # the empty state of any limit
            object.__setattr__(self, "slots", np.zeros((0, self.limit), dtype=np.int64))
        if self.slots.shape != (self.units.size, self.limit):
            raise ValueError("'slots' must have one row of 'limit' slots per unit")

    @classmethod
    def with_used(cls, limit: int, units: _U64, used: npt.NDArray[np.int64]) -> WindowAdmissions:
        """The state of units that already used windows elsewhere (an earlier run of a job).

        Args:
            limit: the windows admitted per unit.
            units: unit hashes, distinct (in any order).
            used: for each of ``units``, the windows it already used (more than ``limit``
                counts as ``limit``): that many of its slots are taken, by no window
                :meth:`admit` will see, so the unit is admitted in at most ``limit - used``
                new windows (none at ``limit``). Units not given have all their slots free.
        """
        units = np.asarray(units, dtype=np.uint64)
        used = np.asarray(used, dtype=np.int64)
        if units.shape != used.shape or units.ndim != 1:
            raise ValueError("'units' and 'used' must be 1-d and of one length")
        if np.unique(units).size != units.size:
            raise ValueError("'units' must be distinct")
        if (used < 0).any():
            raise ValueError("'used' must be >= 0")
        order = np.argsort(units)
        taken = np.minimum(used[order], limit)[:, None]
        slots = np.where(np.arange(limit)[None, :] < taken, _EARLIER, _FREE).astype(np.int64)
        return cls(limit, units[order], slots.reshape(units.size, limit))

    def admit(
        self, window: _WindowTag, units: _U64
    ) -> tuple[npt.NDArray[np.bool_], WindowAdmissions]:
        """Which rows of one window survive, and the state after them.

        Args:
            window: the encoding of the rows' window (all the rows are in it).
            units: the unit hash of each row.

        Returns:
            A boolean mask over ``units`` (a row survives if its unit is, or now becomes,
            admitted in ``window``) and the new state. A unit with free slots becomes
            admitted in ``window``; a unit whose slots are full keeps its windows.
        """
        if units.size == 0:
            return np.zeros(0, dtype=bool), self
        windows = self.windows
        number = windows.get(window)
        if number is None:
            number = len(windows)
            windows = {**windows, window: number}
        distinct, row_of = np.unique(units, return_inverse=True)
        at = np.searchsorted(self.units, distinct)
        known = at < self.units.size
        known[known] = self.units[at[known]] == distinct[known]
        admitted = np.ones(distinct.size, dtype=bool)  # a new unit has all its slots free
        slots = self.slots.copy()
        rows = slots[at[known]]
        already = (rows == number).any(axis=1)
        free = rows[:, -1] == _FREE  # slots fill from the left
        admitted[known] = already | free
        fill = free & ~already
        if fill.any():
            column = np.argmax(rows[fill] == _FREE, axis=1)
            slots[at[known][fill], column] = number
        new = ~known
        if new.any():
            first = np.full((int(new.sum()), self.limit), _FREE, dtype=np.int64)
            first[:, 0] = number
            # ``distinct`` is sorted, so the positions ``at`` are too: the result stays sorted.
            merged_units = np.insert(self.units, at[new], distinct[new])
            slots = np.insert(slots, at[new], first, axis=0)
        else:
            merged_units = self.units
        state = WindowAdmissions(self.limit, merged_units, slots, windows)
        return admitted[row_of.reshape(-1)], state


_ADMITTED = ReadModifyWriteStateSpec("admitted_windows", PickleCoder())


_ADMITTED_STATE = beam.DoFn.StateParam(_ADMITTED)


class AdmitWindowsFn(beam.DoFn):
    """Keep a shard's rows only in the first ``max_windows_per_unit`` windows of each unit.

    Input: ``(shard, (window encoding, rows))`` in the global window, keyed so that every
    row of a unit reaches the same state. Output: ``(window encoding, admitted rows)`` with
    the input's timestamp (``RestoreWindows`` puts them back in their own windows).
    """

    def __init__(self, max_windows_per_unit: int) -> None:
        super().__init__()
        self._limit = max_windows_per_unit
        self._exact_counts = exact_counts_enabled()
        if self._exact_counts:
            self._dropped = Metrics.counter(METRICS_NAMESPACE, "rows_dropped_by_bounding")

    def process(
        self,
        element: tuple[int, tuple[_WindowTag, ColumnBatch]],
        admitted: Any = _ADMITTED_STATE,
    ) -> Iterator[tuple[_WindowTag, ColumnBatch]]:
        _, (tag, batch) = element
        state = admitted.read()
        if state is None:
            state = WindowAdmissions(self._limit)
        keep, state = state.admit(tag, batch[UNIT])
        admitted.write(state)
        kept = int(np.count_nonzero(keep))
        if self._exact_counts:  # NOT PRIVATE: only behind the operator's switch
            self._dropped.inc(keep.size - kept)
        if kept:
            yield tag, take(batch, np.flatnonzero(keep))


class _TaggedWindows(NonMergingWindowFn):
    """Assign each ``(window encoding, element)`` to the window it encodes.

    The windowing strategy of what :class:`BoundContributions` outputs on windowed input with
    a window function that is not one of Beam's standard ones (:func:`restores_by_timestamp`):
    the same windows as the input's (``windowfn``), restored after the global shuffle. It is a
    Python ``WindowFn``, which only a Python runner can run (:func:`refuse_on_java_runner`).
    """

    def __init__(self, windowfn: WindowFn) -> None:
        self._windowfn = windowfn
        self._coder = windowfn.get_window_coder()

    def assign(self, context: WindowFn.AssignContext) -> list[BoundedWindow]:
        if context.element is None and context.window is not None:
            # Side-input window mapping (Beam maps a main-input window by assigning with it
            # and no element): a PCollection in these windows, used as a side input of one in
            # the same windows, maps each window to itself.
            return [context.window]
        tag, _ = cast(tuple[_WindowTag, Any], context.element)
        return [self._coder.decode(tag)]

    def get_window_coder(self) -> Coder:
        return self._coder

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TaggedWindows) and self._windowfn == other._windowfn

    def __hash__(self) -> int:
        # Equal exactly when the wrapped WindowFns are equal (__eq__): their hash suffices, and
        # leaves out type(self), whose hash is its address in this process.
        return hash(self._windowfn)


def restores_by_timestamp(windowfn: WindowFn) -> bool:
    """Whether ``windowfn`` is one of Beam's standard window functions that assign a window
    from the timestamp alone and put ``window.max_timestamp()`` back in ``window``
    (``FixedWindows``, ``SlidingWindows``; exactly those types, not subclasses, whose
    ``assign`` may differ). Every Beam runner knows them, the Java ones included."""
    return type(windowfn) in (FixedWindows, SlidingWindows)


def refuse_on_java_runner(pipeline: beam.Pipeline, windowfn: WindowFn) -> None:
    """Refuse, when the pipeline is built, a window function only a Python runner can run.

    Restoring windows with a custom (Python) ``WindowFn`` after the shuffle puts a PCollection
    in a pickled Python window function, which Beam's portable runners (Flink, Spark, Prism,
    Samza, ...: every :class:`PortableRunner`, whose job servers are not Python) reject when
    the job is submitted. Refusing here fails before anything runs, with the reason.

    Raises:
        ValueError: naming the window function, the runner and the window functions that run
            on every runner.
    """
    runner = getattr(pipeline, "runner", None)
    if isinstance(runner, PortableRunner):
        raise ValueError(
            f"the input is windowed with {type(windowfn).__name__}, a custom window function, "
            f"which {type(runner).__name__} cannot run (Beam's portable runners accept only "
            "standard window functions); window the input with FixedWindows or SlidingWindows, "
            "or run on the DirectRunner or Dataflow"
        )


class _AtWindowEnd(beam.DoFn):
    """``(window encoding, element)`` with the timestamp ``window.max_timestamp()``: a
    timestamp inside its own window, from which a standard ``WindowFn`` assigns it again."""

    def __init__(self, coder: Coder) -> None:
        super().__init__()
        self._coder = coder

    def process(self, element: tuple[_WindowTag, Any]) -> Iterator[TimestampedValue]:
        window = self._coder.decode(element[0])
        yield TimestampedValue(element, window.max_timestamp())


class _KeepOwnWindow(beam.DoFn):
    """``(window encoding, element)`` to ``element`` in the window it encodes only.

    After a standard ``WindowFn`` assigned each element by its timestamp (inside its own
    window), a sliding window function also put it in the other windows that overlap that
    instant: only the copy in the encoded window is kept, so each element is in exactly its
    own window, as before the shuffle (and never in a window it was not bounded in).
    """

    def __init__(self, coder: Coder) -> None:
        super().__init__()
        self._coder = coder

    def process(
        self, element: tuple[_WindowTag, Any], window: Any = beam.DoFn.WindowParam
    ) -> Iterator[Any]:
        tag, value = element
        if self._coder.encode(window) == tag:
            yield value


def _drop_tag(element: tuple[_WindowTag, Any]) -> Any:
    return element[1]


class RestoreWindows(beam.PTransform):
    """``(window encoding, element)`` to ``element`` in the window it encodes.

    With a standard window function (:func:`restores_by_timestamp`) the output is in
    ``windowfn`` itself, which every runner knows: each element is stamped at its window's
    ``max_timestamp()``, assigned by ``windowfn``, and kept in its own window only. With a
    custom one the windows are restored by a Python ``WindowFn`` that reads the encoding
    (:class:`_TaggedWindows`), refused on Beam's portable runners when the pipeline is built.
    Either way the windowing strategy is ``WindowInto``'s default (trigger, no lateness).
    """

    def __init__(self, windowfn: WindowFn) -> None:
        super().__init__()
        self._windowfn = windowfn

    def expand(self, pcoll: PCollection) -> PCollection:
        if restores_by_timestamp(self._windowfn):
            coder = self._windowfn.get_window_coder()
            return (
                pcoll
                | "AtWindowEnd" >> beam.ParDo(_AtWindowEnd(coder))
                | "IntoWindows" >> beam.WindowInto(self._windowfn)
                | "KeepOwnWindow" >> beam.ParDo(_KeepOwnWindow(coder))
            )
        refuse_on_java_runner(pcoll.pipeline, self._windowfn)
        return (
            pcoll
            | "IntoOwnWindows" >> beam.WindowInto(_TaggedWindows(self._windowfn))
            | "DropWindowTag" >> beam.Map(_drop_tag)
        )


class MatchBoundedWindows(beam.PTransform):
    """Put a PCollection in the windowing strategy of :class:`BoundContributions`' output.

    For a PCollection in the input's windows (``windowfn``, not the global window): the
    elements stay in their windows, and the strategy becomes the one bounded batches have
    on windowed input, so that the two can be flattened (window markers use this).
    """

    def __init__(self, windowfn: WindowFn) -> None:
        super().__init__()
        self._windowfn = windowfn

    def expand(self, pcoll: PCollection) -> PCollection:
        coder = self._windowfn.get_window_coder()
        return (
            pcoll
            | "TagWindow" >> beam.ParDo(TagWindowFn(coder))
            | "RestoreWindows" >> RestoreWindows(self._windowfn)
        )


# ------------------------------------------------------------------------- the bounding step


class BoundContributions(beam.PTransform):
    """Enforce per-unit contribution bounds on encoded column batches.

    Args:
        bounds: the bounds to enforce (within each window).
        num_shards: how many groups the units are hashed into (the parallelism of the
            bounding step; every row of a unit lands in one group).
        salt: decides which rows (and windows) survive a bound; random per pipeline by
            default. It is not a privacy parameter (any per-unit rule is private) and is
            never released.
        max_windows_per_unit: on windowed input, the windows a unit keeps rows in (default
            1); must be 1 on input in the global window.

    On FlinkRunner, bounded input in the global window meets in keyed state instead of a
    ``GroupByKey`` (:class:`BoundShardWithStateFn`: one bundle per shard on Flink's batch
    runner), with the same rows kept.

    Output: column batches in which every unit's rows of one window are together and within
    ``bounds``, in the input's windows; on windowed input each unit keeps the rows of at most
    ``max_windows_per_unit`` of its windows (bounded input: :func:`kept_windows`; unbounded
    input: :class:`WindowAdmissions`, per-unit state; ``docs/privacy_rules.md``).

    **Privacy:** every rule above is a function of one unit's own rows (and the salt), so a
    unit's presence changes only its own rows, in at most ``max_windows_per_unit`` windows
    and within ``bounds`` in each.
    """

    def __init__(
        self,
        bounds: ContributionBounds,
        *,
        num_shards: int = 32,
        salt: int | None = None,
        max_windows_per_unit: int = 1,
    ):
        super().__init__()
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"'num_shards' must be an integer >= 1; received {num_shards!r}")
        if (
            isinstance(max_windows_per_unit, bool)
            or not isinstance(max_windows_per_unit, int)
            or max_windows_per_unit < 1
        ):
            raise ValueError(
                f"'max_windows_per_unit' must be an integer >= 1; received {max_windows_per_unit!r}"
            )
        self._bounds = bounds
        self._num_shards = num_shards
        self._salt = secrets.randbits(64) if salt is None else int(salt)
        self._max_windows = max_windows_per_unit

    def expand(self, pcoll: PCollection) -> PCollection:
        windowed = check_windowing(pcoll, unit_level=True, max_windows_per_unit=self._max_windows)
        if not windowed and pcoll.is_bounded and groups_with_state(pcoll.pipeline):
            return (
                pcoll
                | "SplitByUnitShard"
                >> beam.ParDo(FlatMapFn(split_to_shards, self._num_shards)).with_output_types(
                    beam.typehints.Tuple[int, Any]
                )
                | "GroupAndBound"
                >> beam.ParDo(BoundShardWithStateFn(self._bounds, self._salt)).with_input_types(
                    beam.typehints.Tuple[int, Any]  # an int key: a deterministic state key
                )
            )
        if not windowed:
            return (
                pcoll
                | "SplitByUnitShard" >> beam.ParDo(FlatMapFn(split_to_shards, self._num_shards))
                | "GroupUnits" >> beam.GroupByKey()
                | "Bound" >> beam.ParDo(BoundShardFn(self._bounds, self._salt))
            )
        windowfn = pcoll.windowing.windowfn
        coder = windowfn.get_window_coder()
        if not pcoll.is_bounded:
            return (
                pcoll
                | "TagWindow" >> beam.ParDo(TagWindowFn(coder))
                | "OneWindowForTheState" >> beam.WindowInto(GlobalWindows())
                | "SplitByUnitShard"
                >> beam.ParDo(FlatMapFn(split_tagged_to_shards, self._num_shards))
                | "AdmitWindows"
                >> beam.ParDo(AdmitWindowsFn(self._max_windows)).with_input_types(
                    beam.typehints.Tuple[int, Any]  # an int key: a deterministic state key
                )
                | "RestoreWindows" >> RestoreWindows(windowfn)
                | "SplitWindowByUnitShard"
                >> beam.ParDo(FlatMapFn(split_to_shards, self._num_shards))
                | "GroupUnitsInWindow" >> beam.GroupByKey()
                | "BoundInWindow" >> beam.ParDo(BoundShardFn(self._bounds, self._salt))
            )
        return (
            pcoll
            | "TagWindow" >> beam.ParDo(TagWindowFn(coder))
            | "OneWindowForTheShuffle" >> beam.WindowInto(GlobalWindows())
            | "SplitByUnitShard" >> beam.ParDo(FlatMapFn(split_tagged_to_shards, self._num_shards))
            | "GroupUnits" >> beam.GroupByKey()
            | "BoundWindows"
            >> beam.ParDo(BoundWindowsFn(self._bounds, self._salt, self._max_windows, coder))
            | "RestoreWindows" >> RestoreWindows(windowfn)
        )

    def display_data(self) -> dict[str, Any]:
        return {
            "bounds": str(self._bounds.to_dict()),
            "num_shards": self._num_shards,
            "max_windows_per_unit": self._max_windows,
        }
