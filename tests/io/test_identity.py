"""A privacy unit's identity does not depend on the batch, the file or the format it is read
from: readers never let Arrow's inference over a batch change how an id is read."""

from __future__ import annotations

import io
import json
import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.batching.hashing import canonical_hash64, canonical_id_text
from beam_dp.io import ReadExport
from beam_dp.io.decoding import _to_batch
from beam_dp.io.readers import _ReadFileFn

_INT64 = st.integers(-(2**63), 2**63 - 1)
_HUGE = st.integers(2**63, 2**80) | st.integers(-(2**80), -(2**63) - 1)
_WHOLE_FLOAT = st.integers(-(2**53), 2**53).map(float)
_TEXT = st.text(alphabet="abxyz0123456789-", min_size=1, max_size=6)
IDS = st.one_of(_INT64, _HUGE, _WHOLE_FLOAT, _TEXT)
# anything a JSON line or an Avro union may hold, good identifiers or not
ANY_VALUE = st.one_of(
    IDS,
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


def _identity(column: pa.Array, row: int) -> tuple[bool, int]:
    hashes, bad = canonical_hash64(column)
    return bool(bad[row]), 0 if bad[row] else int(hashes[row])


@settings(max_examples=200, deadline=None)
@given(values=st.lists(ANY_VALUE, min_size=1, max_size=12), companion=ANY_VALUE)
def test_an_id_reads_the_same_whatever_else_is_in_its_batch(
    values: list[Any], companion: Any
) -> None:
    batch = _to_batch({"user": values}, identifiers={"user"}).column("user")
    for row, value in enumerate(values):
        alone = _to_batch({"user": [value]}, identifiers={"user"}).column("user")
        mixed = _to_batch({"user": [value, companion, "x"]}, identifiers={"user"}).column("user")
        expected = _identity(pa.array([canonical_id_text(value)], pa.string()), 0)
        assert _identity(batch, row) == _identity(alone, 0) == _identity(mixed, 0) == expected


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(_INT64, _HUGE, st.floats(allow_nan=True, allow_infinity=True)), min_size=1
    ),
    companion=ANY_VALUE,
)
def test_a_number_stays_the_same_number_in_a_mixed_batch(values: list[Any], companion: Any) -> None:
    column = _to_batch({"price": [*values, companion, "x"]}).column("price").to_pylist()
    for value, read in zip(values, column, strict=False):
        assert isinstance(read, str)
        number = float(read)  # the encoder's number rule then accepts or rejects it
        assert number == float(value) or (math.isnan(number) and math.isnan(value))


def test_labels_keep_matching_text() -> None:
    column = _to_batch({"site": [42, 42.0, "42", "a.com", 1.5, True, None, [1]]}).column("site")
    assert column.to_pylist() == ["42", "42", "42", "a.com", "1.5", None, None, None]


def test_int_and_float_ids_in_one_batch_keep_every_digit() -> None:
    # Arrow's inference would make this column float64 and round the first id to 2**53 steps
    column = _to_batch({"user": [2**62 + 12345, 1.0, 2.5]}, identifiers={"user"}).column("user")
    assert column.to_pylist() == [str(2**62 + 12345), "1", None]


# --- the same ids through every format, split over files and batches --------------------

_FORMATS = ("jsonl", "csv", "avro", "parquet")
_AVRO_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [{"name": "user", "type": ["long", "double", "string"]}],
}


def _text(value: Any) -> str:
    text = canonical_id_text(value)
    assert text is not None
    return text


def _write(path: Path, fmt: str, ids: list[Any], typed: list[bool]) -> None:
    """Write ``ids``; where ``typed`` each id keeps its type where the format allows it,
    elsewhere it is written as its canonical text (what a text export would hold)."""
    values = [v if keep else _text(v) for v, keep in zip(ids, typed, strict=True)]
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"user": v}) + "\n" for v in values))
    elif fmt == "csv":
        path.write_text("user\n" + "".join(_text(v) + "\n" for v in ids))
    elif fmt == "avro":
        out = [v if not isinstance(v, int) or -(2**63) <= v < 2**63 else _text(v) for v in values]
        buffer = io.BytesIO()
        fastavro.writer(buffer, _AVRO_SCHEMA, [{"user": v} for v in out])
        path.write_bytes(buffer.getvalue())
    else:
        as_ints = all(type(v) is int and -(2**63) <= v < 2**63 for v in ids) and all(typed)
        column = pa.array(ids, pa.int64()) if as_ints else pa.array([_text(v) for v in ids])
        pq.write_table(pa.table({"user": column}), path)


def _read(path: Path, fmt: str, batch_rows: int) -> list[pa.RecordBatch]:
    fn = _ReadFileFn(fmt, ["user"], batch_rows, "fail", identifiers=["user"])
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    return [batch for _, batch in fn.process(fileio.ReadableFile(metadata))]


@settings(max_examples=25, deadline=None)
@given(ids=st.lists(IDS, min_size=1, max_size=30), data=st.data())
def test_ids_hash_alike_whatever_the_format_file_and_batch(ids: list[Any], data: Any) -> None:
    formats = data.draw(st.lists(st.sampled_from(_FORMATS), min_size=1, max_size=4), "formats")
    where = data.draw(
        st.lists(st.integers(0, len(formats) - 1), min_size=len(ids), max_size=len(ids)), "files"
    )
    typed = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)), "typed")
    batch_rows = data.draw(st.integers(1, 8), "batch_rows")
    read: list[int] = []
    with tempfile.TemporaryDirectory() as directory:
        for number, fmt in enumerate(formats):
            rows = [i for i, f in enumerate(where) if f == number]
            path = Path(directory) / f"part-{number}.{fmt}"
            _write(path, fmt, [ids[i] for i in rows], [typed[i] for i in rows])
            for batch in _read(path, fmt, batch_rows):
                hashes, bad = canonical_hash64(batch.column("user"))
                assert not bad.any()
                read += hashes.tolist()
    expected, bad = canonical_hash64(ids)
    assert not bad.any()
    assert Counter(read) == Counter(expected.tolist())


def test_unit_column_is_read_and_validated() -> None:
    transform = ReadExport("x.jsonl", columns=["price"], unit_column="user")
    assert transform.display_data()["columns"] == "user,price"
    with pytest.raises(ValueError, match="'unit_column' must be a field name"):
        ReadExport("x.jsonl", columns=["price"], unit_column="")
