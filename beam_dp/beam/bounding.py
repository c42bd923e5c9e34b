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

import secrets
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindows

from beam_dp.batching import ContributionBounds
from beam_dp.beam.encoding import EncodeBatches, is_heartbeat
from beam_dp.beam.rebounding import CountHistogramFn, rebound_rows, rows_per_unit_histogram
from beam_dp.beam.unit_shards import BoundShardFn, split_to_shards
from beam_dp.beam.window_bounds import (
    AdmitWindowsFn,
    BoundWindowsFn,
    MatchBoundedWindows,
    RestoreWindows,
    TagWindowFn,
    WindowAdmissions,
    check_windowing,
    kept_windows,
    split_tagged_to_shards,
)

# Implemented in beam_dp.beam.encoding (EncodeBatches, is_heartbeat), window_bounds (the
# window rules), rebounding (the auto-bound stage) and unit_shards; importable from here too.
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
                | "SplitByUnitShard" >> beam.FlatMap(split_to_shards, self._num_shards)
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
                | "SplitByUnitShard" >> beam.FlatMap(split_tagged_to_shards, self._num_shards)
                | "AdmitWindows"
                >> beam.ParDo(AdmitWindowsFn(self._max_windows)).with_input_types(
                    beam.typehints.Tuple[int, Any]  # an int key: a deterministic state key
                )
                | "RestoreWindows" >> RestoreWindows(windowfn)
                | "SplitWindowByUnitShard" >> beam.FlatMap(split_to_shards, self._num_shards)
                | "GroupUnitsInWindow" >> beam.GroupByKey()
                | "BoundInWindow" >> beam.ParDo(BoundShardFn(self._bounds, self._salt))
            )
        return (
            pcoll
            | "TagWindow" >> beam.ParDo(TagWindowFn(coder))
            | "OneWindowForTheShuffle" >> beam.WindowInto(GlobalWindows())
            | "SplitByUnitShard" >> beam.FlatMap(split_tagged_to_shards, self._num_shards)
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
