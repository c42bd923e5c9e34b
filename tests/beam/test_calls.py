"""The Map/FlatMap steps of ``beam_dp.beam._calls`` keep no element once their call returns.

Measured at the end of each bundle, in a DoFn fused after the step: every element the bundle
made must be gone by then. Beam's own ``Map(fn, param)`` and ``Map(fn, side_input)`` keep
the bundle's last element in their cached argument list (issue 25); the control test shows
this check sees that, so it can fail.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.pvalue import AsSingleton
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam._calls import FlatMapFn, MapFn, MapWithSideFn


class _Batch:
    """A stand-in for a column batch that weak references can follow."""

    def __init__(self, size: int) -> None:
        self.size = size


_MADE: list[weakref.ref[_Batch]] = []
_ALIVE_AT_FINISH: list[int] = []


def _make(size: int) -> _Batch:
    batch = _Batch(size)
    _MADE.append(weakref.ref(batch))
    return batch


def _size_plus(batch: _Batch, extra: int) -> int:
    return batch.size + extra


def _sizes_plus(batch: _Batch, extra: int) -> Iterator[int]:
    yield batch.size + extra
    yield batch.size


def _size_with_side(batch: _Batch, side: int, extra: int) -> int:
    return batch.size + side + extra


class _AliveAtFinish(beam.DoFn):
    def process(self, element: Any) -> Iterator[Any]:
        yield element

    def finish_bundle(self) -> None:
        gc.collect()
        _ALIVE_AT_FINISH.append(sum(ref() is not None for ref in _MADE))


def _run(step: Any, *, side: bool) -> list[Any]:
    _MADE.clear()
    _ALIVE_AT_FINISH.clear()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        sizes = pipeline | beam.Create([1, 2, 3])
        extras = pipeline | "Side" >> beam.Create([10])
        batches = sizes | beam.Map(_make)
        outputs = batches | (step(AsSingleton(extras)) if side else step)
        _ = outputs | beam.ParDo(_AliveAtFinish())
    assert len(_MADE) == 3 and _ALIVE_AT_FINISH
    return list(_ALIVE_AT_FINISH)


@pytest.mark.parametrize(
    ("step", "side"),
    [
        (beam.ParDo(MapFn(_size_plus, 5)), False),
        (beam.ParDo(FlatMapFn(_sizes_plus, 5)), False),
        (lambda extras: beam.ParDo(MapWithSideFn(_size_with_side, 5), extras), True),
    ],
    ids=["map", "flat-map", "map-with-side-input"],
)
def test_no_element_outlives_its_call(step: Any, side: bool) -> None:
    assert _run(step, side=side) == [0] * len(_ALIVE_AT_FINISH)


@pytest.mark.parametrize(
    ("step", "side"),
    [
        (beam.Map(_size_plus, 5), False),
        (lambda extras: beam.Map(_size_with_side, extras, 5), True),
    ],
    ids=["beam-map-with-a-parameter", "beam-map-with-a-side-input"],
)
def test_control_beams_own_map_keeps_the_last_element(step: Any, side: bool) -> None:
    # If this starts failing, Beam no longer keeps the element and _calls is not needed.
    assert max(_run(step, side=side)) >= 1
