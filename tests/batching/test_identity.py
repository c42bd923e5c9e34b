"""One canonical identity per privacy unit, whatever its Arrow type, batch, file or format."""

from __future__ import annotations

import datetime
import decimal
import itertools
import math
import unicodedata
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.batching import (
    UNIT,
    VALUE,
    ContributionBounds,
    bound_rows,
    concat_batches,
    encode_batch,
    stable_hash64,
    take,
)
from beam_dp.batching.hashing import canonical_hash64, canonical_id_text, unit_identity


def _one(values: Any) -> list[int | None]:
    """Hashes of ``values``, ``None`` where the identifier is bad."""
    hashes, bad = canonical_hash64(values)
    return [None if b else int(h) for h, b in zip(hashes.tolist(), bad.tolist(), strict=True)]


def _ref(ids: list[int]) -> list[int | None]:
    return _one(pa.array(ids, type=pa.int64()))


def test_an_integer_and_its_decimal_text_are_one_unit_in_every_arrow_type() -> None:
    ids = [42, -7, 0, 2**62 + 12345, -(2**63), 2**63 - 1]
    texts = [str(i) for i in ids]
    expected = _ref(ids)
    forms: dict[str, Any] = {
        "numpy int64": np.array(ids, dtype=np.int64),
        "python ints": ids,
        "string": pa.array(texts),
        "large_string": pa.array(texts, type=pa.large_string()),
        "string_view": pa.array(texts).cast(pa.string_view()),
        "binary": pa.array([t.encode() for t in texts], type=pa.binary()),
        "large_binary": pa.array([t.encode() for t in texts], type=pa.large_binary()),
        "dictionary of text": pa.array(texts).dictionary_encode(),
        "dictionary of ints": pa.array(ids).dictionary_encode(),
        "decimal128": pa.array([decimal.Decimal(i) for i in ids], type=pa.decimal128(38, 2)),
        "chunked": pa.chunked_array([pa.array(texts[:2]), pa.array(texts[2:])]),
        "python mix": [ids[0], texts[1], float(ids[2]), texts[3].encode(), ids[4], texts[5]],
        "numpy objects": np.array([ids[0], texts[1], *ids[2:]], dtype=object),
    }
    for name, values in forms.items():
        assert _one(values) == expected, name
    small = [42, -7, 0]
    for arrow_type in (pa.int8(), pa.int16(), pa.int32(), pa.float16(), pa.float32()):
        assert _one(pa.array(small, type=arrow_type)) == _ref(small), str(arrow_type)
    assert _one(pa.array([42, 0], type=pa.uint64())) == _ref([42, 0])
    assert _one(pa.array([42.0, -7.0, -0.0])) == _ref(small)  # whole floats, -0.0 is 0
    assert _one(np.array([42.0, 2.0**62])) == _ref([42, 2**62])


def test_number_forms_of_one_integer_are_one_unit() -> None:
    # issue 22: pandas writes an int column holding a null as floats, so one export says 12
    # and the next "12.0"; spreadsheets drop zeros and write exponents. One person, one unit.
    twelve = _ref([12])[0]
    forms = ["12", "12.0", " 12 ", "+12", "012", "12.000", "12.", "1.2e1", "1.2E+1", "120e-1"]
    forms += ["\t+0012.00\n", "\u00a012\u2003", "0000000000000000000000012"]
    assert _one(pa.array(forms)) == [twelve] * len(forms)
    assert _one(forms) == [twelve] * len(forms)  # Python values, one by one
    assert _one([f.encode() for f in forms]) == [twelve] * len(forms)
    assert _one(pa.array(forms).dictionary_encode()) == [twelve] * len(forms)
    assert _one(pa.array(forms, type=pa.large_string())) == [twelve] * len(forms)
    assert _one(["-12.0", " -012 ", "-1.2e1"]) == _ref([-12, -12, -12])
    assert _one(["-0", "+0", "0.0", ".0", "00", "0e5"]) == _ref([0] * 6)
    # the same holds for any other integer, and different numbers stay apart
    assert _one(["9223372036854775807.0", "-9.223372036854775808e18"]) == _ref(
        [2**63 - 1, -(2**63)]
    )
    assert len(set(_one(["12", "13", "120", "1.2", "12.5", "-12"]))) == 6
    # beyond 2**53 a float parse would round: these are read exactly
    big = [2**53 + 1, -(10**18) + 1, 2**63 - 1]
    assert _one([f"{b}.0" for b in big] + ["+" + "0" * 40 + str(2**53 + 1) + "."]) == _ref(
        [*big, 2**53 + 1]
    )


def test_numbers_that_are_not_whole_are_their_shortest_decimal() -> None:
    half = _one(["12.5"])[0]
    assert _one(["12.50", "+12.5", " 012.5 ", "1.25e1", "125e-1"]) == [half] * 5
    assert unit_identity("-.050") == "-0.05" and unit_identity("1e-3") == "0.001"
    assert _one(pa.array([12.5])) == [None]  # a fractional float is still no identifier


def test_composed_and_decomposed_text_are_one_unit() -> None:
    composed, decomposed = "Ren\u00e9e", "Rene\u0301e"  # NFC and NFD of one name
    assert composed != decomposed
    assert _one(pa.array([composed, decomposed])) == [_one([composed])[0]] * 2
    assert unit_identity(composed) == unit_identity(decomposed) == "rene\u0301e"  # NFD


def test_case_and_surrounding_white_space_are_one_unit() -> None:
    ids = [
        "Alice@Example.com",
        "alice@example.com",
        "  ALICE@EXAMPLE.COM\t",
        "\u00a0alice@example.com",
    ]
    assert len(set(_one(pa.array(ids)))) == 1
    uuid_upper = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"
    assert _one([uuid_upper]) == _one([uuid_upper.lower()])
    assert _one(["\u00c9MILE"]) == _one(["e\u0301mile"])  # case after composition
    # inner white space is kept, and compatibility forms (NFKC) are other characters
    assert len(set(_one(["a b", "ab", "a  b", "\uff11\uff12", "12"]))) == 5


def test_blank_text_is_no_identifier() -> None:
    assert _one(pa.array(["", " ", "\t\n", "x"])) == [None, None, None, _one(["x"])[0]]
    assert unit_identity("  ") is None
    with pytest.raises(TypeError, match="not blank"):
        stable_hash64(pa.array(["a", " "]))


def test_exact_rule_takes_text_as_it_is() -> None:
    forty_two = _ref([42])[0]

    def exact(values: Any) -> list[int | None]:
        hashes, bad = canonical_hash64(values, "exact")
        return [None if b else int(h) for h, b in zip(hashes.tolist(), bad.tolist(), strict=True)]

    variants = ["042", " 42", "42 ", "42.0", "+42", "4.2e1", "\uff14\uff12", "ABC", "abc", ""]
    hashes = exact(pa.array(variants))
    assert forty_two not in hashes and len(set(hashes)) == len(variants)
    assert exact(["42", 42, 42.0, b"42"]) == [forty_two] * 4  # the type rule still holds
    assert exact(["-0"])[0] != _ref([0])[0] and exact(["00"])[0] != _ref([0])[0]
    assert exact(pa.array(variants).dictionary_encode()) == hashes
    assert exact([v.encode() for v in variants]) == hashes
    assert [unit_identity(v, "exact") for v in ("042", "ABC", 42.0)] == ["042", "ABC", "42"]
    with pytest.raises(ValueError, match="'unit_ids' must be one of"):
        canonical_hash64(["a"], "loose")  # type: ignore[arg-type]


def test_long_numbers_stay_text_and_cost_no_huge_integer() -> None:
    assert unit_identity("1e400") == "1e400"  # 401 digits: over MAX_NUMBER_CHARS, text
    assert unit_identity("1e399") == "1" + "0" * 399
    assert unit_identity("1e999999999999") == "1e999999999999"
    assert unit_identity("0e999999999999") == "0"
    assert unit_identity("1" + "0" * 30) == unit_identity("1e30") == str(10**30)
    assert _one(["1e30"]) == _one([10**30]) == _one([decimal.Decimal(10**30)])


def test_integers_beyond_int64_are_named_by_their_decimal_text() -> None:
    big = [2**63, 2**64 - 1]
    as_text = _one(pa.array([str(b) for b in big]))
    assert _one(pa.array(big, type=pa.uint64())) == as_text
    assert _one(big) == as_text  # Python ints
    assert _one(pa.array([decimal.Decimal(b) for b in big], type=pa.decimal128(38, 0))) == as_text
    huge = 10**30
    assert _one([huge]) == _one([str(huge)]) == _one([decimal.Decimal(huge)])
    # the int64 range ends where it should: 2**63 - 1 is an integer, -2**63 - 1 is text
    assert _one(["9223372036854775807"]) == _ref([2**63 - 1])
    assert _one(["-9223372036854775808"]) == _ref([-(2**63)])
    assert _one(["-9223372036854775809"]) == _one([-(2**63) - 1])
    assert None not in _one(["-9223372036854775809", "9999999999999999999"])


def test_bad_identifiers_are_flagged_row_by_row() -> None:
    assert _one(pa.array([1.5, math.nan, math.inf, -math.inf, 1e19, 3.0])) == [
        None,
        None,
        None,
        None,
        None,  # a whole float beyond int64: bad, like canonical_id_text says
        _ref([3])[0],
    ]
    assert _one(pa.array([True, False])) == [None, None]
    assert _one(pa.array([b"\xff\xfe", b"ok", None])) == [None, _one(["ok"])[0], None]
    assert _one(pa.array(["a", None, " "])) == [_one(["a"])[0], None, None]
    assert _one(pa.array([decimal.Decimal("1.5"), decimal.Decimal("2")])) == [None, _ref([2])[0]]
    assert _one(pa.array([datetime.date(2020, 1, 1)])) == [None]
    assert _one(pa.array([[1, 2]])) == [None]
    assert _one(pa.array([None, None])) == [None, None]
    assert _one(np.array([True])) == [None]
    assert _one([True, 1, 2.5, None, "x"]) == [None, _ref([1])[0], None, None, _one(["x"])[0]]
    with pytest.raises(ValueError, match="must not be null"):
        stable_hash64(["a", None])
    with pytest.raises(TypeError, match="integers or strings"):
        stable_hash64(pa.array([1.5, 2.0]))


@st.composite
def _number_text(draw: st.DrawFn, number: int) -> str:
    """``number`` written as an exporter might: sign, leading zeros, point, exponent, padding."""
    digits = str(abs(number))
    sign = "-" if number < 0 else draw(st.sampled_from(["", "+"]))
    if number == 0:
        sign = draw(st.sampled_from(["", "+", "-"]))
    if draw(st.booleans()):  # d.ddd e(k): the point moved left, k added to the exponent
        shift = draw(st.integers(0, len(digits) - 1))
        head, tail = digits[: len(digits) - shift], digits[len(digits) - shift :]
        body = f"{head}.{tail}" if tail else head
        body += draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+"])) + str(shift)
    else:
        body = digits + draw(st.sampled_from(["", ".", ".0", ".000"]))
    zeros = "0" * draw(st.integers(0, 3))
    pad = st.sampled_from(["", " ", "\t", "\u00a0", "  "])
    return draw(pad) + sign + zeros + body + draw(pad)


def _case_partners(char: str) -> list[str]:
    """``char`` and the one-character forms the rule lowers to the same character (its
    simple case mapping; ``"ß"`` and ``"SS"`` are not partners)."""
    forms = {char, char.upper(), char.lower(), char.title()}
    return sorted(f for f in forms if len(f) == 1 and f.lower() == char.lower())


@st.composite
def _text_variant(draw: st.DrawFn, text: str) -> str:
    """``text`` in another case, Unicode form and padding."""
    form = draw(st.sampled_from(["NFC", "NFD"]))
    cased = "".join(draw(st.sampled_from(_case_partners(c))) for c in text)
    pad = st.sampled_from(["", " ", "\n", "\u2003"])
    return draw(pad) + unicodedata.normalize(form, cased) + draw(pad)


@st.composite
def _forms_of_one_unit(draw: st.DrawFn) -> list[Any]:
    """Several forms of one unit: an integer in every type, or a text id in several forms."""
    if draw(st.booleans()):
        number = draw(st.integers(-(2**70), 2**70) | st.integers(-1000, 1000))
        forms: list[Any] = [number, decimal.Decimal(number), str(number).encode()]
        if abs(number) < 2**53:
            forms.append(float(number))
        forms += draw(st.lists(_number_text(number), min_size=1, max_size=4))
        return forms
    alphabet = st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S"))
    text = draw(st.text(alphabet=alphabet, min_size=1, max_size=6))
    return [text, *draw(st.lists(_text_variant(text), min_size=1, max_size=4))]


VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-50, 50),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-1000, 1000).map(float),
    st.text(max_size=6),
    st.integers(-100, 100).map(str),
    st.integers(-100, 100).flatmap(_number_text),
    st.text(max_size=4).flatmap(_text_variant),
    st.binary(max_size=4),
    st.integers(0, 100).map(lambda i: str(i).encode()),
    st.booleans(),
    st.none(),
    st.integers(-(10**25), 10**25).map(decimal.Decimal),
)


@settings(deadline=None, max_examples=100)
@given(values=st.lists(VALUES, min_size=1, max_size=12))
def test_a_rows_identity_does_not_depend_on_its_batch(values: list[Any]) -> None:
    # row-wise: each value alone, and the values together, get the same hashes and flags
    together = _one(values)
    assert together == [_one([v])[0] for v in values]
    assert _one(pa.array([canonical_id_text(v) for v in values], type=pa.string())) == together


def _natural(value: Any) -> pa.Array:
    """``value`` in its natural Arrow type."""
    if isinstance(value, bool):
        return pa.array([value], type=pa.bool_())
    if isinstance(value, int):
        arrow_type = pa.uint64() if 2**63 <= value < 2**64 else pa.int64()
        if value >= 2**64 or value < -(2**63):
            return pa.array([decimal.Decimal(value)], type=pa.decimal128(38, 0))
        return pa.array([value], type=arrow_type)
    if isinstance(value, float):
        return pa.array([value], type=pa.float64())
    if isinstance(value, str):
        return pa.array([value], type=pa.string())
    if isinstance(value, decimal.Decimal):
        return pa.array([value], type=pa.decimal256(76, 0))
    return pa.array([value], type=pa.binary())


@settings(deadline=None, max_examples=300)
@given(first=_forms_of_one_unit(), second=_forms_of_one_unit())
def test_one_unit_exactly_when_one_hash(first: list[Any], second: list[Any]) -> None:
    # The property the identity rule promises: same unit <=> same hash, for ints, floats,
    # decimals and text variants, whatever the container; and unit_identity (one value at a
    # time) agrees with the vectorised hash.
    values = first + second
    identities = [unit_identity(v) for v in values]
    assert len(set(identities[: len(first)])) == 1  # the forms of one unit are one unit
    natural = [_one(_natural(v))[0] for v in values]
    mixed = _one(values)
    assert natural == mixed
    for i, a in enumerate(values):
        assert (identities[i] is None) == (mixed[i] is None), a
        for j in range(i):
            assert (identities[i] == identities[j]) == (mixed[i] == mixed[j]), (a, values[j])


@settings(deadline=None, max_examples=200)
@given(
    value=st.one_of(
        st.integers(-(2**63), 2**64 - 1),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(2**53), 2**53).map(float),
        st.text(max_size=8),
        st.integers().map(str),
        st.integers(-(10**6), 10**6).flatmap(_number_text),
        st.binary(max_size=8),
        st.text(max_size=8).map(str.encode),
        st.booleans(),
    ),
    unit_ids=st.sampled_from(["normalize", "exact"]),
)
def test_canonical_id_text_hashes_as_the_value_in_its_natural_type(
    value: Any, unit_ids: Any
) -> None:
    natural = canonical_hash64(_natural(value), unit_ids)
    text = canonical_id_text(value)
    if text is None:
        assert natural[1].tolist() == [True]
        assert unit_identity(value, unit_ids) is None
        return
    as_text = canonical_hash64(pa.array([text]), unit_ids)
    assert as_text[1].tolist() == natural[1].tolist()
    if not natural[1][0]:
        assert as_text[0].tolist() == natural[0].tolist()
    # the unit's own text names the same unit (the rule is idempotent)
    identity = unit_identity(value, unit_ids)
    assert (identity is None) == bool(natural[1][0])
    if identity is not None:
        assert canonical_hash64(pa.array([identity]), unit_ids)[0].tolist() == natural[0].tolist()


def test_canonical_id_text_rules() -> None:
    assert canonical_id_text(42) == "42"
    assert canonical_id_text(np.uint64(2**64 - 1)) == str(2**64 - 1)
    assert canonical_id_text(42.0) == "42" and canonical_id_text(-0.0) == "0"
    assert canonical_id_text(np.float32(3.0)) == "3"
    assert canonical_id_text(decimal.Decimal("42.00")) == "42"
    assert canonical_id_text("042") == "042" and canonical_id_text(b"abc") == "abc"
    for bad in (None, True, np.bool_(False), 1.5, math.nan, math.inf, 1e19, b"\xff", [1], {}):
        assert canonical_id_text(bad) is None, bad
    assert canonical_id_text("\ud800") is None  # no UTF-8 form: a bad identifier
    assert _one(["\ud800", "ok"]) == [None, _one(["ok"])[0]]
    assert canonical_id_text(decimal.Decimal("1.5")) is None
    assert canonical_id_text(decimal.Decimal("NaN")) is None


# --- the property the issue asks for: batches, shards and types never change the kept rows


FORMS = ("int64", "string", "large_string", "dictionary", "float64", "mixed")


def _render(units: list[int], form: str, mix: list[bool]) -> Any:
    if form == "int64":
        return pa.array(units, type=pa.int64())
    if form == "float64":
        return pa.array([float(u) for u in units], type=pa.float64())
    texts = [str(u) for u in units]
    if form == "string":
        return pa.array(texts)
    if form == "large_string":
        return pa.array(texts, type=pa.large_string())
    if form == "dictionary":
        return pa.array(texts).dictionary_encode()
    # Python values of mixed types in one field, as a list of dicts would give them
    return [t if as_text else u for u, t, as_text in zip(units, texts, mix, strict=True)]


def _kept(batch: dict[str, np.ndarray]) -> Counter[tuple[int, float]]:
    return Counter(zip(batch[UNIT].tolist(), batch[VALUE].tolist(), strict=True))


@settings(deadline=None, max_examples=120)
@given(
    data=st.data(),
    rows=st.lists(st.tuples(st.integers(-3, 5), st.integers(0, 4)), min_size=1, max_size=60),
    bound=st.integers(1, 3),
    num_shards=st.integers(1, 3),
    salt=st.integers(0, 2**64 - 1),
)
def test_any_split_into_batches_and_types_keeps_the_same_rows(
    data: st.DataObject,
    rows: list[tuple[int, int]],
    bound: int,
    num_shards: int,
    salt: int,
) -> None:
    bounds = ContributionBounds(max_contributions_per_unit=bound)
    units = [u for u, _ in rows]
    values = [float(v) for _, v in rows]
    whole = encode_batch(
        {"user": pa.array(units, type=pa.int64()), "x": values},
        unit_column="user",
        value_column="x",
    )
    expected = _kept(bound_rows(whole, bounds, salt))

    cuts = sorted(
        data.draw(st.sets(st.integers(1, len(rows) - 1) if len(rows) > 1 else st.nothing()))
    )
    order = data.draw(st.permutations(range(len(rows))))
    edges = [0, *cuts, len(rows)]
    encoded = []
    for start, end in itertools.pairwise(edges):
        part = order[start:end]
        form = data.draw(st.sampled_from(FORMS))
        mix = data.draw(st.lists(st.booleans(), min_size=len(part), max_size=len(part)))
        column = _render([units[i] for i in part], form, mix)
        part_values = [values[i] for i in part]
        if form == "mixed":
            batch: Any = [{"user": u, "x": v} for u, v in zip(column, part_values, strict=True)]
        else:
            batch = pa.table({"user": column, "x": part_values})
        encoded.append(encode_batch(batch, unit_column="user", value_column="x"))
    # as the Beam layer does: rows go to shards by unit hash, each shard is concatenated
    # (batches in any order) and bounded
    kept: Counter[tuple[int, float]] = Counter()
    shard_order = data.draw(st.permutations(range(len(encoded))))
    for shard in range(num_shards):
        pieces = [
            take(encoded[i], encoded[i][UNIT] % np.uint64(num_shards) == np.uint64(shard))
            for i in shard_order
        ]
        kept += _kept(bound_rows(concat_batches(pieces), bounds, salt))
    assert kept == expected
