"""JSON numbers keep their text's exact value (issue 36, finding 2).

One person is one unit whether their id comes, in JSON lines, as an integer, with ``.0`` or
with an exponent, as text in CSV or JSON, or typed in Parquet and Avro (int64, uint64,
decimal, and float64 where the number is a double): ``json.loads`` used to turn
``9007199254740993.0`` into the double ``9007199254740992.0`` before the identity rule saw it,
so the same person was two units (and two people one).
"""

from __future__ import annotations

import decimal
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from beam_dp.batching.bounding import ContributionBounds
from beam_dp.batching.columns import VALUE, encode_batch, num_rows
from beam_dp.batching.hashing import UnitIds, canonical_hash64
from beam_dp.beam._contributions import BoundContributions, EncodeBatches
from beam_dp.errors import BadRecordError
from beam_dp.io import ReadExport
from beam_dp.io.readers import _ReadFileFn

# small ids, ids between 2**53 and 2**63 that no double holds, the ends of int64, and ids
# beyond int64
PEOPLE = [
    0,
    13,
    -7,
    2**53 + 1,
    2**53 + 3,
    150_000_000_000_000_001,
    2**63 - 1,
    -(2**63),
    2**63,
    10**20 + 1,
    -(10**25) - 3,
]
_INT64 = range(-(2**63), 2**63)
_DECIMAL = pa.decimal128(38, 0)


def _number_texts(n: int) -> list[str]:
    """The ways a writer spells the number ``n``: as an integer, with a point, with an
    exponent (every one a valid JSON number)."""
    sign = "-" if n < 0 else ""
    digits = str(abs(n))
    mantissa = digits[0] + "." + (digits[1:] or "0")
    exponent = len(digits) - 1
    return [
        str(n),
        f"{n}.0",
        f"{n}.000",
        f"{sign}{mantissa}e{exponent}",
        f"{sign}{mantissa}E+{exponent}",
        f"{sign}{digits}0e-1" if n else "-0e7",
    ]


def _padded_texts(n: int) -> list[str]:
    """Text only: leading zeros, a plus sign, surrounding spaces (the identity rule's forms)."""
    sign = "-" if n < 0 else "+"
    digits = str(abs(n))
    return [f" {'-' if n < 0 else ''}0{digits} ", f"{sign}{digits}", f"  {n}.0\t"]


def _is_double(n: int) -> bool:
    return n in _INT64 and float(n) == n and float(n) < 2.0**63


def _read(path: Path, fmt: str, batch_rows: int = 1024) -> list[pa.Array]:
    """The id column of each batch read from ``path``, in order."""
    fn = _ReadFileFn(fmt, ["user"], batch_rows, "fail", identifiers=["user"])
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    return [batch.column("user") for _, batch in fn.process(fileio.ReadableFile(metadata))]


def _keys(path: Path, fmt: str, unit_ids: UnitIds = "normalize", batch_rows: int = 1024) -> Any:
    """The identity rule's unit key of each id read from ``path`` and whether it is bad."""
    read = [canonical_hash64(column, unit_ids) for column in _read(path, fmt, batch_rows)]
    return np.concatenate([h for h, _ in read]), np.concatenate([b for _, b in read])


def _avro(path: Path, kind: Any, values: list[Any]) -> None:
    schema = {"type": "record", "name": "Row", "fields": [{"name": "user", "type": kind}]}
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, [{"user": v} for v in values])
    path.write_bytes(buffer.getvalue())


Writer = Callable[[Path, int], None]


def _json_token(text: str) -> Writer:
    return lambda path, n: path.write_text(f'{{"user": {text}}}\n')


def _forms(n: int, exact_numbers_only: bool) -> dict[str, tuple[str, Writer]]:
    """Every form of ``n`` in every format: name -> (format, write one file holding it).

    With ``exact_numbers_only``, only the forms the ``"exact"`` rule reads as the number
    itself: numbers (JSON number tokens, typed columns) and canonical decimal text.
    """
    forms: dict[str, tuple[str, Writer]] = {}
    numbers = _number_texts(n)
    texts = [str(n)] if exact_numbers_only else [*numbers, *_padded_texts(n)]
    for number, text in enumerate(numbers):
        forms[f"jsonl number {number}"] = ("jsonl", _json_token(text))
    for number, text in enumerate(texts):
        forms[f"jsonl text {number}"] = ("jsonl", _json_token(json.dumps(text)))
        forms[f"csv text {number}"] = (
            "csv",
            lambda path, n, t=text: path.write_text(f'user\n"{t}"\n'),
        )
        forms[f"parquet text {number}"] = (
            "parquet",
            lambda path, n, t=text: pq.write_table(pa.table({"user": pa.array([t])}), path),
        )
        forms[f"avro text {number}"] = ("avro", lambda path, n, t=text: _avro(path, "string", [t]))
    if n in _INT64:
        forms["parquet int64"] = (
            "parquet",
            lambda path, n: pq.write_table(pa.table({"user": pa.array([n], pa.int64())}), path),
        )
        forms["avro long"] = ("avro", lambda path, n: _avro(path, "long", [n]))
        # a union of two types: read by fastavro, not the native reader
        forms["avro union long"] = (
            "avro",
            lambda path, n: _avro(path, ["null", "long", "string"], [n]),
        )
    if 0 <= n < 2**64:
        forms["parquet uint64"] = (
            "parquet",
            lambda path, n: pq.write_table(pa.table({"user": pa.array([n], pa.uint64())}), path),
        )
    forms["parquet decimal"] = (
        "parquet",
        lambda path, n: pq.write_table(
            pa.table({"user": pa.array([decimal.Decimal(n)], _DECIMAL)}), path
        ),
    )
    forms["avro decimal"] = (
        "avro",
        lambda path, n: _avro(
            path,
            {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0},
            [decimal.Decimal(n)],
        ),
    )
    if _is_double(n):
        forms["parquet double"] = (
            "parquet",
            lambda path, n: pq.write_table(
                pa.table({"user": pa.array([float(n)], pa.float64())}), path
            ),
        )
        forms["avro double"] = ("avro", lambda path, n: _avro(path, "double", [float(n)]))
        forms["avro union double"] = (
            "avro",
            lambda path, n: _avro(path, ["null", "double", "string"], [float(n)]),
        )
    return forms


def _unit_keys(tmp_path: Path, unit_ids: UnitIds) -> dict[int, dict[str, int | None]]:
    """Person -> form -> the identity rule's unit key of the id read back (None: bad)."""
    keys: dict[int, dict[str, int | None]] = {}
    for person, n in enumerate(PEOPLE):
        keys[n] = {}
        for number, (name, (fmt, write)) in enumerate(
            _forms(n, exact_numbers_only=unit_ids == "exact").items()
        ):
            path = tmp_path / f"p{person}-{number}.{fmt}"
            write(path, n)
            hashes, bad = _keys(path, fmt, unit_ids)
            assert len(hashes) == 1
            keys[n][name] = None if bad[0] else int(hashes[0])
    return keys


def _disagreements(keys: dict[int, dict[str, int | None]]) -> list[str]:
    problems = []
    owners: dict[int, int] = {}
    for n, by_form in keys.items():
        reference = by_form["jsonl number 0"]
        for name, key in by_form.items():
            if key is None or key != reference:
                problems.append(f"{n}: {name} is {'bad' if key is None else 'another unit'}")
            elif owners.setdefault(key, n) != n:
                problems.append(f"{n}: {name} is the unit of {owners[key]}")
    return problems


def test_every_form_of_an_id_in_every_format_is_one_unit(tmp_path: Path) -> None:
    keys = _unit_keys(tmp_path, "normalize")
    assert _disagreements(keys) == []
    assert sum(len(forms) for forms in keys.values()) > 30 * len(PEOPLE)


def test_json_forms_mixed_in_one_file_read_as_they_do_alone(tmp_path: Path) -> None:
    # every JSON spelling of every person in one file, three lines to a batch: numbers,
    # integers past int64 and text share batches (the column is then built value by value)
    lines = [
        (n, f'{{"user": {token}}}\n')
        for n in PEOPLE
        for token in [*_number_texts(n), *(json.dumps(t) for t in _padded_texts(n))]
    ]
    lines = lines[::2] + lines[1::2]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(line for _, line in lines))
    hashes, bad = _keys(path, "jsonl", batch_rows=3)
    assert not bad.any()
    expected, _ = canonical_hash64([n for n, _ in lines])
    assert hashes.tolist() == expected.tolist()


def test_under_the_exact_rule_a_json_number_is_its_number_whatever_its_spelling(
    tmp_path: Path,
) -> None:
    # "exact" keeps text as given, but a number is a number: 9007199254740993.0 written in
    # JSON is the integer 9007199254740993, as in an int64, decimal or uint64 column
    keys = _unit_keys(tmp_path, "exact")
    assert _disagreements(keys) == []


# --- the reproduction of the issue: 50 people, one row in each of two shards ---------------


def _shards(directory: Path) -> str:
    people = [2**53 + 1 + 2 * i for i in range(50)]  # odd: no double holds any of them
    (directory / "part-0.jsonl").write_text("".join(f'{{"user": {n}}}\n' for n in people))
    forms = [
        text
        for i, n in enumerate(people)
        for text in [_number_texts(n)[1 + i % 5]]  # ".0", ".000", the exponents
    ]
    (directory / "part-1.jsonl").write_text("".join(f'{{"user": {t}}}\n' for t in forms))
    return str(directory / "*.jsonl")


def test_two_shards_of_the_same_people_are_bounded_as_those_people(tmp_path: Path) -> None:
    pattern = _shards(tmp_path)
    with beam.Pipeline() as pipeline:
        kept = (
            pipeline
            | ReadExport(pattern, columns=["user"], unit_column="user")
            | EncodeBatches(unit_column="user")
            | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
            | beam.Map(num_rows)
            | beam.CombineGlobally(sum)
        )
        assert_that(kept, equal_to([50]))  # one row per person (76 when ids were doubles)


# --- values still decode to the numbers the pipeline expects --------------------------------


VALUES = [
    "2.5",
    "-0.0",
    "9007199254740993.0",
    "1.50000000000000001e17",
    "1e-400",
    "1e400",
    "123456789012345678901234567890",
    "7",
]


def _encoded_values(path: Path, fmt: str) -> list[float]:
    """The values kept after encoding (a bad value is dropped)."""
    fn = _ReadFileFn(fmt, ["user", "x"], 1024, "fail", identifiers=["user"])
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    out: list[float] = []
    for _, batch in fn.process(fileio.ReadableFile(metadata)):
        encoded = encode_batch(batch, unit_column="user", value_column="x", on_bad_record="skip")
        out += encoded[VALUE].tolist()
    return out


def test_values_read_from_json_are_the_doubles_csv_gives(tmp_path: Path) -> None:
    for number, text in enumerate(VALUES):
        (tmp_path / f"v{number}.jsonl").write_text(f'{{"user": 1, "x": {text}}}\n')
        (tmp_path / f"v{number}.csv").write_text(f"user,x\n1,{text}\n")
        json_values = _encoded_values(tmp_path / f"v{number}.jsonl", "jsonl")
        csv_values = _encoded_values(tmp_path / f"v{number}.csv", "csv")
        assert np.array_equal(np.array(json_values), np.array(csv_values)), text
    floats = "".join(f'{{"user": 1, "x": {t}}}\n' for t in VALUES[:5])
    (tmp_path / "floats.jsonl").write_text(floats)
    fn = _ReadFileFn("jsonl", ["x"], 1024, "fail", identifiers=["user"])
    metadata = FileSystems.match([str(tmp_path / "floats.jsonl")])[0].metadata_list[0]
    (_, batch), *_ = fn.process(fileio.ReadableFile(metadata))
    column = batch.column("x")
    assert column.type == pa.float64()
    assert column.to_pylist() == [float(t) for t in VALUES[:5]]
    assert all(type(v) is float for v in column.to_pylist())


# --- numbers past the public limits: a bad record in bounded time, never quoted --------------

DIGITS = 10**6
HUGE_IDS = {
    "huge exponent": "1e400",
    "huge negative exponent": "1e-999999999",
    "exponent past every limit": "1e999999999999",
    "exponent past the decimal range": "7e99999999999999999999",
    "a million digits": "7" * DIGITS,
    "a million digits with a point": "7" * DIGITS + ".0",
    "a million-digit fraction": "0." + "7" * DIGITS,
}


def _read_and_encode(path: Path, on_bad_record: Any) -> int:
    """Rows kept after reading and encoding ``path`` (a bad record may be either's)."""
    fn = _ReadFileFn("jsonl", ["user"], 1024, on_bad_record, identifiers=["user"])
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    kept = 0
    for _, batch in fn.process(fileio.ReadableFile(metadata)):
        encoded = encode_batch(
            batch, unit_column="user", on_bad_record=on_bad_record, source=str(path)
        )
        kept += num_rows(encoded)
    return kept


def _chain_text(error: BaseException | None) -> str:
    text = ""
    while error is not None:
        text += repr(error) + str(error)
        error = error.__context__ or error.__cause__
    return text


@pytest.mark.parametrize("name", list(HUGE_IDS))
def test_an_id_past_the_limits_is_a_bad_record_quickly(tmp_path: Path, name: str) -> None:
    text = HUGE_IDS[name]
    path = tmp_path / "huge.jsonl"
    path.write_text(f'{{"user": 5}}\n{{"user": {text}}}\n{{"user": 6}}\n')
    started = time.monotonic()
    assert _read_and_encode(path, "skip") == 2
    with pytest.raises(BadRecordError) as info:
        _read_and_encode(path, "fail")
    message = _chain_text(info.value)
    assert str(path) in message
    assert "7777" not in message and "e400" not in message and "99999" not in message
    assert time.monotonic() - started < 10


def test_a_long_number_is_read_exactly_and_quickly(tmp_path: Path) -> None:
    # a million digits: the whole number 1, and a fraction a double would round to 1 (no
    # identifier: not the person 1)
    one = "1" + "0" * (DIGITS - 1) + "e-" + str(DIGITS - 1)
    near_one = "1." + "0" * DIGITS + "1"
    path = tmp_path / "long.jsonl"
    path.write_text(f'{{"user": {one}}}\n{{"user": {near_one}}}\n')
    started = time.monotonic()
    hashes, bad = _keys(path, "jsonl")
    assert bad.tolist() == [False, True]
    assert hashes[0] == canonical_hash64([1])[0][0]
    assert time.monotonic() - started < 10
