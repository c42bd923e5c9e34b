"""Labels read from the data by DP key selection have one identity, as privacy units do."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from beam_dp.batching.columns import EncodeStats, RecordList
from beam_dp.beam.key_selection import SelectCandidates, _encode_labels, canonical_label_text
from beam_dp.errors import BadRecordError


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.array([7, -3], type=pa.int64()), ["7", "-3"]),
        (pa.array([2**64 - 1], type=pa.uint64()), [str(2**64 - 1)]),
        (pa.array(["7", "07"]), ["7", "07"]),
        (pa.array(["7"], type=pa.large_string()), ["7"]),
        (pa.array(["a", "b", "a"]).dictionary_encode(), ["a", "b", "a"]),
        (pa.array([7.0, 7.5]), ["7", None]),
        (pa.array([b"7", b"\xff"]), ["7", None]),
        (pa.array([True]), [None]),
    ],
)
def test_labels_read_as_canonical_text(column: pa.Array, expected: list[Any]) -> None:
    assert canonical_label_text(column).to_pylist() == expected


def _site_batches() -> list[pa.RecordBatch]:
    # 40 units vote for site 7 as an integer column, 40 others as text, in separate batches.
    ints = pa.RecordBatch.from_pydict(
        {"u": [f"a{i}" for i in range(40)], "site": pa.array([7] * 40, type=pa.int64())}
    )
    text = pa.RecordBatch.from_pydict({"u": [f"b{i}" for i in range(40)], "site": ["7"] * 40})
    return [ints, text]


def test_integer_and_text_labels_are_one_label_in_any_batch_order() -> None:
    for batches in (_site_batches(), _site_batches()[::-1]):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            releases = (
                pipeline
                | beam.Create(batches, reshuffle=False)
                | SelectCandidates.Globally(
                    candidate_column="site", unit_column="u", epsilon=5.0, delta=1e-6
                )
            )
            assert_that(
                releases | beam.Map(lambda release: release.value),
                lambda values: _one_text_label(values),
            )


def _one_text_label(values: list[Any]) -> None:
    assert values == [["7"]], values


def test_a_label_that_is_no_identity_is_a_bad_record() -> None:
    batch = pa.RecordBatch.from_pydict({"u": ["a", "b"], "site": [7.5, 7.0]})
    with (
        pytest.raises(BadRecordError, match="field 'site'"),
        beam.Pipeline(runner=FnApiRunner()) as pipeline,
    ):
        _ = (
            pipeline
            | beam.Create([batch], reshuffle=False)
            | SelectCandidates.Globally(
                candidate_column="site", unit_column="u", epsilon=1.0, delta=1e-6
            )
        )


@pytest.mark.parametrize("on_bad_record", ["skip", "fail"])
def test_key_selection_reads_a_record_list_as_the_same_records_in_a_plain_list(
    on_bad_record: str,
) -> None:
    # The batching step hands key selection RecordLists, read into the unit and label fields
    # only: the same encoding (or the same error) as the same records in a plain list.
    rows: list[dict[str, Any]] = [
        {"user_id": 1, "site": "a.com", "extra": [1, 2]},
        {"user_id": "1", "site": "A.com"},
        {"user_id": None, "site": "b.com"},
        {"user_id": 2, "site": 7},
        {"user_id": 3, "other": "x"},
        {"user_id": 2.0, "site": "c.com", "extra": object()},
    ]

    def outcome(batch: Any) -> Any:
        stats = EncodeStats()
        try:
            encoded = _encode_labels(
                batch,
                unit_column="user_id",
                unit_ids="normalize",
                candidate_column="site",
                on_bad_record=on_bad_record,  # type: ignore[arg-type]
                source="input",
                stats=stats,
            )
        except BadRecordError as error:
            return str(error)
        return {key: list(column) for key, column in encoded.items()}, stats

    assert outcome(RecordList(rows)) == outcome(list(rows))
    assert outcome(RecordList(rows[:2])) == outcome(list(rows[:2]))
