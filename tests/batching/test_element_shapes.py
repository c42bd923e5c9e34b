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
