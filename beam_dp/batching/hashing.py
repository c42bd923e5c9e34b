"""A stable 64-bit hash of privacy-unit identifiers, vectorised.

Python's built-in string hash is salted per process, so two workers would disagree about
which shard a unit belongs to and a unit's records could escape its contribution bound. This
hash depends only on the identifier's bytes: the same on every worker, process, machine and
run.

Integers are mixed with SplitMix64's finaliser. Strings and bytes are hashed from their UTF-8
bytes with a polynomial over the integers mod 2**64, computed for all strings of an Arrow array
at once (one numpy pass over the bytes), then mixed. It is not a cryptographic hash: two
identifiers that collide are treated as one unit, whose *combined* contributions are bounded,
so a collision can only lose utility, never privacy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["stable_hash64"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)  # FNV prime: odd, so multiplication is invertible mod 2**64

U64 = npt.NDArray[np.uint64]


def _mix(x: U64) -> U64:
    """SplitMix64 finaliser: a bijection of uint64 with good avalanche."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _hash_binary(array: pa.Array) -> U64:
    """Hash every value of a string/binary Arrow array from its bytes."""
    if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        offset_type: Any = np.int64
    else:
        array = array.cast(pa.binary()) if pa.types.is_string(array.type) else array
        offset_type = np.int32
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[
        array.offset : array.offset + len(array) + 1
    ]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    # Horner's rule over byte positions: one vectorised pass per position, all strings at once.
    sums = np.zeros(lengths.size, dtype=np.uint64)
    max_len = int(lengths.max()) if lengths.size else 0
    everyone = np.arange(lengths.size)
    with np.errstate(over="ignore"):
        for position in range(max_len):
            lanes = (
                everyone if position < int(lengths.min()) else np.flatnonzero(lengths > position)
            )
            byte = data[starts[lanes] + position].astype(np.uint64) + np.uint64(1)
            sums[lanes] = sums[lanes] * _POLY + byte
        return _mix(sums ^ (lengths.astype(np.uint64) * _GOLDEN))


def stable_hash64(values: Any) -> U64:
    """Return a stable uint64 hash of each identifier in ``values``.

    Args:
        values: a pyarrow Array/ChunkedArray or numpy array of integers, strings or bytes
            (a numpy object array of str is accepted too). Nulls are not allowed.

    Raises:
        ValueError: if there are nulls (the message never shows a value).
        TypeError: for unsupported identifier types (e.g. floats).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "iu":
            return _mix(values.astype(np.int64).view(np.uint64))
        if values.dtype.kind in "OUS":
            values = pa.array(values.tolist())
        else:
            raise TypeError(
                f"privacy unit identifiers must be integers or strings; got {values.dtype}"
            )
    if not isinstance(values, pa.Array):
        values = pa.array(values)
    if values.null_count:
        raise ValueError(
            f"privacy unit identifiers must not be null; found {values.null_count} null(s)"
        )
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    if pa.types.is_integer(values.type):
        return _mix(values.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64))
    if (
        pa.types.is_string(values.type)
        or pa.types.is_large_string(values.type)
        or pa.types.is_binary(values.type)
        or pa.types.is_large_binary(values.type)
    ):
        return _hash_binary(values)
    raise TypeError(f"privacy unit identifiers must be integers or strings; got {values.type}")
