"""The stateful per-unit window admission (``AdmitWindowsFn``, beam_dp/beam/_contributions.py)
and the whole bounding step in streaming mode on Beam's FlinkRunner, with the streams of
tests/beam/test_windows_streaming.py (``TestStream``s, run by Flink's streaming translation
instead of Beam's BundleBasedDirectRunner). Parallelism 1
keeps the stream's order up to the admission step: the order is what is tested (a unit keeps
its first windows in arrival order).

``BoundContributions`` on unbounded input is TagWindow, the global window, the per-unit state
(``AdmitWindowsFn``), then ``RestoreWindows``. The first test runs that stateful part on
Flink; the others the whole transform, fixed and sliding windows: ``RestoreWindows`` puts rows
back in their windows with the input's own (standard) ``WindowFn``, which Beam's Java runners
know (a Python ``WindowFn`` there was rejected: "Unknown or unsupported WindowFn:
beam:window_fn:pickled_python:v1"). A custom Python ``WindowFn`` is refused when the pipeline
is built, before the job is submitted (tests/beam/test_windows.py).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from engines_env import DumpElements, load_test_module

from beam_dp.batching import VALUE, ContributionBounds
from beam_dp.beam._contributions import (
    AdmitWindowsFn,
    BoundContributions,
    EncodeBatches,
    TagWindowFn,
    split_tagged_to_shards,
)

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-embedded")

TESTS = Path(__file__).parents[1]
streaming = load_test_module(
    TESTS / "beam" / "test_windows_streaming.py", "windows_streaming_for_engines"
)


def spam_stream(order: tuple[int, ...]) -> test_stream.TestStream:
    """tests/beam/test_windows_streaming.py's ``spam_stream(order)`` with its batches pickled:
    Flink's runner decodes a ``TestStream``'s elements in Java, so they must have a coder Java
    knows (bytes); the pipeline unpickles them before anything else."""
    events = test_stream.TestStream(coder=coders.BytesCoder()).advance_watermark_to(0)
    for event in streaming.spam_stream(order)._events:
        if isinstance(event, test_stream.ElementEvent):
            events = events.add_elements(
                [
                    window.TimestampedValue(pickle.dumps(element.value), element.timestamp)
                    for element in event.timestamped_values
                ]
            )
    return events.advance_watermark_to_infinity().with_output_types(bytes)


def run_stream_on_flink(
    endpoint: str,
    directory: Path,
    stream: test_stream.TestStream,
    build: Callable[[Any], Any],
    windowfn: Any = None,
) -> list[tuple[Any, Any]]:
    """``build(windowed stream)`` on FlinkRunner in streaming mode; its ``(element, window)``s."""
    options = PipelineOptions(
        ["--runner", "FlinkRunner", "--flink_version", "1.19", "--job_endpoint", endpoint,
         "--environment_type", "LOOPBACK", "--streaming", "--parallelism", "1"]
    )  # fmt: skip
    with beam.Pipeline(options=options) as pipeline:
        data = (
            pipeline
            | stream
            | "Unpickle" >> beam.Map(pickle.loads)
            | "Windows" >> beam.WindowInto(windowfn or window.FixedWindows(streaming.SIZE))
        )
        assert not data.is_bounded
        _ = build(data) | DumpElements.into(directory)
    return DumpElements.read(directory)


ORDER = (3, 0, 4, 1, 2)
CODER = window.FixedWindows(streaming.SIZE).get_window_coder()


def test_the_per_unit_window_state_admits_the_first_windows_in_arrival_order_on_flink(
    flink_embedded: str, tmp_path: Path
) -> None:
    found = run_stream_on_flink(
        flink_embedded,
        tmp_path / "out",
        spam_stream(ORDER),
        lambda data: (
            data
            | EncodeBatches(unit_column="u", value_column="v")
            # BoundContributions' stateful steps on unbounded input, as it chains them
            | "TagWindow" >> beam.ParDo(TagWindowFn(CODER))
            | "OneWindowForTheState" >> beam.WindowInto(window.GlobalWindows())
            | "SplitByUnitShard" >> beam.FlatMap(split_tagged_to_shards, 32)
            | "AdmitWindows"
            >> beam.ParDo(AdmitWindowsFn(2)).with_input_types(beam.typehints.Tuple[int, Any])
        ),
    )
    kept: dict[int, list[float]] = {}
    for (tag, batch), _ in found:
        index = streaming.window_index(CODER.decode(tag))
        kept.setdefault(index, []).extend(batch[VALUE].tolist())
    assert sorted(kept) == list(range(streaming.WINDOWS))  # every other unit's row survives
    with_spam = {index for index, values in kept.items() if streaming.SPAM in values}
    assert with_spam == set(ORDER[:2])  # the first 2 windows in arrival order, no others
    for index, values in kept.items():
        # all 3 of the unit's rows in an admitted window (rows are bounded after admission)
        assert values.count(streaming.SPAM) == (3 if index in with_spam else 0)
        assert [v for v in values if v != streaming.SPAM] == [float(index)]


def test_bound_contributions_on_a_windowed_stream_on_flink(
    flink_embedded: str, tmp_path: Path
) -> None:
    found = run_stream_on_flink(
        flink_embedded,
        tmp_path / "out",
        spam_stream(ORDER),
        lambda data: (
            data
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        ),
    )
    kept: dict[int, list[float]] = {}
    for batch, win in found:
        assert isinstance(win, window.IntervalWindow)  # back in its own window
        kept.setdefault(streaming.window_index(win), []).extend(batch[VALUE].tolist())
    assert sorted(kept) == list(range(streaming.WINDOWS))  # every other unit's row survives
    with_spam = {index for index, values in kept.items() if streaming.SPAM in values}
    assert with_spam == set(ORDER[:2])  # the first 2 windows in arrival order, no others
    for index, values in kept.items():
        assert values.count(streaming.SPAM) == (1 if index in with_spam else 0)  # 1 row each
        assert [v for v in values if v != streaming.SPAM] == [float(index)]


def test_sliding_windows_keep_each_row_in_its_own_window_on_flink(
    flink_embedded: str, tmp_path: Path
) -> None:
    """Unit "a" has one row at t = 7 s, in the sliding windows [0, 10) and [5, 15); unit "b"
    one at t = 12 s, in [5, 15) and [10, 20). With ``max_windows_per_unit=2`` every row stays
    in both of its windows, each exactly once (restoring by timestamp alone would put the
    copy bounded in [0, 10) in [5, 15) too)."""
    events = test_stream.TestStream(coder=coders.BytesCoder()).advance_watermark_to(0)
    for unit, at in (("a", 7), ("b", 12)):
        rows = {"u": [unit], "v": [float(at)]}
        events = events.add_elements([window.TimestampedValue(pickle.dumps(rows), at)])
    stream = events.advance_watermark_to_infinity().with_output_types(bytes)
    found = run_stream_on_flink(
        flink_embedded,
        tmp_path / "out",
        stream,
        lambda data: (
            data
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        ),
        window.SlidingWindows(size=streaming.SIZE, period=streaming.SIZE // 2),
    )
    rows = sorted(
        (int(win.start), int(win.end), value)
        for batch, win in found
        for value in batch[VALUE].tolist()
    )
    assert rows == [(0, 10, 7.0), (5, 15, 7.0), (5, 15, 12.0), (10, 20, 12.0)]
