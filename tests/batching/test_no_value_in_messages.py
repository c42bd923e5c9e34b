"""No record's value ever reaches an exception raised while encoding, in any shape of input."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from beam_dp.batching import VALUE, PublicIndex, encode_batch
from beam_dp.errors import BadRecordError

SECRET_TEXT = "SECRET-alice@example.com"
SECRET_INT = 2**62 + 12345
# the texts a library would print for these values (Arrow prints ints in decimal)
SECRETS = (SECRET_TEXT, "alice@example", str(SECRET_INT), "4611686018427400249")


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        if exc.__cause__ is not None:
            yield from _chain(exc.__cause__)
        exc = exc.__context__


def _assert_clean(exc: BaseException) -> None:
    assert isinstance(exc, BadRecordError), f"{type(exc).__name__} escaped encode_batch"
    assert exc.__cause__ is None and exc.__context__ is None, "a library error is chained"
    for link in _chain(exc):
        for text in (str(link), repr(link), *map(str, link.args)):
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} leaked in {type(link).__name__}"


CANDIDATES = PublicIndex(["a.com", "b.com"])
INT_CANDIDATES = PublicIndex([1, 2])
KEYS = PublicIndex(["fr", "de"])


def _shapes() -> Iterator[tuple[str, Any, dict[str, Any]]]:
    s, i = SECRET_TEXT, SECRET_INT
    unit_value = {"unit_column": "u", "value_column": "v"}
    everything = {
        "unit_column": "u",
        "value_column": "v",
        "candidate_column": "c",
        "candidates": CANDIDATES,
        "key_column": "k",
        "keys": KEYS,
    }
    yield "big int ids, int values", {"u": [2**60, 3], "v": [i, 2]}, unit_value
    yield "big int ids, arrow", pa.table({"u": [2**60, 3], "v": [1.0, 2.0]}), unit_value
    yield "rows: big ids", [{"u": 2**60, "v": 1.0}, {"u": 3, "v": 2.0}], unit_value
    yield "rows: mixed id types", [{"u": i, "v": 1.0}, {"u": s, "v": 2.0}], unit_value
    yield "rows: text value", [{"u": 1, "v": 1.0}, {"u": 2, "v": s}], unit_value
    yield "rows: big int value", [{"u": None, "v": i}, {"u": 3, "v": 1.5}], unit_value
    yield (
        "rows: secret everywhere",
        [
            {"u": s, "v": s, "c": s, "k": s},
            {"u": i, "v": i, "c": i, "k": i},
            {"u": True, "v": [s], "c": {"x": s}, "k": b"\xff" + s.encode()},
        ],
        everything,
    )
    yield "rows: lone surrogates", [{"u": "\ud800" + s, "v": "\udfff" + s}], unit_value
    yield "rows: missing fields", [{"u": s}, {"v": i, "c": s}], everything
    yield "rows: not mappings", [{"u": s}, s], unit_value
    yield "columns of unequal length", {"u": [s, s], "v": [i]}, unit_value
    yield "nested values", {"u": [[s], [i]], "v": [{"a": s}, {"a": i}]}, unit_value
    yield (
        "id column of objects",
        {"u": np.array([s, i, 1.5, None], dtype=object), "v": [1] * 4},
        (unit_value),
    )
    yield "value: text and big ints", {"u": [1, 2, 3], "v": [s, str(i), "inf"]}, unit_value
    yield "value: wrong type", pa.table({"u": [s], "v": [[s]]}), unit_value
    yield "value: bools", pa.table({"u": [i], "v": [True]}), unit_value
    yield (
        "value: decimals",
        pa.table({"u": [1], "v": pa.array([10**30], pa.decimal128(38, 0))}),
        (unit_value),
    )
    yield (
        "labels of another type",
        {"u": [1, 2], "v": [1.0, 2.0], "c": [i, 2**63]},
        {
            **unit_value,
            "candidate_column": "c",
            "candidates": CANDIDATES,
        },
    )
    yield (
        "int labels, text data",
        pa.table({"u": [s], "v": [1.0], "c": [s]}),
        {
            **unit_value,
            "candidate_column": "c",
            "candidates": INT_CANDIDATES,
        },
    )
    yield (
        "mixed label types",
        [{"u": 1, "v": 1.0, "c": s}, {"u": 2, "v": 2.0, "c": i}],
        {
            **unit_value,
            "candidate_column": "c",
            "candidates": INT_CANDIDATES,
        },
    )
    yield (
        "struct labels",
        pa.table({"u": [1], "v": [1.0], "c": [{"x": s}]}),
        {
            **unit_value,
            "candidate_column": "c",
            "candidates": CANDIDATES,
        },
    )
    yield (
        "binary ids",
        pa.table({"u": pa.array([s.encode(), b"\xff\x00"]), "v": [1.0, 2.0]}),
        (unit_value),
    )
    yield "big uint ids", pa.table({"u": pa.array([2**64 - 1], pa.uint64()), "v": [i]}), unit_value
    yield "null-typed value", pa.table({"u": [s], "v": pa.array([None])}), unit_value


@pytest.mark.parametrize("mode", ["fail", "skip"])
@pytest.mark.parametrize(
    ("name", "batch", "options"), [pytest.param(*shape, id=shape[0]) for shape in _shapes()]
)
def test_no_secret_in_any_raised_message(
    name: str, batch: Any, options: dict[str, Any], mode: str
) -> None:
    try:
        encode_batch(batch, on_bad_record=mode, source="export-1.jsonl", **options)
    except Exception as exc:  # any escape is checked
        _assert_clean(exc)
        assert "export-1.jsonl" in str(exc)


def test_lookup_of_mixed_label_types_is_clean_and_row_wise() -> None:
    labels = PublicIndex([1, 2, 30])
    assert labels.lookup([SECRET_TEXT, 2, "30", 1.0, SECRET_INT, None]).tolist() == [
        -1,
        1,
        2,
        0,
        -1,
        -1,
    ]
    text_labels = PublicIndex(["x", "1"])
    assert text_labels.lookup(pa.array([1, SECRET_INT])).tolist() == [1, -1]
    assert PublicIndex([1.5, 2.0]).lookup(pa.array([2, 1])).tolist() == [1, -1]
    with pytest.raises(ValueError, match="'candidates' must all be numbers or all be text") as info:
        PublicIndex([1, SECRET_TEXT])
    assert SECRET_TEXT not in str(info.value) and info.value.__context__ is None


def test_big_integer_ids_and_values_encode_in_both_modes() -> None:
    # an int64 beyond 2**53 is an id like any other and a value rounded to a double
    for mode in ("fail", "skip"):
        out = encode_batch(
            {"u": [2**60, 3], "v": [SECRET_INT, 2]},
            unit_column="u",
            value_column="v",
            on_bad_record=mode,  # type: ignore[arg-type]
        )
        assert out[VALUE].tolist() == [float(SECRET_INT), 2.0]


def test_infinity_is_a_bad_record_in_every_form() -> None:
    forms = {
        "parquet double": pa.table({"u": [1, 2, 3], "v": [1.0, math.inf, -math.inf]}),
        "csv text": pa.table({"u": [1, 2, 3], "v": ["1", "inf", "-Infinity"]}),
        "json text overflow": pa.table({"u": [1, 2, 3], "v": ["1", "1e999", "-1e999"]}),
        "python floats": [{"u": 1, "v": 1.0}, {"u": 2, "v": math.inf}, {"u": 3, "v": -math.inf}],
        "float32": pa.table(
            {"u": [1, 2, 3], "v": pa.array([1, math.inf, -math.inf], pa.float32())}
        ),
    }
    for name, batch in forms.items():
        out = encode_batch(batch, unit_column="u", value_column="v", on_bad_record="skip")
        assert out[VALUE].tolist() == [1.0], name
        with pytest.raises(BadRecordError, match=r"'v' must be a number.*infinite"):
            encode_batch(batch, unit_column="u", value_column="v")
