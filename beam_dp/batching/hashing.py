"""One canonical identity per privacy unit, hashed to a stable 64-bit value, vectorised.

**The canonical identity.** Bounding protects a *person*, so the same person must be one unit
whatever the Arrow type, the batch, the file or the format their id arrives in. Every
identifier is put in one canonical form before it is hashed, by a rule that looks at that
value alone (never at the other rows of its batch, so no one's data can change how another's
id is read):

* **Integers.** An integer id and its canonical decimal text are one unit: ``42``, ``"42"``,
  int8 to uint64, a dictionary-encoded column, a decimal with an integral value (``42.00``)
  and a float that is a whole number in the int64 range (``42.0``) are all the unit ``42``.
  Integers outside the int64 range (uint64 above 2**63 - 1, larger decimals, Python ints)
  are the unit named by their decimal text, so ``2**64`` and ``"18446744073709551616"`` agree.
* **Canonical decimal text** is an optional ``-`` and digits without leading zeros (``"0"``,
  ``"42"``, ``"-7"``). Any other text is taken verbatim, byte for byte: ``"042"``, ``" 42"``,
  ``"42.0"``, ``"+42"``, ``"-0"`` and ``"4e1"`` are five units, none of them ``42``. (Reading
  them as numbers would guess at what the exporter meant; a verbatim rule cannot merge two
  different people.)
* **Text** is hashed by its UTF-8 bytes; **binary** by its bytes when they are valid UTF-8, so
  ``b"abc"`` and ``"abc"`` (and ``b"42"`` and ``42``) are one unit.
* **Bad identifiers** (a bad record, which ``encode_batch`` handles by ``on_bad_record``):
  nulls; floats that are not whole numbers, NaN, ±inf and whole floats outside the int64
  range; booleans; binary that is not valid UTF-8; and every other type (temporal, nested,
  null-typed). For a row-wise rule, each value is judged alone.

:func:`canonical_id_text` gives the same identity as text for readers that must turn a
column of mixed Python values into one Arrow type: hashing its result as a string gives the
same hash as the value in its natural Arrow type.

**The hash.** Python's built-in string hash is salted per process, so two workers would
disagree about which shard a unit belongs to and a unit's records could escape its
contribution bound. This hash depends only on the canonical identity: the same on every
worker, process, machine and run. Integers in the int64 range are mixed with SplitMix64's
finaliser; all other identities are hashed from their UTF-8 bytes with a polynomial over the
integers mod 2**64, computed for all strings of an Arrow array at once (one numpy pass per
byte position), then mixed. It is not a cryptographic hash: two identifiers that collide are
treated as one unit, whose *combined* contributions are bounded, so a collision can only lose
utility, never privacy.
"""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["canonical_hash64", "canonical_id_text", "stable_hash64"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)  # FNV prime: odd, so multiplication is invertible mod 2**64

_INT64_MIN = -(2**63)
_INT64_END = 2**63  # first integer above the int64 range
# Canonical decimal text of at most 19 digits (every one of up to 18 digits fits int64).
_CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,18})$"
_MINUS, _ZERO, _NINE = ord("-"), ord("0"), ord("9")

U64 = npt.NDArray[np.uint64]
Mask = npt.NDArray[np.bool_]


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
    """The canonical identity of one identifier as text, or ``None`` for a bad identifier.

    For readers that build one Arrow column from Python values of mixed types: a column of
    these strings hashes, row by row, exactly as each value does in its natural Arrow type
    (see the module docstring for the rules).

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
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isfinite(number) and number.is_integer() and _INT64_MIN <= number < _INT64_END:
            return str(int(number))
        return None
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return str(int(value))
        return None
    if isinstance(value, str):
        return value if value.isascii() or _is_utf8(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


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


def _hash_bytes(array: pa.Array) -> U64:
    """Hash every value of a string/binary Arrow array from its bytes (nulls: arbitrary)."""
    offsets, data = _offsets_and_data(_as_binary(array))
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


def _hash_text(array: pa.Array) -> tuple[U64, Mask]:
    """String column: canonical int64 text as the integer, everything else by its bytes."""
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


def _hash_binary(array: pa.Array) -> tuple[U64, Mask]:
    """Binary column: valid UTF-8 is text (so ``b"42"`` is 42); other bytes are bad."""
    text_type = pa.large_string() if pa.types.is_large_binary(array.type) else pa.string()
    try:
        return _hash_text(array.cast(text_type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    valid = np.array([canonical_id_text(v) is not None for v in array.to_pylist()], dtype=bool)
    cleaned = pc.if_else(pa.array(valid), array, pa.scalar(b"", array.type))
    hashes, bad = _hash_text(cleaned.cast(text_type))
    return hashes, bad | ~valid


def _hash_texts(texts: list[str | None]) -> tuple[U64, Mask]:
    return _hash_text(pa.array(texts, type=pa.string()))


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


def _hash_decimals(array: pa.Array) -> tuple[U64, Mask]:
    try:  # every value integral and in the int64 range: one vectorised cast
        return _hash_integers(pc.cast(array, pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _hash_texts([canonical_id_text(v) for v in array.to_pylist()])


def canonical_hash64(values: Any) -> tuple[U64, Mask]:
    """Hash each identifier's canonical identity, and flag the bad identifiers.

    Row-wise: a row's hash and whether it is bad depend on that row's value only.

    Args:
        values: a pyarrow Array/ChunkedArray, a numpy array, or a sequence of Python values
            (mixed types allowed).

    Returns:
        ``(hashes, bad)``: uint64 hashes (arbitrary where ``bad``) and a boolean mask of the
        rows that are not valid identifiers (see the module docstring).
    """
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
        # Python values, possibly of mixed types: one canonical text per value
        return _hash_texts([canonical_id_text(v) for v in values])
    kind = values.type
    if pa.types.is_dictionary(kind):
        hashes, bad = canonical_hash64(values.dictionary)
        indices = values.indices
        missing = _null_mask(indices)
        positions = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.intp)
        return hashes[positions], bad[positions] | missing
    if pa.types.is_integer(kind):
        return _hash_integers(values)
    if pa.types.is_floating(kind):
        return _hash_floats(values.cast(pa.float64()).to_numpy(zero_copy_only=False))
    if pa.types.is_decimal(kind):
        return _hash_decimals(values)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _hash_text(values)
    if pa.types.is_string_view(kind):
        return _hash_text(values.cast(pa.large_string()))
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _hash_binary(values)
    if pa.types.is_binary_view(kind) or pa.types.is_fixed_size_binary(kind):
        return _hash_binary(values.cast(pa.large_binary()))
    return np.zeros(len(values), np.uint64), np.ones(len(values), dtype=bool)


def stable_hash64(values: Any) -> U64:
    """Return a stable uint64 hash of each identifier's canonical identity.

    Args:
        values: a pyarrow Array/ChunkedArray, a numpy array or a sequence of integers,
            whole floats, strings or bytes (see the module docstring). Nulls and bad
            identifiers are not allowed; :func:`canonical_hash64` flags them instead.

    Raises:
        ValueError: if there are nulls (the message never shows a value or a count).
        TypeError: for a bad identifier (e.g. a float that is not a whole number).
    """
    hashes, bad = canonical_hash64(values)
    if bad.any():
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            has_nulls = values.null_count > 0
        else:
            has_nulls = any(value is None for value in values)
        if has_nulls:
            raise ValueError("privacy unit identifiers must not be null; found null(s)")
        raise TypeError(
            "privacy unit identifiers must be integers or strings (a whole float counts as an "
            "integer); found other values"
        )
    return hashes
