"""One canonical identity per privacy unit, hashed to a stable 64-bit value, vectorised.

**The canonical identity.** Bounding protects a *person*, so the same person must be one unit
whatever the Arrow type, the batch, the file, the format or the exporter their id arrives
through. Merging two people into one unit only costs utility (their rows share one bound);
splitting one person into two units costs privacy (their rows count twice against the bound,
up to twice the ε for them). So the rule errs toward merging. It looks at each value alone
(never at the other rows of its batch, so no one's data can change how another's id is read).

* **Types.** An integer id and its decimal text are one unit: ``42``, ``"42"``, int8 to
  uint64, a dictionary-encoded column, a decimal with an integral value (``42.00``) and a
  float that is a whole number in the int64 range (``42.0``) are all the unit ``42``.
  Integers outside the int64 range (uint64 above 2**63 - 1, larger decimals, Python ints)
  are the unit named by their decimal text, so ``2**64`` and ``"18446744073709551616"`` agree.
  Binary that is valid UTF-8 is its text (``b"abc"`` is ``"abc"``, ``b"42"`` is ``42``).
* **Text** (``unit_ids="normalize"``, the default) is put in one form, in this order: Unicode
  canonical decomposition (NFD); lower case (Unicode's simple case mapping, code point by
  code point, as ``pyarrow.compute.utf8_lower`` applies it); surrounding white space
  stripped (Unicode White_Space); NFD again. Then text that reads as a decimal number
  (ASCII digits, an optional sign, point and exponent: ``[+-]?(d+[.d*]|.d+)(e[+-]?d+)?``)
  is that number: a whole number is that integer, so ``"12"``, ``"12.0"``, ``" 12 "``,
  ``"+12"``, ``"012"``, ``"12.000"``, ``"1.2e1"`` and ``"1.2E1"`` are all the unit ``12``
  (and ``"-0"`` is ``0``); any other number is its shortest exact decimal text
  (``"12.50"``, ``"+12.5"`` and ``"1.25e1"`` are the unit ``"12.5"``). A number whose text
  would be longer than :data:`MAX_NUMBER_CHARS` characters stays text.

  Each choice, by the argument above:

  - *Number forms* (``12.0``, ``+12``, ``1.2e1``): pandas writes an integer column that holds
    a null as floats (``12.0``), spreadsheets write large numbers with an exponent. Reading
    them as the number merges what an exporter split; two ids that are the same number
    written two ways are merged.
  - *Leading zeros*: merged (``"012"`` is ``12``). Spreadsheets and every reader that infers
    a numeric column drop them, so the same person is ``"012"`` in one export and ``12`` in
    the next; zero-padded codes that differ only in padding are merged (utility only).
  - *Case*: merged (``"ABC"`` is ``"abc"``). Systems disagree on the case of the same id
    (e-mail addresses, hexadecimal UUIDs: upper case in some databases, lower case in
    others); case-sensitive ids that differ only in case are merged (utility only).
  - *White space*: surrounding white space is stripped (fixed-width exports pad), inner
    white space is kept (no exporter changes it).
  - *Unicode*: canonically equivalent text is one unit, so a composed and a decomposed
    ``"é"`` (the same text by Unicode's definition, which keyboards, file systems and
    exporters produce either way) are one unit. NFC and NFD identify exactly the same
    strings; the rule uses NFD because pyarrow 25's ``utf8_normalize`` returns the
    decomposed form whatever form is asked, and asking for NFD keeps the rule fixed when
    that is mended. Compatibility forms (NFKC: full-width digits, ligatures, superscripts)
    are different characters a person typed, not a form an exporter produces, and are kept
    apart. The Unicode tables are pyarrow's (utf8proc): every worker of a pipeline runs the
    same pyarrow, as it runs the same beam_dp.
* **Text as given** (``unit_ids="exact"``, the opt-out for operators whose ids are already
  canonical, e.g. case-sensitive tokens): only the type rule above. Canonical decimal text
  (an optional ``-`` and digits without leading zeros, ``"0"``, ``"42"``, ``"-7"``) is the
  integer; any other text is taken byte for byte (``"042"``, ``" 42"``, ``"42.0"``,
  ``"ABC"`` and ``"abc"`` are five units).
* **Bad identifiers** (a bad record, which ``encode_batch`` handles by ``on_bad_record``):
  nulls; blank text (empty after stripping, under ``"normalize"``: a CSV writes a missing id
  as an empty field); floats that are not whole numbers, NaN, ±inf and whole floats outside
  the int64 range; booleans; binary that is not valid UTF-8; and every other type (temporal,
  nested, null-typed). For a row-wise rule, each value is judged alone.

:func:`unit_identity` gives a value's unit as text: two values are one unit exactly when
their unit identities are equal, and then :func:`canonical_hash64` gives them one hash.
:func:`canonical_id_text` only turns a Python value into text by its type (whole numbers into
their integer text, text kept as it is), for readers that must turn a column of mixed Python
values into one Arrow type: hashing its result as a string gives the same hash as the value
in its natural Arrow type, under either rule (the text rule applies when text is hashed).

**The hash.** Python's built-in string hash is salted per process, so two workers would
disagree about which shard a unit belongs to and a unit's records could escape its
contribution bound. This hash depends only on the canonical identity: the same on every
worker, process, machine and run. Integers in the int64 range are mixed with SplitMix64's
finaliser; all other identities are hashed from the UTF-8 bytes of their canonical text with
a polynomial over the integers mod 2**64, computed for all strings of an Arrow array at once
(one numpy pass per byte position), then mixed. The text rule is a handful of Arrow compute
kernels over the whole column, each skipped when a scan of the column's bytes shows it would
change nothing (no upper-case ASCII letter, no white space at either end, no byte above
0x7f); only numbers with a point, an exponent or more than 18 digits are read one by one.
It is not a cryptographic hash: two identifiers that collide are treated as one unit, whose
*combined* contributions are bounded, so a collision can only lose utility, never privacy.
"""

from __future__ import annotations

import decimal
import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MAX_NUMBER_CHARS",
    "UNIT_ID_RULES",
    "UnitIds",
    "canonical_hash64",
    "canonical_id_text",
    "check_unit_ids",
    "stable_hash64",
    "unit_identity",
]

#: How text ids are read: ``"normalize"`` (the identity rule, the default) or ``"exact"``.
UnitIds = Literal["normalize", "exact"]
UNIT_ID_RULES: tuple[UnitIds, ...] = ("normalize", "exact")
#: The longest canonical text of a number read as a number; a longer one stays text (so that
#: an exponent such as ``1e999999999`` never builds a huge integer).
MAX_NUMBER_CHARS = 400

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)  # FNV prime: odd, so multiplication is invertible mod 2**64

_INT64_MIN = -(2**63)
_INT64_END = 2**63  # first integer above the int64 range
# Canonical decimal text of at most 19 digits (every one of up to 18 digits fits int64).
_CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,18})$"
_MINUS, _ZERO, _NINE = ord("-"), ord("0"), ord("9")
# A number after the text rule (lower case, stripped): sign, digits, point, exponent.
_NUMBER = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)(e[+-]?[0-9]+)?$"
# The plain forms of a whole number of at most 18 significant digits: sign, leading zeros,
# digits, and a point with nothing or zeros after it.
_PLAIN_WHOLE = r"^[+-]?0*[0-9]{1,18}([.]0*)?$"
_FIRST_OF_NUMBER = np.zeros(256, dtype=bool)
_FIRST_OF_NUMBER[[ord(c) for c in "+-.0123456789"]] = True
_LAST_OF_NUMBER = np.zeros(256, dtype=bool)
_LAST_OF_NUMBER[[ord(c) for c in ".0123456789"]] = True
_IN_NUMBER = np.zeros(256, dtype=bool)
_IN_NUMBER[[ord(c) for c in "+-.0123456789e"]] = True


def _ascii_trimmed() -> npt.NDArray[np.bool_]:
    """The ASCII bytes that ``utf8_trim_whitespace`` strips, asked of the kernel itself (so
    the scan that decides whether to call it can never disagree with it)."""
    stripped = pc.utf8_trim_whitespace(pa.array([chr(c) for c in range(128)])).to_pylist()
    table = np.zeros(256, dtype=bool)
    table[[c for c in range(128) if stripped[c] == ""]] = True
    return table


_ASCII_SPACE = _ascii_trimmed()

U64 = npt.NDArray[np.uint64]
Mask = npt.NDArray[np.bool_]


def check_unit_ids(unit_ids: object) -> UnitIds:
    """Validate the identity rule's name (``"normalize"`` or ``"exact"``)."""
    if unit_ids not in UNIT_ID_RULES:
        raise ValueError(
            f"'unit_ids' must be one of {list(UNIT_ID_RULES)} ('normalize': one person is one "
            "unit whatever the text form of their id; 'exact': ids are already canonical); "
            f"received {unit_ids!r}"
        )
    return unit_ids


def _mix(x: U64) -> U64:
    """SplitMix64 finaliser: a bijection of uint64 with good avalanche."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN  # the one new array; the steps below work in place
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
        return z


def canonical_id_text(value: Any) -> str | None:
    """One identifier as text, by its type only, or ``None`` for a bad identifier.

    For readers that build one Arrow column from Python values of mixed types: a column of
    these strings hashes, row by row, exactly as each value does in its natural Arrow type,
    under either identity rule (the text rule is applied when text is hashed; see the module
    docstring). Text is kept as it is, so labels read through it keep their case; the unit a
    value names is :func:`unit_identity`.

    Args:
        value: a Python or numpy scalar.

    Returns:
        ``str(int)`` for integers, integral decimals and whole floats in the int64 range; the
        text itself for ``str`` (``None`` if it has no UTF-8 form: a lone surrogate); the
        decoded text for bytes that are valid UTF-8; ``None`` for nulls and every bad
        identifier (so that it becomes a null, which is a bad record).
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return _int_text(int(value))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isfinite(number) and number.is_integer() and _INT64_MIN <= number < _INT64_END:
            return str(int(number))
        return None
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return _int_text(int(value))
        return None
    if isinstance(value, str):
        return value if value.isascii() or _is_utf8(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _int_text(number: int) -> str | None:
    """``str(number)``, or None past Python's limit on integer-to-text conversion."""
    try:
        return str(number)
    except ValueError:
        return None


def unit_identity(value: Any, unit_ids: UnitIds = "normalize") -> str | None:
    """The unit a value names, as text, or ``None`` for a bad identifier.

    Two values are one privacy unit exactly when their unit identities are equal, and then
    :func:`canonical_hash64` gives them one hash (it applies the same rule, vectorised; see
    the module docstring). Slow (one value at a time): for tests, checks and messages to the
    operator, never the data path.

    Args:
        value: a Python or numpy scalar.
        unit_ids: the identity rule, ``"normalize"`` (default) or ``"exact"``.
    """
    rule = check_unit_ids(unit_ids)
    text = canonical_id_text(value)
    if text is None or rule == "exact":
        return text
    units = _TextUnits.read(pa.array([text], type=pa.string()))
    if units.bad[0]:
        return None
    if units.as_int[0]:
        return str(int(units.ints[0]))
    if 0 in units.special:
        return units.special[0]
    text_form: str = units.text[0].as_py()
    return text_form


def _is_utf8(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form (a lone surrogate, from JSON's ``"\\ud800"``, has not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _offsets_and_data(array: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Start offsets (n + 1, absolute in ``data``) and the data bytes of a binary array."""
    offset_type: Any = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[
        array.offset : array.offset + len(array) + 1
    ].astype(np.int64)
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    return offsets, data


def _as_binary(array: pa.Array) -> pa.Array:
    if pa.types.is_large_string(array.type):
        return array.cast(pa.large_binary())
    if pa.types.is_string(array.type):
        return array.cast(pa.binary())
    return array


def _hash_bytes(
    array: pa.Array,
    layout: tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]] | None = None,
) -> U64:
    """Hash every value of a string/binary Arrow array from its bytes (nulls: arbitrary);
    ``layout`` is the array's :func:`_offsets_and_data` when the caller has it already."""
    offsets, data = _offsets_and_data(_as_binary(array)) if layout is None else layout
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    # Horner's rule over byte positions: one vectorised pass per position, all strings at once.
    sums = np.zeros(lengths.size, dtype=np.uint64)
    max_len = int(lengths.max()) if lengths.size else 0
    min_len = int(lengths.min()) if lengths.size else 0
    everyone = np.arange(lengths.size)
    with np.errstate(over="ignore"):
        for position in range(max_len):
            lanes = everyone if position < min_len else np.flatnonzero(lengths > position)
            byte = data[starts[lanes] + position].astype(np.uint64) + np.uint64(1)
            sums[lanes] = sums[lanes] * _POLY + byte
        return _mix(sums ^ (lengths.astype(np.uint64) * _GOLDEN))


def _null_mask(array: pa.Array) -> Mask:
    if not array.null_count:
        return np.zeros(len(array), dtype=bool)
    mask: Mask = array.is_null().to_numpy(zero_copy_only=False)
    return mask


def _int64_text_mask(array: pa.Array) -> Mask:
    """Rows of a string array holding canonical decimal text of an int64 (nulls: False)."""
    n = len(array)
    offsets, data = _offsets_and_data(_as_binary(array))
    lengths = np.diff(offsets)
    first = np.zeros(n, dtype=np.uint8)
    filled = lengths > 0
    first[filled] = data[offsets[:-1][filled]]
    # cheap prefilter: only text that starts with '-' or a digit can be canonical decimal
    maybe = filled & ((first == _MINUS) | ((first >= _ZERO) & (first <= _NINE)))
    if not maybe.any():
        return np.zeros(n, dtype=bool)
    matched = pc.fill_null(pc.match_substring_regex(array, _CANONICAL_INT), False)
    mask: Mask = np.asarray(matched.to_numpy(zero_copy_only=False), dtype=bool).copy()
    digits = lengths - (first == _MINUS)
    for row in np.flatnonzero(mask & (digits == 19)):  # 19 digits: rare, may exceed int64
        if not _INT64_MIN <= int(array[int(row)].as_py()) < _INT64_END:
            mask[row] = False
    return mask


def _hash_exact_text(array: pa.Array) -> tuple[U64, Mask]:
    """``unit_ids="exact"``: canonical int64 text as the integer, everything else by its bytes."""
    bad = _null_mask(array)
    as_int = _int64_text_mask(array) & ~bad
    if not as_int.any():
        return _hash_bytes(array), bad
    hashes = np.zeros(len(array), dtype=np.uint64)
    int_rows = pa.array(as_int)
    numbers = pc.cast(pc.if_else(int_rows, array, pa.scalar("0", array.type)), pa.int64())
    hashes[as_int] = _mix(numbers.to_numpy(zero_copy_only=False)[as_int].view(np.uint64))
    rest = ~as_int & ~bad
    if rest.any():
        hashes[rest] = _hash_bytes(array.filter(pa.array(rest)))
    return hashes, bad


# --- the text rule ("normalize"), vectorised -------------------------------------------------


Layout = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]


def _normal_text(array: pa.Array) -> tuple[pa.Array, Layout]:
    """NFD, lower case, surrounding white space stripped, NFD: each kernel only where needed.

    Returns the text and its :func:`_offsets_and_data`. Rows of ASCII text take the ASCII
    kernels (the same result as the Unicode ones on ASCII), the others the Unicode ones; a
    scan decides only whether the stripping kernel runs (it would change nothing where it is
    skipped), so a row's text never depends on its batch.
    """
    layout = _offsets_and_data(_as_binary(array))
    offsets, data = layout
    used = data[int(offsets[0]) : int(offsets[-1])]
    if used.size == 0:
        return array, layout
    lowered = pc.ascii_lower(array)  # cheaper than a scan for capitals
    if int(used.max()) >= 0x80:  # some text beyond ASCII: the Unicode rule on those rows
        unicode_rows = pc.invert(pc.fill_null(pc.string_is_ascii(array), True))
        text = pc.utf8_normalize(array.filter(unicode_rows), form="NFD")
        text = pc.utf8_trim_whitespace(pc.utf8_lower(text))
        text = pc.utf8_normalize(text, form="NFD")
        lowered = pc.replace_with_mask(lowered, unicode_rows, text)
    offsets, data = layout = _offsets_and_data(_as_binary(lowered))
    if data.size == 0:
        return lowered, layout
    # strip if the first or last byte of any row is ASCII white space (the Unicode rows are
    # stripped already; an empty row reads a neighbour's byte: at worst a needless pass)
    ends = np.concatenate(
        [data.take(offsets[:-1], mode="clip"), data.take(offsets[1:] - 1, mode="clip")]
    )
    if _ASCII_SPACE[ends].any():
        lowered = pc.utf8_trim_whitespace(lowered)
        layout = _offsets_and_data(_as_binary(lowered))
    return lowered, layout


def _number_unit(text: str) -> int | str | None:
    """A number's unit: the integer if whole, else its shortest exact decimal text; ``None``
    if its canonical text would be longer than :data:`MAX_NUMBER_CHARS` (it stays text).

    ``text`` matches :data:`_NUMBER` (so ``int`` below never sees more digits than the text
    has, and an exponent is read only when the result can fit the limit).
    """
    mantissa, _, exponent_text = text.partition("e")
    negative = mantissa.startswith("-")
    mantissa = mantissa.lstrip("+-")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    stripped = digits.rstrip("0")
    # value = digits[:len(stripped)] * 10**scale
    scale = len(digits) - len(stripped) - len(fraction)
    exponent_digits = exponent_text.lstrip("+-").lstrip("0")
    if len(exponent_digits) > 6:  # |exponent| >= 10**6: far beyond the limit either way
        return None
    exponent = int(exponent_digits or "0")
    scale += -exponent if exponent_text.startswith("-") else exponent
    sign = "-" if negative else ""
    if scale >= 0:
        if len(sign) + len(stripped) + scale > MAX_NUMBER_CHARS:
            return None
        return int(sign + stripped + "0" * scale)
    places = -scale
    if places >= len(stripped):
        shown = "0." + "0" * (places - len(stripped)) + stripped
    else:
        shown = stripped[:-places] + "." + stripped[-places:]
    if len(sign) + len(shown) > MAX_NUMBER_CHARS:
        return None
    return sign + shown


def _maybe_numbers(
    offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]
) -> Mask:
    """Rows that may be a number: a cheap, exact prefilter (a number passes it).

    A number starts with a sign, a point or a digit, ends with a point or a digit, and holds
    only digits, signs, points and ``e``: a few byte positions of each row are checked
    (first, last, and five inside), so a column of ids with letters rarely reaches the
    regular expressions.
    """
    top = data.size - 1
    starts = np.minimum(offsets[:-1], top)  # an empty row at the end points past the data
    last = np.maximum(lengths - 1, 0)
    maybe: Mask = _FIRST_OF_NUMBER[data[starts]] & _LAST_OF_NUMBER[data[starts + last]]
    rows = np.flatnonzero(maybe)  # most id columns: few or none
    if rows.size:
        inside = np.ones(rows.size, dtype=bool)
        row_starts, row_last = starts[rows], last[rows]
        for numerator, denominator in ((1, 2), (1, 4), (3, 4), (1, 8), (7, 8)):
            inside &= _IN_NUMBER[data[row_starts + row_last * numerator // denominator]]
        maybe[rows] = inside
    return maybe


class _TextUnits:
    """The units of a column of text under the ``"normalize"`` rule (see the module docstring).

    Attributes:
        text: the text after the text rule (NFD, lower case, stripped), nulls kept.
        layout: the offsets and bytes of ``text``.
        bad: nulls and blank text.
        as_int: rows that are an integer in the int64 range, whose values are in ``ints``.
        special: other numbers: row -> the canonical text of the number (an integer beyond
            int64, or the shortest decimal of a number that is not whole).
        rest: rows hashed by the bytes of ``text``.
    """

    __slots__ = ("as_int", "bad", "ints", "layout", "rest", "special", "text")

    def __init__(
        self,
        text: pa.Array,
        layout: Layout,
        bad: Mask,
        as_int: Mask,
        ints: npt.NDArray[np.int64],
        special: dict[int, str],
    ) -> None:
        self.text = text
        self.layout = layout
        self.bad = bad
        self.as_int = as_int
        self.ints = ints
        self.special = special
        rest = ~bad & ~as_int
        if special:
            rest[list(special)] = False
        self.rest = rest

    @classmethod
    def read(cls, array: pa.Array) -> _TextUnits:
        """Apply the text rule to a string array and read its numbers."""
        text, layout = _normal_text(array)
        offsets, data = layout
        lengths = np.diff(offsets)
        n = len(text)
        bad = _null_mask(text) | (lengths == 0)
        as_int = np.zeros(n, dtype=bool)
        ints = np.zeros(n, dtype=np.int64)
        special: dict[int, str] = {}
        filled = ~bad
        maybe = filled & _maybe_numbers(offsets, data, lengths) if filled.any() else filled
        rows = np.flatnonzero(maybe)
        if rows.size:
            subset = text if rows.size == n else text.take(pa.array(rows))
            # 1. digits only, at most 18 of them: one cast (Arrow reads leading zeros)
            short = _flags(pc.ascii_is_decimal(subset)) & (lengths[rows] <= 18)
            if short.any():
                as_int[rows[short]] = True
                ints[rows[short]] = _cast_int64(subset, short)[short]
            # 2. other plain whole numbers ("+12", "12.0", "0012"): one regex, one cast
            others = ~short
            if others.any():
                rest = subset if not short.any() else subset.filter(pa.array(others))
                fits, values = _plain_whole(rest)
                other_rows = rows[others]
                as_int[other_rows[fits]] = True
                ints[other_rows[fits]] = values[fits]
                # 3. exponents, fractions, more than 18 digits: one by one (rare in ids)
                special = _other_numbers(text, other_rows[~fits], as_int, ints)
        return cls(text, layout, bad, as_int, ints, special)

    def hashes(self) -> U64:
        """The hash of every row (arbitrary where ``bad``)."""
        if self.rest.all():
            return _hash_bytes(self.text, self.layout)
        hashes = np.zeros(len(self.text), dtype=np.uint64)
        if self.as_int.any():
            hashes[self.as_int] = _mix(self.ints[self.as_int].view(np.uint64))
        if self.special:
            rows = list(self.special)
            hashes[rows] = _hash_bytes(pa.array([self.special[r] for r in rows], pa.string()))
        if self.rest.any():
            hashes[self.rest] = _hash_bytes(self.text.filter(pa.array(self.rest)))
        return hashes


def _cast_int64(text: pa.Array, rows: Mask) -> npt.NDArray[np.int64]:
    """The digits of ``text`` in ``rows`` as int64 (0 elsewhere): one vectorised cast."""
    chosen = pc.if_else(pa.array(rows), text, pa.scalar("0", text.type))
    values = pc.cast(chosen, pa.int64()).to_numpy(zero_copy_only=False)
    return np.array(values, dtype=np.int64)  # a writable copy


def _flags(mask: pa.Array) -> Mask:
    """A boolean Arrow array as numpy, null as False."""
    flags: Mask = np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
    return flags


def _plain_whole(text: pa.Array) -> tuple[Mask, npt.NDArray[np.int64]]:
    """Which entries are a plain whole number of at most 18 significant digits, and its value
    (sign, leading zeros, digits, and a point with nothing or zeros after it).

    One regular expression without captures (a DFA pass), then Arrow's float parser, which
    rounds correctly: the text is a whole number, so below 2**53 it is parsed exactly; the
    rare larger ones are parsed again as exact decimals.
    """
    fits = _flags(pc.match_substring_regex(text, _PLAIN_WHOLE))
    values = np.zeros(len(text), dtype=np.int64)
    if not fits.any():
        return fits, values
    chosen = text if fits.all() else text.filter(pa.array(fits))
    parsed = np.asarray(pc.cast(chosen, pa.float64()).to_numpy(zero_copy_only=False))
    exact = np.abs(parsed) < 2.0**53
    numbers = np.where(exact, parsed, 0.0).astype(np.int64)
    if not exact.all():
        large = chosen.filter(pa.array(~exact))
        try:
            decimals = pc.cast(pc.cast(large, pa.decimal128(38, 0)), pa.int64())
            numbers[~exact] = decimals.to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. 40 leading zeros
            numbers[~exact] = [int(decimal.Decimal(entry)) for entry in large.to_pylist()]
    values[fits] = numbers
    return fits, values


def _other_numbers(
    text: pa.Array, rows: npt.NDArray[np.intp], as_int: Mask, ints: npt.NDArray[np.int64]
) -> dict[int, str]:
    """Read the numbers among ``rows`` one by one: int64 integers go to ``as_int``/``ints``,
    the canonical text of the other numbers is returned by row."""
    special: dict[int, str] = {}
    if not rows.size:
        return special
    entries = text.take(pa.array(rows))
    numeric = _flags(pc.match_substring_regex(entries, _NUMBER))
    found = entries.filter(pa.array(numeric)).to_pylist()
    for row, entry in zip(rows[numeric].tolist(), found, strict=True):
        unit = _number_unit(entry)
        if isinstance(unit, int) and _INT64_MIN <= unit < _INT64_END:
            as_int[row] = True
            ints[row] = unit
        elif unit is not None:
            special[row] = str(unit)
    return special


def _hash_text(array: pa.Array, unit_ids: UnitIds) -> tuple[U64, Mask]:
    """A string column's hashes and bad rows under the identity rule ``unit_ids``."""
    if unit_ids == "exact":
        return _hash_exact_text(array)
    units = _TextUnits.read(array)
    return units.hashes(), units.bad


def _hash_binary(array: pa.Array, unit_ids: UnitIds) -> tuple[U64, Mask]:
    """Binary column: valid UTF-8 is text (so ``b"42"`` is 42); other bytes are bad."""
    text_type = pa.large_string() if pa.types.is_large_binary(array.type) else pa.string()
    try:
        return _hash_text(array.cast(text_type), unit_ids)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    valid = np.array([canonical_id_text(v) is not None for v in array.to_pylist()], dtype=bool)
    cleaned = pc.if_else(pa.array(valid), array, pa.scalar(b"", array.type))
    hashes, bad = _hash_text(cleaned.cast(text_type), unit_ids)
    return hashes, bad | ~valid


def _hash_texts(texts: list[str | None], unit_ids: UnitIds) -> tuple[U64, Mask]:
    return _hash_text(pa.array(texts, type=pa.string()), unit_ids)


def _hash_integers(array: pa.Array) -> tuple[U64, Mask]:
    bad = _null_mask(array)
    if bad.any():
        array = array.fill_null(0)
    numbers = array.to_numpy(zero_copy_only=False)
    if numbers.dtype == np.uint64 and bool((numbers >= np.uint64(_INT64_END)).any()):
        # above int64: the unit named by its decimal text, as canonical_id_text gives it
        big = numbers >= np.uint64(_INT64_END)
        hashes = np.zeros(numbers.size, dtype=np.uint64)
        hashes[~big] = _mix(numbers[~big].astype(np.int64).view(np.uint64))
        hashes[big] = _hash_bytes(pa.array(numbers[big]).cast(pa.string()))
        return hashes, bad
    return _mix(numbers.astype(np.int64).view(np.uint64)), bad


def _hash_floats(numbers: npt.NDArray[Any]) -> tuple[U64, Mask]:
    values = numbers.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        whole = (
            np.isfinite(values)
            & (np.floor(values) == values)
            & (values >= float(_INT64_MIN))
            & (values < float(_INT64_END))
        )
    integers = np.where(whole, values, 0.0).astype(np.int64)
    return _mix(integers.view(np.uint64)), ~whole


def _hash_decimals(array: pa.Array, unit_ids: UnitIds) -> tuple[U64, Mask]:
    try:  # every value integral and in the int64 range: one vectorised cast
        return _hash_integers(pc.cast(array, pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _hash_texts([canonical_id_text(v) for v in array.to_pylist()], unit_ids)


def canonical_hash64(values: Any, unit_ids: UnitIds = "normalize") -> tuple[U64, Mask]:
    """Hash each identifier's canonical identity, and flag the bad identifiers.

    Row-wise: a row's hash and whether it is bad depend on that row's value only.

    Args:
        values: a pyarrow Array/ChunkedArray, a numpy array, or a sequence of Python values
            (mixed types allowed).
        unit_ids: the identity rule for text, ``"normalize"`` (default) or ``"exact"`` (see
            the module docstring).

    Returns:
        ``(hashes, bad)``: uint64 hashes (arbitrary where ``bad``) and a boolean mask of the
        rows that are not valid identifiers (see the module docstring).
    """
    rule = check_unit_ids(unit_ids)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "iu":
            return _hash_integers(pa.array(values))
        if values.dtype.kind == "f":
            return _hash_floats(values)
        if values.dtype.kind == "b":
            return np.zeros(values.size, np.uint64), np.ones(values.size, dtype=bool)
        values = values.tolist()
    if not isinstance(values, pa.Array):
        # Python values, possibly of mixed types: one text per value, by its type
        return _hash_texts([canonical_id_text(v) for v in values], rule)
    kind = values.type
    if pa.types.is_dictionary(kind):
        hashes, bad = canonical_hash64(values.dictionary, rule)
        indices = values.indices
        missing = _null_mask(indices)
        positions = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.intp)
        return hashes[positions], bad[positions] | missing
    if pa.types.is_integer(kind):
        return _hash_integers(values)
    if pa.types.is_floating(kind):
        return _hash_floats(values.cast(pa.float64()).to_numpy(zero_copy_only=False))
    if pa.types.is_decimal(kind):
        return _hash_decimals(values, rule)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _hash_text(values, rule)
    if pa.types.is_string_view(kind):
        return _hash_text(values.cast(pa.large_string()), rule)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _hash_binary(values, rule)
    if pa.types.is_binary_view(kind) or pa.types.is_fixed_size_binary(kind):
        return _hash_binary(values.cast(pa.large_binary()), rule)
    return np.zeros(len(values), np.uint64), np.ones(len(values), dtype=bool)


def stable_hash64(values: Any, unit_ids: UnitIds = "normalize") -> U64:
    """Return a stable uint64 hash of each identifier's canonical identity.

    Args:
        values: a pyarrow Array/ChunkedArray, a numpy array or a sequence of integers,
            whole floats, strings or bytes (see the module docstring). Nulls and bad
            identifiers are not allowed; :func:`canonical_hash64` flags them instead.
        unit_ids: the identity rule for text, ``"normalize"`` (default) or ``"exact"``.

    Raises:
        ValueError: if there are nulls (the message never shows a value or a count).
        TypeError: for a bad identifier (e.g. a float that is not a whole number, or blank
            text).
    """
    hashes, bad = canonical_hash64(values, unit_ids)
    if bad.any():
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            has_nulls = values.null_count > 0
        else:
            has_nulls = any(value is None for value in values)
        if has_nulls:
            raise ValueError("privacy unit identifiers must not be null; found null(s)")
        raise TypeError(
            "privacy unit identifiers must be integers or strings (not blank; a whole float "
            "counts as an integer); found other values"
        )
    return hashes
