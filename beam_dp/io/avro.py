"""Avro object container files read block by block, decoded by a native columnar reader.

An Avro file is a header (magic, metadata with the schema and codec, a 16-byte sync marker)
followed by blocks, each ``record count, byte size, data, sync marker``. This module frames
the blocks itself, so that

* a large file can be **split across workers at block boundaries**: a byte range
  ``[start, end)`` owns the blocks that *begin* inside it (a block begins right after the
  header or right after a sync marker), so ranges that cover a file read every block once;
* the blocks are decoded by **polars' native Avro reader** into Arrow (about ten times
  fastavro's speed), a run of blocks at a time, behind a copy of the file's header.

polars' reader cannot decode every schema: it panics on maps and on unions other than
``[null, T]``, even in fields that are not read. :func:`native_reader_supports` decides per
file from the header, and the caller reads such files with fastavro (the fallback also for a
codec polars does not know). Decoded columns are put in the types the fastavro path gives
(text as ``string``, ``int`` as ``int64``, ``float`` as ``float64``, enums as text,
millisecond timestamps as microseconds), so a unit's identity does not depend on the reader.

Nothing here raises with a decoder's message: failures are reported as ``None`` or
:data:`FAILED` and the caller builds the error from the file name and the rule.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "FAILED",
    "AvroHeader",
    "decode_blocks",
    "iter_blocks",
    "native_reader_supports",
    "read_header",
]

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
FAILED: Any = object()  # a block that could not be framed (truncated or corrupt file)
NATIVE_CODECS = frozenset({"null", "deflate", "snappy"})
_SCAN = 1 << 16
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True)
class AvroHeader:
    """An Avro file's header.

    Attributes:
        schema: the writer's schema (parsed JSON).
        codec: the block codec (``null`` when absent).
        sync: the 16-byte sync marker.
        raw: the header's bytes, to put in front of a run of blocks.
    """

    schema: Any
    codec: str
    sync: bytes
    raw: bytes

    @property
    def data_start(self) -> int:
        """Where the first block begins."""
        return len(self.raw)

    def field_names(self) -> list[str]:
        fields = self.schema.get("fields", []) if isinstance(self.schema, dict) else []
        return [str(f.get("name")) for f in fields if isinstance(f, dict)]


class _Reader:
    """Exact reads from a binary handle, remembering the position."""

    def __init__(self, handle: Any, position: int = 0) -> None:
        self.handle = handle
        self.position = position

    def read(self, size: int) -> bytes | None:
        data = self.handle.read(size) if size else b""
        if data is None or len(data) != size:
            return None
        self.position += size
        return bytes(data)

    def varint(self) -> int | None:
        """A zig-zag encoded Avro long, ``None`` at the end of the file or if malformed."""
        shift = result = 0
        for _ in range(_MAX_VARINT_BYTES):
            byte = self.handle.read(1)
            if not byte:
                return None
            self.position += 1
            result |= (byte[0] & 0x7F) << shift
            if not byte[0] & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        return None


def _encode_long(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_header(handle: Any) -> AvroHeader | None:
    """The header of the Avro file ``handle`` is positioned at the start of; ``None`` if the
    file is not an Avro object container (or its header is cut or corrupt)."""
    reader = _Reader(handle)
    if reader.read(len(MAGIC)) != MAGIC:
        return None
    metadata: dict[str, bytes] = {}
    while True:
        count = reader.varint()
        if count is None:
            return None
        if count == 0:
            break
        if count < 0:  # a negative count is followed by the block's size in bytes
            count = -count
            if reader.varint() is None:
                return None
        for _ in range(count):
            key_size = reader.varint()
            key = None if key_size is None or key_size < 0 else reader.read(key_size)
            value_size = reader.varint()
            value = None if value_size is None or value_size < 0 else reader.read(value_size)
            if key is None or value is None:
                return None
            metadata[key.decode("utf-8", "replace")] = value
    sync = reader.read(SYNC_SIZE)
    if sync is None or "avro.schema" not in metadata:
        return None
    try:
        schema = json.loads(metadata["avro.schema"].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    codec = metadata.get("avro.codec", b"null").decode("utf-8", "replace") or "null"
    raw = _header_bytes(metadata, sync)
    return AvroHeader(schema=schema, codec=codec, sync=sync, raw=raw)


def _header_bytes(metadata: dict[str, bytes], sync: bytes) -> bytes:
    out = bytearray(MAGIC)
    out += _encode_long(len(metadata))
    for key, value in metadata.items():
        encoded = key.encode("utf-8")
        out += _encode_long(len(encoded)) + encoded + _encode_long(len(value)) + value
    out += _encode_long(0) + sync
    return bytes(out)


def _unsupported(schema: Any, named: set[str]) -> bool:
    """Does the schema use a type polars' reader panics on (maps, unions but [null, T])?"""
    if isinstance(schema, str):
        return False
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1 or len(schema) > 2:
            return True
        return _unsupported(branches[0], named)
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind == "map":
        return True
    if kind == "array":
        return _unsupported(schema.get("items"), named)
    if kind in ("record", "error"):
        name = str(schema.get("name"))
        if name in named:  # a recursive record
            return True
        inner = named | {name}
        fields = schema.get("fields", [])
        return not isinstance(fields, list) or any(
            not isinstance(f, dict) or _unsupported(f.get("type"), inner) for f in fields
        )
    return isinstance(kind, (list, dict)) and _unsupported(kind, named)


def native_reader_supports(header: AvroHeader) -> bool:
    """Can polars' reader decode this file (its codec and every field of its schema)?"""
    if header.codec not in NATIVE_CODECS:
        return False
    try:
        import polars  # noqa: F401
    except ImportError:  # pragma: no cover - polars is a dependency
        return False
    return isinstance(header.schema, dict) and not _unsupported(header.schema, set())


def _find_sync(reader: _Reader, sync: bytes, start: int) -> int | None:
    """The position right after the first sync marker ending at or after ``start``."""
    handle = reader.handle
    position = max(start - SYNC_SIZE, 0)
    handle.seek(position)
    tail = b""
    while True:
        chunk = handle.read(_SCAN)
        if not chunk:
            return None
        data = tail + chunk
        found = data.find(sync)
        if found >= 0:
            end = position - len(tail) + found + SYNC_SIZE
            if end >= start:
                return end
            found = data.find(sync, found + 1)
            while found >= 0:
                end = position - len(tail) + found + SYNC_SIZE
                if end >= start:
                    return end
                found = data.find(sync, found + 1)
        position += len(chunk)
        tail = data[-(SYNC_SIZE - 1) :]


def iter_blocks(
    handle: Any, header: AvroHeader, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """``(record count, raw block bytes)`` of the blocks that begin in ``[start, end)``.

    The raw bytes are the block as written (count, size, data, sync marker), ready to follow
    a header. Yields :data:`FAILED` (instead of a pair) once and stops if a block is cut or
    its sync marker does not match: the file is corrupt from there on.
    """
    if start <= header.data_start:
        begin = header.data_start
    else:
        found = _find_sync(_Reader(handle), header.sync, start)
        if found is None:
            return
        begin = found
    handle.seek(begin)
    reader = _Reader(handle, begin)
    while end is None or reader.position < end:
        first = reader.position
        count = reader.varint()
        if count is None and reader.position == first:
            return  # the end of the file, between blocks
        size = reader.varint()
        if count is None or size is None or count < 0 or size < 0:
            yield FAILED
            return
        body = reader.read(size)
        sync = None if body is None else reader.read(SYNC_SIZE)
        if body is None or sync != header.sync:
            yield FAILED
            return
        yield count, _encode_long(count) + _encode_long(size) + body + sync


def _normalise(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The type the fastavro path gives the same values (see the module docstring)."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
        kind = column.type
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return column.cast(pa.string())
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return column.cast(pa.binary())
    if pa.types.is_integer(kind) and kind != pa.int64():
        return column.cast(pa.int64())
    if pa.types.is_float32(kind):
        return column.cast(pa.float64())
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms"):
        return column.cast(pa.timestamp("us", tz=kind.tz))
    return column


def decode_blocks(header: AvroHeader, blocks: Sequence[bytes], columns: Sequence[str]) -> Any:
    """The ``columns`` of a run of raw blocks as an Arrow table, or :data:`FAILED`.

    The blocks are decoded by polars behind a copy of the file's header. A decoder failure
    (including a panic of the native code) gives :data:`FAILED`, never its message.
    """
    import polars as pl

    data = io.BytesIO(b"".join([header.raw, *blocks]))
    try:
        frame = pl.read_avro(data, columns=list(columns))
        table = frame.to_arrow()
    except MemoryError:
        raise
    except (Exception, pl.exceptions.PanicException):  # a panic is a BaseException
        return FAILED
    return pa.table({name: _normalise(table.column(name)) for name in columns})
