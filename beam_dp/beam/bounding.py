"""Beam transforms that encode reader output and bound each privacy unit's contributions.

Batches, not rows, move through the shuffle: each input batch is split by the stable hash of
its privacy units into at most ``num_shards`` sub-batches keyed by shard; a ``GroupByKey``
brings every row of a unit to one shard, whatever file, worker or process it came from; the
shard's rows are concatenated and bounded with numpy (:func:`beam_dp.batching.bound_rows`).

**Windows.** On windowed input each unit keeps rows in at most ``max_windows_per_unit`` of
its windows, and the usual bounds apply within each kept window; the kept rows then go back
to their own windows. So a unit influences at most ``max_windows_per_unit`` windows'
releases, and a windowed statistic that runs each window at ``ε / max_windows_per_unit`` is
ε-DP per unit over all its windows. :func:`check_windowing` holds the rules on which
windowings are accepted. Which windows a unit keeps:

* **Bounded (batch) input**: the shuffle brings together a unit's rows from *every* window
  (each batch is tagged with its window and re-windowed into the global window); the unit
  keeps its windows of lowest salted priority over its distinct (unit, window) pairs
  (:func:`kept_windows`: a function of the unit's own windows and the run's salt only).
* **Unbounded (streaming) input**: the future is unknown, so the unit keeps the *first*
  ``max_windows_per_unit`` distinct windows its rows arrive in, in the order the bounding
  step receives them, and every later row in one of those windows; rows in any other window
  are dropped (:class:`WindowAdmissions`: a function of the unit's own rows and their
  arrival order only, never of other units' rows). The admitted windows are *per-unit state*
  kept in the global window for the life of the job: about ``8 · (1 + max_windows_per_unit)``
  bytes per unit ever seen, plus one entry per distinct window, spread over ``num_shards``
  state keys (each batch reads and rewrites its shard's state, so raise ``num_shards`` for
  many units). The state never expires: a time-to-live would let a unit come back with
  fresh windows and break the bound.

**Telemetry.** By default nothing data-dependent reaches a metric or a log line. Exact counts
(rows read, bad records skipped, records with an unknown candidate or key, rows kept and
dropped by bounding) are reported as Beam metrics in the ``beam_dp`` namespace only when
:func:`beam_dp.telemetry.enable_exact_counts` was called before the transform was built:
they are not private.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.coders import Coder, PickleCoder
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PCollection
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import (
    BoundedWindow,
    FixedWindows,
    GlobalWindows,
    NonMergingWindowFn,
    TimestampedValue,
    WindowFn,
)

from beam_dp.batching import (
    KEY,
    UNIT,
    ColumnBatch,
    ContributionBounds,
    bound_rows,
    concat_batches,
    num_rows,
    take,
)
from beam_dp.beam.encoding import EncodeBatches, is_heartbeat
from beam_dp.telemetry import exact_counts_enabled

# EncodeBatches and is_heartbeat live in beam_dp.beam.encoding; importable from here too.
__all__ = [
    "BoundContributions",
    "CountHistogramFn",
    "EncodeBatches",
    "MatchBoundedWindows",
    "WindowAdmissions",
    "check_windowing",
    "is_heartbeat",
    "kept_windows",
    "rebound_rows",
    "rows_per_unit_histogram",
]

_NAMESPACE = "beam_dp"


def check_windowing(pcoll: PCollection, *, unit_level: bool, max_windows_per_unit: int) -> bool:
    """The one rule on which windowings a private transform accepts; True if windowed.

    * The global window: always; ``max_windows_per_unit`` must then be 1 (every unit is in
      the one window, and a larger bound would only waste budget).
    * Merging windows (``Sessions``): never. Adding or removing a unit's records can merge
      or split windows, so no per-window release has a fixed neighbour.
    * Record-level privacy (``unit_level=False``): ``FixedWindows`` only, which put each
      record in exactly one window (sliding windows put a record in several).
    * Unit-level privacy: any non-merging windowing (fixed, sliding), bounded or unbounded;
      a unit's windows are bounded by ``max_windows_per_unit`` in the shuffle (bounded
      input) or with per-unit state (unbounded input), see :class:`BoundContributions`.

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


def _split_to_shards(batch: ColumnBatch, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
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


class _BoundingCounts:
    """The exact rows kept and dropped by a bounding step, as metrics.

    Built in a DoFn's ``__init__`` (in the driver) and pickled with it, so the operator's
    switch read here holds on every worker. NOT PRIVATE: without the switch nothing is counted.
    """

    def __init__(self) -> None:
        self._enabled = exact_counts_enabled()
        if self._enabled:
            self._kept = Metrics.counter(_NAMESPACE, "rows_kept_after_bounding")
            self._dropped = Metrics.counter(_NAMESPACE, "rows_dropped_by_bounding")

    def record(self, kept: int, total: int) -> None:
        """Count ``kept`` rows of ``total`` as kept and the rest as dropped (switch on only)."""
        if self._enabled:  # NOT PRIVATE: only behind the operator's switch
            self._kept.inc(kept)
            self._dropped.inc(total - kept)


class _BoundShardFn(beam.DoFn):
    def __init__(self, bounds: ContributionBounds, salt: int):
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._counts = _BoundingCounts()

    def process(self, element: tuple[int, Iterable[ColumnBatch]]) -> Iterator[ColumnBatch]:
        _, batches = element
        rows = concat_batches(batches)
        bounded = bound_rows(rows, self._bounds, self._salt)
        kept = num_rows(bounded)
        self._counts.record(kept, num_rows(rows))
        if kept:
            yield bounded


# ------------------------------------------------------------------------------- windows

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


class _TagWindowFn(beam.DoFn):
    """``element`` to ``(window encoding, element)``: the window travels with the data."""

    def __init__(self, coder: Coder) -> None:
        super().__init__()
        self._coder = coder

    def process(
        self, element: Any, window: Any = beam.DoFn.WindowParam
    ) -> Iterator[tuple[_WindowTag, Any]]:
        yield self._coder.encode(window), element


def _split_tagged_to_shards(
    element: tuple[_WindowTag, ColumnBatch], num_shards: int
) -> Iterator[tuple[int, tuple[_WindowTag, ColumnBatch]]]:
    tag, batch = element
    for shard, part in _split_to_shards(batch, num_shards):
        yield shard, (tag, part)


class _BoundWindowsFn(beam.DoFn):
    """Bound one shard's units over their windows, then within each kept window.

    Output: ``(window encoding, bounded rows of that window)`` with a timestamp inside the
    window, in the global window (``_RestoreWindows`` puts it back in its own window).
    """

    def __init__(
        self, bounds: ContributionBounds, salt: int, max_windows_per_unit: int, coder: Coder
    ) -> None:
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._limit = max_windows_per_unit
        self._coder = coder
        self._counts = _BoundingCounts()

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


class _AdmitWindowsFn(beam.DoFn):
    """Keep a shard's rows only in the first ``max_windows_per_unit`` windows of each unit.

    Input: ``(shard, (window encoding, rows))`` in the global window, keyed so that every
    row of a unit reaches the same state. Output: ``(window encoding, admitted rows)`` with
    the input's timestamp (``_RestoreWindows`` puts them back in their own windows).
    """

    def __init__(self, max_windows_per_unit: int) -> None:
        super().__init__()
        self._limit = max_windows_per_unit
        self._exact_counts = exact_counts_enabled()
        if self._exact_counts:
            self._dropped = Metrics.counter(_NAMESPACE, "rows_dropped_by_bounding")

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

    The windowing strategy of what :class:`BoundContributions` outputs on windowed input:
    the same windows as the input's (``windowfn``), restored after the global shuffle.
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
        return hash((type(self), self._windowfn))


def _drop_tag(element: tuple[_WindowTag, Any]) -> Any:
    return element[1]


class _RestoreWindows(beam.PTransform):
    """``(window encoding, element)`` to ``element`` in the window it encodes."""

    def __init__(self, windowfn: WindowFn) -> None:
        super().__init__()
        self._windowfn = windowfn

    def expand(self, pcoll: PCollection) -> PCollection:
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
            | "TagWindow" >> beam.ParDo(_TagWindowFn(coder))
            | "RestoreWindows" >> _RestoreWindows(self._windowfn)
        )


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

    Output: column batches in which every unit's rows of one window are together and within
    ``bounds``. On windowed input each unit keeps the rows of at most
    ``max_windows_per_unit`` of its windows, and ``bounds`` hold in each of them; the output
    is in the input's windows. Which windows: on bounded input, those of lowest salted
    priority over the unit's own windows (:func:`kept_windows`); on unbounded input, the
    first ones its rows arrive in (:class:`WindowAdmissions`, per-unit state that lives as
    long as the job: see the module docstring for its size). The windowings accepted are
    those of :func:`check_windowing` (no merging windows).

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
        if not windowed:
            return (
                pcoll
                | "SplitByUnitShard" >> beam.FlatMap(_split_to_shards, self._num_shards)
                | "GroupUnits" >> beam.GroupByKey()
                | "Bound" >> beam.ParDo(_BoundShardFn(self._bounds, self._salt))
            )
        windowfn = pcoll.windowing.windowfn
        coder = windowfn.get_window_coder()
        if not pcoll.is_bounded:
            return (
                pcoll
                | "TagWindow" >> beam.ParDo(_TagWindowFn(coder))
                | "OneWindowForTheState" >> beam.WindowInto(GlobalWindows())
                | "SplitByUnitShard" >> beam.FlatMap(_split_tagged_to_shards, self._num_shards)
                | "AdmitWindows"
                >> beam.ParDo(_AdmitWindowsFn(self._max_windows)).with_input_types(
                    beam.typehints.Tuple[int, Any]  # an int key: a deterministic state key
                )
                | "RestoreWindows" >> _RestoreWindows(windowfn)
                | "SplitWindowByUnitShard" >> beam.FlatMap(_split_to_shards, self._num_shards)
                | "GroupUnitsInWindow" >> beam.GroupByKey()
                | "BoundInWindow" >> beam.ParDo(_BoundShardFn(self._bounds, self._salt))
            )
        return (
            pcoll
            | "TagWindow" >> beam.ParDo(_TagWindowFn(coder))
            | "OneWindowForTheShuffle" >> beam.WindowInto(GlobalWindows())
            | "SplitByUnitShard" >> beam.FlatMap(_split_tagged_to_shards, self._num_shards)
            | "GroupUnits" >> beam.GroupByKey()
            | "BoundWindows"
            >> beam.ParDo(_BoundWindowsFn(self._bounds, self._salt, self._max_windows, coder))
            | "RestoreWindows" >> _RestoreWindows(windowfn)
        )

    def display_data(self) -> dict[str, Any]:
        return {
            "bounds": str(self._bounds.to_dict()),
            "num_shards": self._num_shards,
            "max_windows_per_unit": self._max_windows,
        }


# ------------------------------------------------------------------ rows per unit, re-bounded


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
