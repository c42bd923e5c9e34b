"""Map and FlatMap steps over column batches that keep no element once their call returns.

Beam's Python SDK calls a DoFn through one of two invokers. ``beam.Map(fn, *params)``,
``beam.FlatMap(fn, *params)`` and any DoFn with a side input go through the per-window
invoker, which, in the global window, fills one cached argument list with each element and
keeps it there after the call returns. A worker caches a bundle processor per concurrent
bundle and reuses it, so each processor kept the last column batch of every such step (16 MB
for a 10^6-row Parquet batch, 12 MB for a bounding shard at 10^8 rows): measured: up to
17 of them alive in one Flink SDK worker, none of them in use.

These steps run through the simple invoker (their parameters are attributes, not extra
arguments), or, with a side input, ask for the window, which makes Beam build each call's
arguments afresh; nothing of an element outlives its call. Same results as ``beam.Map`` and
``beam.FlatMap``; elements typed ``Any``, as Beam infers for those. The layer's own DoFns
with a side input over large elements (``BinFineFn``, ``EncodeWithSideCandidatesFn``,
``ReleaseBatchFn``, ``ReleaseShardFn``) ask for the window in the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam


class MapFn(beam.DoFn):
    """``fn(element, *params)`` for each element: ``beam.Map`` without a kept element."""

    def __init__(self, fn: Callable[..., Any], *params: Any) -> None:
        super().__init__()
        self._fn = fn
        self._params = params

    def process(self, element: Any) -> Iterator[Any]:
        yield self._fn(element, *self._params)

    def display_data(self) -> dict[str, Any]:
        return {"fn": getattr(self._fn, "__qualname__", type(self._fn).__name__)}


class FlatMapFn(MapFn):
    """Every output of ``fn(element, *params)``: ``beam.FlatMap`` without a kept element."""

    def process(self, element: Any) -> Iterator[Any]:
        outputs: Iterable[Any] = self._fn(element, *self._params)
        yield from outputs


class MapWithSideFn(MapFn):
    """``fn(element, side, *params)``, ``side`` a side input (``AsSingleton``, ``AsDict``).

    The window parameter is unused: asking for it is what makes Beam's per-window invoker
    build the arguments of each call anew instead of keeping the element in a cached list.
    """

    def process(  # type: ignore[override]
        self,
        element: Any,
        side: Any,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[Any]:
        del window
        yield self._fn(element, side, *self._params)
