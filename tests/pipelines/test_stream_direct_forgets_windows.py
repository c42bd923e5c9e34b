"""The stream job's DirectRunner forgets a window's bookkeeping once the window is over
(issue 37: a 500-window run fell behind the clock after about 120 two-second windows).

Beam's streaming DirectRunner keeps, for every key of a ``GroupByKey``, every window the key
ever saw (its trigger's pane counters and tombstone), and copies it all for every bundle: a
key in every window costs more per window as the stream runs. Under
``stream.forgetting_ended_windows`` a key keeps only windows not yet over; each window's
result is still released exactly once, with the same value.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window as beam_window

from pipelines import stream

WINDOWS = 40


def _run(held: list[int]) -> None:
    """A stream of WINDOWS one-second windows, each summed by one ``CombineGlobally`` (one key
    in every window), the watermark past each window before the next one's elements."""
    events = test_stream.TestStream()
    for w in range(WINDOWS):
        events = events.add_elements(
            [beam_window.TimestampedValue(w * 10 + i, w + 0.5) for i in range(3)]
        ).advance_watermark_to(w + 1.5)
    events = events.advance_watermark_to_infinity()
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as pipeline:
        sums = (
            pipeline
            | events
            | beam.WindowInto(beam_window.FixedWindows(1))
            | beam.CombineGlobally(sum).without_defaults()
            | beam.ParDo(_WithWindow())
        )
        expected = [(w, sum(w * 10 + i for i in range(3))) for w in range(WINDOWS)]
        assert_that(sums, equal_to(expected))


class _WithWindow(beam.DoFn):
    def process(self, total: int, window: Any = beam.DoFn.WindowParam) -> Any:
        yield int(window.start), total


def _counting(held: list[int]) -> Any:
    real = stream._forget_ended_windows

    def count(raw: Any, watermark: Any, lateness: Any, tag: Any, tags: tuple[str, ...]) -> int:
        ids = raw.get_global_state(tag, None)
        held.append(len(ids) if isinstance(ids, dict) else 0)
        return real(raw, watermark, lateness, tag, tags)

    return count


def test_a_key_in_every_window_keeps_only_the_windows_not_yet_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held: list[int] = []
    monkeypatch.setattr(stream, "_forget_ended_windows", _counting(held))
    with stream.forgetting_ended_windows() as forgetting:
        assert forgetting
        _run(held)  # each window released once, with its sum
    assert held, "the pruning evaluator never ran"
    assert max(held) <= 3, max(held)  # without it: every window so far (up to 40)


def test_the_override_is_put_back_after_the_block() -> None:
    from apache_beam.runners.direct.transform_evaluator import TransformEvaluatorRegistry

    before = dict(TransformEvaluatorRegistry._test_evaluators_overrides)
    with stream.forgetting_ended_windows():
        assert TransformEvaluatorRegistry._test_evaluators_overrides != before
    assert TransformEvaluatorRegistry._test_evaluators_overrides == before
