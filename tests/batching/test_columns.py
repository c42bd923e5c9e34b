"""Encoding reader output: public candidates, bad records, messages without values."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from beam_dp.batching import CANDIDATE, KEY, UNIT, VALUE, PublicIndex, encode_batch
from beam_dp.batching.columns import BadRecordError, EncodeStats

SECRET = "4111-1111-secret"


def _table() -> pa.Table:
    return pa.table(
        {
            "user": [SECRET, "bob", "carol", None],
            "site": ["a.com", "b.com", "unknown.com", "a.com"],
            "price": [0.5, math.nan, 1.25, 0.75],
            "country": ["fr", "de", "fr", "fr"],
        }
    )


def test_encoding_maps_public_labels_and_drops_unknown_ones() -> None:
    stats = EncodeStats()
    batch = encode_batch(
        _table(),
        unit_column="user",
        candidate_column="site",
        candidates=PublicIndex(["a.com", "b.com"]),
        value_column="price",
        key_column="country",
        keys=PublicIndex(["de", "fr"]),
        on_bad_record="skip",
        stats=stats,
    )
    # row 1 has NaN price, row 3 a null user: skipped; row 2's site is not public: dropped
    assert batch[CANDIDATE].tolist() == [0]
    assert batch[KEY].tolist() == [1]
    assert batch[VALUE].tolist() == [0.5]
    assert batch[UNIT].dtype == np.uint64
    assert (stats.rows_read, stats.bad_records, stats.unknown_labels) == (4, 2, 1)


def test_fail_mode_names_source_field_and_rule_but_no_value() -> None:
    with pytest.raises(BadRecordError) as info:
        encode_batch(_table(), unit_column="user", value_column="price", source="export-0001.avro")
    message = str(info.value)
    assert "export-0001.avro" in message
    assert "'user' must not be null" in message
    assert "'price' must be a number" in message
    assert SECRET not in message and "1.25" not in message


def test_missing_field_and_wrong_type() -> None:
    with pytest.raises(BadRecordError, match="field 'nope' is missing"):
        encode_batch(_table(), unit_column="nope")
    with pytest.raises(BadRecordError, match=r"field 'flag' has type bool .*must be numeric"):
        encode_batch(pa.table({"flag": [True]}), unit_column=None, value_column="flag")


def test_text_numbers_are_parsed_entry_by_entry() -> None:
    table = pa.table({"v": ["1.5", " -2e3 ", "abc", None, "7"]})
    batch = encode_batch(table, unit_column=None, value_column="v", on_bad_record="skip")
    assert batch[VALUE].tolist() == [1.5, -2000.0, 7.0]
    with pytest.raises(BadRecordError, match="'v' must be a number") as info:
        encode_batch(table, unit_column=None, value_column="v", source="a.csv")
    assert "abc" not in str(info.value)


def test_lists_of_dicts_and_record_level_privacy() -> None:
    rows = [{"v": 1.0}, {"v": 2.0}]
    batch = encode_batch(rows, unit_column=None, value_column="v")
    assert UNIT not in batch
    assert batch[VALUE].tolist() == [1.0, 2.0]


def test_public_index_validation() -> None:
    with pytest.raises(ValueError, match="at least one public label"):
        PublicIndex([])
    with pytest.raises(ValueError, match="distinct"):
        PublicIndex(["a", "a"])
    assert PublicIndex([10, 20]).lookup(pa.array([20, 30, 10])).tolist() == [1, -1, 0]
