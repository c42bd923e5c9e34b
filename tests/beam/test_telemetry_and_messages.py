"""What leaves a pipeline besides its releases: no exact count in metrics or logs unless the
operator switched it on, and no record value in an error message."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window

from beam_dp.beam import _contributions as encoding
from beam_dp.beam.key_selection import LABEL, KeySelectionFn, KeySelectionSpec, SelectCandidates
from beam_dp.beam.selection import TopCandidates
from beam_dp.errors import BadRecordError

SECRET = "SECRET-LABEL-7f3a"

COUNTERS = {
    "rows_read",
    "records_with_unknown_candidate_or_key",
    "rows_kept_after_bounding",
    "rows_dropped_by_bounding",
}


def _run_top_candidates(windowed: bool) -> set[str]:
    """Run a small job (a flood to bound, an unknown label) and return the beam_dp counters
    that reported a value."""
    rows = {"u": ["flood"] * 30 + ["a", "b"], "c": ["x"] * 30 + ["y", "nobody"]}
    pipeline = beam.Pipeline(runner=FnApiRunner())
    data = pipeline | beam.Create([window.TimestampedValue(rows, 1)])
    if windowed:
        data = data | beam.WindowInto(window.FixedWindows(10))
    _ = data | TopCandidates.Globally(
        candidate_column="c",
        candidates=["x", "y"],
        unit_column="u",
        epsilon=1.0,
        max_candidates_per_unit=None,
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("beam_dp"))["counters"]
    return {counter.key.metric.name for counter in counters if counter.committed}


@pytest.fixture
def progress_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding, "_PROGRESS_EVERY", 1)


def _beam_dp_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("beam_dp")]


@pytest.mark.parametrize("windowed", [False, True])
def test_no_exact_count_reaches_metrics_or_logs_by_default(
    windowed: bool, progress_every_batch: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert _run_top_candidates(windowed) == set()
    assert _beam_dp_log(caplog) == []


@pytest.mark.parametrize("windowed", [False, True])
def test_exact_counts_are_reported_when_the_operator_switches_them_on(
    windowed: bool,
    exact_counts: None,
    progress_every_batch: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    assert _run_top_candidates(windowed) >= COUNTERS
    assert any("encoded 32 rows" in line for line in _beam_dp_log(caplog))


# ------------------------------------------------------------------ values in messages


MIXED = {
    "integers, then text": [
        pa.table({"u": ["a", "b"], "site": [7, 8]}),
        pa.table({"u": ["c", "d"], "site": [SECRET, "7"]}),
    ],
    "text, then integers": [
        pa.table({"u": ["c", "d"], "site": [SECRET, "7"]}),
        pa.table({"u": ["a", "b"], "site": [7, 8]}),
    ],
    "one list of dicts": [[{"u": "a", "site": 7}, {"u": "b", "site": SECRET}]],
}


@pytest.mark.parametrize("case", list(MIXED))
def test_key_selection_over_mixed_label_types_runs_and_quotes_no_label(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Integers and text in one candidate column are read as text, whatever the batches
    # (before: Arrow's "Failed to parse string: '<label>'" in one order, success in the other).
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            pipeline
            | beam.Create(MIXED[case], reshuffle=False)
            | SelectCandidates.Globally(
                candidate_column="site", unit_column="u", epsilon=1.0, delta=1e-6
            )
        )
    assert SECRET not in caplog.text


def _labels(values: list[Any]) -> dict[str, Any]:
    return {LABEL: np.array(values, dtype=object)}


def test_key_selection_fn_reads_integers_and_text_as_text_in_any_order() -> None:
    spec = KeySelectionSpec(name="s", epsilon=1.0, delta=1e-9, max_candidates_per_unit=1)
    fn = KeySelectionFn(spec, None, "site")
    ints, text = _labels([7, 8, 7]), _labels(["7", SECRET])
    expected = {"7": 3, "8": 1, SECRET: 1}
    for first, second in ((ints, text), (text, ints)):
        one = fn.add_input(fn.add_input(fn.create_accumulator(), first), second)
        assert fn.compact(one).to_dict() == expected
        a = fn.add_input(fn.create_accumulator(), first)
        b = fn.add_input(fn.create_accumulator(), second)
        assert fn.compact(fn.merge_accumulators([fn.create_accumulator(), a, b])).to_dict() == (
            expected
        )
    only_ints = fn.add_input(fn.create_accumulator(), ints)
    assert fn.compact(only_ints).to_dict() == {7: 2, 8: 1}  # integers stay integers


def test_key_selection_fn_refuses_other_mixtures_without_quoting_a_label() -> None:
    spec = KeySelectionSpec(name="s", epsilon=1.0, delta=1e-9, max_candidates_per_unit=1)
    fn = KeySelectionFn(spec, None, "site")
    text, raw = _labels(["x"]), _labels([SECRET.encode()])  # text and bytes
    for first, second in ((text, raw), (raw, text)):
        accumulator = fn.add_input(fn.create_accumulator(), first)
        with pytest.raises(BadRecordError, match="field 'site'") as raised:
            fn.add_input(accumulator, second)
        assert SECRET not in str(raised.value) and raised.value.__cause__ is None
        other = fn.add_input(fn.create_accumulator(), second)
        with pytest.raises(BadRecordError, match="integers or text"):
            fn.merge_accumulators([fn.add_input(fn.create_accumulator(), first), other])


def test_unreadable_label_batches_quote_no_value(caplog: pytest.LogCaptureFixture) -> None:
    # A column Arrow cannot build (a label that is a dict) fails with the rule, no value.
    batch = {"u": ["a", "b"], "site": [{"k": SECRET}, 3]}
    transform = SelectCandidates.Globally(
        candidate_column="site", unit_column="u", epsilon=1.0, delta=1e-6
    )
    with pytest.raises(BadRecordError) as raised, beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([batch], reshuffle=False) | transform
    assert SECRET not in "".join(traceback.format_exception(raised.value))
    assert SECRET not in caplog.text
