"""Many keys, one draw: how ``.PerKey`` selections release thousands of keys at once.

A :class:`BatchedSelectFn` is a selection combiner that can also release a batch of keys'
selections with one vectorised exact draw (:func:`beam_dp.mechanisms.select_per_key`).
:func:`~beam_dp.beam.plan_graph.expand_plan` uses it in one of two shapes:

- keys grouped in shards of about :data:`BATCH_WEIGHT` accumulator entries, one combine per
  shard (:meth:`BatchedSelectFn.shard_fn`), each shard released by :class:`ReleaseShardFn`;
- with candidates from a side input (accumulator size unknown while building), one combine per
  key gives merged scores and ``BatchElements`` groups keys for :class:`ReleaseBatchFn`
  (:class:`SelectBatchesPerKey`).

Privacy:
    Grouping keys changes the evaluation order only: every key's release has the law, ε (or ρ)
    and record one ``extract_output`` per key would give, keys drawn independently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection

from beam_dp.batching import KEY, ColumnBatch, num_rows, take
from beam_dp.release import Release

__all__ = [
    "BATCH_WEIGHT",
    "BatchedSelectFn",
    "ReleaseBatchFn",
    "ReleaseShardFn",
    "ScoresOnlyFn",
    "SelectBatchesPerKey",
    "split_by_shard",
]


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
