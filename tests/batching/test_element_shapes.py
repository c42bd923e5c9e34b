"""Every element shape Beam users have reads as the same columns (issue 24): a dict per record,
a beam.Row or NamedTuple, a dataclass, lists of them, a mapping of columns, an Arrow batch."""

from __future__ import annotations

import dataclasses
import typing

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.batching.columns import (
    CANDIDATE,
    UNIT,
    VALUE,
    PublicIndex,
    RecordList,
    as_table,
    encode_batch,
    is_record,
    record_fields,
)
from beam_dp.errors import BadRecordError


class Visit(typing.NamedTuple):
    user_id: object
    site: str
    seconds: float


@dataclasses.dataclass(frozen=True)
class VisitRecord:
    user_id: object
    site: str
    seconds: float


ids = st.one_of(st.integers(-(2**40), 2**40), st.text(min_size=1, max_size=6))
records = st.lists(
    st.tuples(
        ids,
        st.sampled_from(["a.com", "b.com", "c.com"]),
        st.floats(0, 100, allow_nan=False),
    ),
    min_size=1,
    max_size=30,
)


def _shapes(rows: list[tuple[object, str, float]]) -> dict[str, list[object]]:
    dicts = [{"user_id": u, "site": s, "seconds": x} for u, s, x in rows]
    return {
        "dicts": dicts,
        "rows": [beam.Row(user_id=u, site=s, seconds=x) for u, s, x in rows],
        "namedtuples": [Visit(u, s, x) for u, s, x in rows],
        "dataclasses": [VisitRecord(u, s, x) for u, s, x in rows],
    }


def _encoded(batch: object) -> dict[str, np.ndarray]:
    return encode_batch(
        batch,
        unit_column="user_id",
        candidate_column="site",
        candidates=PublicIndex(["a.com", "b.com"]),
        value_column="seconds",
        on_bad_record="skip",
    )


@given(records)
def test_records_of_every_shape_encode_alike(rows: list[tuple[object, str, float]]) -> None:
    shapes = _shapes(rows)
    expected = _encoded(shapes["dicts"])
    for name, elements in shapes.items():
        # as one list of records, and record by record (each judged alone)
        encoded = _encoded(elements)
        for key in (UNIT, CANDIDATE, VALUE):
            np.testing.assert_array_equal(encoded[key], expected[key], err_msg=name)
        one_by_one = [_encoded(element) for element in elements]
        for key in (UNIT, CANDIDATE, VALUE):
            joined = np.concatenate([part[key] for part in one_by_one])
            np.testing.assert_array_equal(joined, expected[key], err_msg=name)


def test_records_and_batches_are_told_apart() -> None:
    assert is_record({"user_id": 1, "site": "a"})
    assert is_record(beam.Row(user_id=1))
    assert is_record(Visit(1, "a", 2.0))
    assert is_record(VisitRecord(1, "a", 2.0))
    assert not is_record({"user_id": [1, 2], "site": ["a", "b"]})  # a mapping of columns
    assert not is_record(pa.record_batch({"user_id": [1]}))
    assert not is_record((1, 2.0))  # a plain (key, value) pair is not a record
    assert record_fields(beam.Row(user_id=1, site="a")) == {"user_id": 1, "site": "a"}
    table = as_table({"user_id": 7, "site": "a.com"})
    assert table.num_rows == 1 and table.column("user_id").to_pylist() == [7]


def test_an_unsupported_shape_is_refused_with_the_shapes_that_work() -> None:
    with pytest.raises(TypeError, match=r"a dict, a beam\.Row or other NamedTuple"):
        as_table(42)
    with pytest.raises(BadRecordError, match="must hold records"):
        as_table([{"user_id": 1}, 42])


# A field's values as records hold them: mixed types, nulls, and values that are no id.
loose_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from([b"u7", np.int64(3), np.float64(2.5), "a.com", "b.com"]),
)
loose_records = st.lists(
    st.dictionaries(st.sampled_from(["user_id", "site", "seconds", "extra"]), loose_values),
    min_size=1,
    max_size=25,
).filter(lambda rows: all(rows))  # {} is a heartbeat, never a record in a list


def _columns_of(table: pa.Table | pa.RecordBatch) -> dict[str, tuple[str, list[str]]]:
    # each value by its repr: NaN is one value here (NaN != NaN)
    return {
        name: (str(table.column(name).type), [repr(v) for v in table.column(name).to_pylist()])
        for name in table.column_names
    }


@given(loose_records, st.sampled_from([["user_id"], ["user_id", "site"], ["seconds", "nope"]]))
def test_a_record_list_reads_only_the_fields_asked_for_as_any_list_of_records_does(
    rows: list[dict[str, object]], wanted: list[str]
) -> None:
    # The fast path of the Beam transforms (issue 24, speed): the same columns, value by value
    # and type by type, as the general path builds for a list of the same records; only the
    # fields asked for, a field no record has stays absent.
    general = _columns_of(as_table(list(rows), id_columns=["user_id"]))
    for records in (rows, [beam.Row(**row) if row else row for row in rows]):
        fast = _columns_of(as_table(RecordList(records), id_columns=["user_id"], columns=wanted))
        present = [name for name in wanted if name in general]
        if present:
            assert fast == {name: general[name] for name in present}
        else:  # nothing asked for is there: every field, the rows counted
            assert fast == general


def _outcome(batch: object, on_bad_record: str) -> object:
    try:
        encoded = encode_batch(
            batch,
            unit_column="user_id",
            candidate_column="site",
            candidates=PublicIndex(["a.com", "b.com"]),
            value_column="seconds",
            on_bad_record=on_bad_record,  # type: ignore[typeddict-item]
        )
    except BadRecordError as error:
        return str(error)
    return {key: column.tolist() for key, column in encoded.items()}


@given(loose_records, st.sampled_from(["skip", "fail"]))
def test_a_record_list_encodes_as_the_same_records_in_a_plain_list(
    rows: list[dict[str, object]], on_bad_record: str
) -> None:
    # the same arrays, or the same error (a missing field, a bad record), either way
    assert _outcome(RecordList(rows), on_bad_record) == _outcome(list(rows), on_bad_record)


def test_a_record_list_keeps_the_shape_rules_of_a_list() -> None:
    with pytest.raises(BadRecordError, match="field names must be text"):
        as_table(RecordList([{"user_id": 1}, {"user_id": 2, 3: "x"}]), columns=["user_id"])
    with pytest.raises(BadRecordError, match="field 'site' is missing"):
        _encoded(RecordList([{"user_id": 1, "sight": "a.com", "seconds": 1.0}]))
    with pytest.raises(TypeError, match="must hold records"):
        as_table(RecordList([{"user_id": 1}, 42]), columns=["user_id"])
    # a record without a field others have holds a null there: a bad record, judged alone
    skipped = _encoded(
        RecordList([{"user_id": 1, "site": "a.com", "seconds": 1.0}, {"user_id": 2}])
    )
    assert skipped[UNIT].shape == (1,)
