"""Column batches and their encoding from reader output.

Standard column names of an encoded batch:

* ``UNIT`` (``"unit"``): uint64, the stable hash of the privacy-unit identifier. Absent when the
  privacy unit is the record itself (each row its own unit).
* ``CANDIDATE`` (``"candidate"``): int64, the position of the record's candidate in the public
  candidate list. Records whose candidate is not in the public list are dropped (a public rule:
  they could never be released).
* ``VALUE`` (``"value"``): float64, a numeric field (a price, a measurement).
* ``KEY`` (``"key"``): int64, the position of the record's partition key in a public key list.

Bad records (a null identifier, a null or NaN value, a value that is not a number) follow
``on_bad_record``: ``"fail"`` raises :class:`BadRecordError` naming the source, the field and the
rule (never a value), ``"skip"`` drops them and reports only how many.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from beam_dp.batching.hashing import stable_hash64
from beam_dp.errors import BadRecordError

__all__ = [
    "CANDIDATE",
    "KEY",
    "UNIT",
    "VALUE",
    "BadRecordError",
    "ColumnBatch",
    "EncodeStats",
    "OnBadRecord",
    "PublicIndex",
    "as_table",
    "concat_batches",
    "empty_batch",
    "encode_batch",
    "num_rows",
    "take",
    "to_record_batch",
    "with_source",
]

UNIT = "unit"
CANDIDATE = "candidate"
VALUE = "value"
KEY = "key"

ColumnBatch = dict[str, npt.NDArray[Any]]
OnBadRecord = Literal["fail", "skip"]

_DTYPES: dict[str, Any] = {UNIT: np.uint64, CANDIDATE: np.int64, VALUE: np.float64, KEY: np.int64}


@dataclass(frozen=True)
class PublicIndex:
    """A public, ordered list of labels (candidates or partition keys) and their positions.

    Labels must be public: chosen by the analyst or from public knowledge, never read from the
    data (DESIGN: candidates are public).
    """

    labels: tuple[Any, ...]
    _value_set: pa.Array = field(init=False, repr=False, compare=False)

    def __init__(self, labels: Iterable[Any]):
        items = tuple(labels)
        if not items:
            raise ValueError("'candidates' must hold at least one public label; received none")
        if len(set(items)) != len(items):
            raise ValueError("'candidates' must be distinct; received duplicate labels")
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError("'candidates' must be finite; received NaN or infinity")
        object.__setattr__(self, "labels", items)
        object.__setattr__(self, "_value_set", pa.array(list(items)))

    def __len__(self) -> int:
        return len(self.labels)

    def lookup(self, values: Any) -> npt.NDArray[np.int64]:
        """Position of each value in the list, -1 where it is not a public label."""
        array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
        if pa.types.is_dictionary(array.type):
            array = array.cast(array.type.value_type)
        value_set = self._value_set
        if array.type != value_set.type:
            try:
                value_set = value_set.cast(array.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise BadRecordError(
                    f"the field's type {array.type} cannot hold the public labels "
                    f"(type {value_set.type})"
                ) from exc
        index = pc.index_in(array, value_set=value_set)
        result: npt.NDArray[np.int64] = (
            index.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        )
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        return (PublicIndex, (self.labels,))


@dataclass
class EncodeStats:
    """Aggregate counts from encoding (safe to log: no values)."""

    rows_read: int = 0
    bad_records: int = 0
    unknown_labels: int = 0


def with_source(element: Any, options: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Split a reader element into its batch and encode options naming its source.

    Readers (:class:`beam_dp.io.ReadExport`) emit ``(file name, batch)`` pairs so that errors
    can name the file; plain batches keep the ``source`` already in ``options``.
    """
    if isinstance(element, tuple) and len(element) == 2 and isinstance(element[0], str):
        return element[1], {**options, "source": element[0]}
    return element, dict(options)


def num_rows(batch: ColumnBatch) -> int:
    for column in batch.values():
        return int(column.shape[0])
    return 0


def take(batch: ColumnBatch, rows: npt.NDArray[Any]) -> ColumnBatch:
    """Rows ``rows`` (indices or a boolean mask) of every column."""
    return {name: column[rows] for name, column in batch.items()}


def empty_batch(columns: Sequence[str]) -> ColumnBatch:
    return {name: np.zeros(0, dtype=_DTYPES.get(name, np.float64)) for name in columns}


def concat_batches(batches: Iterable[ColumnBatch]) -> ColumnBatch:
    """Concatenate column batches with the same columns."""
    items = [b for b in batches]
    if not items:
        return {}
    names = list(items[0])
    return {name: np.concatenate([b[name] for b in items]) for name in names}


def as_table(batch: Any) -> pa.RecordBatch | pa.Table:
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return batch
    if isinstance(batch, Mapping):
        return pa.table(
            {k: (v if isinstance(v, (pa.Array, np.ndarray)) else list(v)) for k, v in batch.items()}
        )
    if isinstance(batch, Sequence):
        return pa.Table.from_pylist(list(batch))
    raise TypeError(
        "a batch must be a pyarrow RecordBatch or Table, a mapping of columns or a list of "
        f"dicts; received type {type(batch).__name__}"
    )


def _column(table: pa.RecordBatch | pa.Table, name: str, source: str) -> pa.Array:
    if name not in table.schema.names:
        raise BadRecordError(f"{source}: field '{name}' is missing (rule: the field is required)")
    column = table.column(name)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column


_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def _numeric(
    array: pa.Array, name: str, source: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The column as float64 and a mask of bad entries (null, NaN, or text that is no number).

    Text columns (CSV, JSON lines) are parsed entry by entry, so one bad entry is one bad
    record, not a bad column.
    """
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = pc.utf8_trim_whitespace(array)
        parsable = pc.fill_null(pc.match_substring_regex(array, _NUMBER), False)
        array = pc.if_else(parsable, array, pa.scalar(None, array.type))
        array = pc.cast(array, pa.float64())
    elif not (
        pa.types.is_integer(array.type)
        or pa.types.is_floating(array.type)
        or pa.types.is_decimal(array.type)
        or pa.types.is_null(array.type)
    ):
        raise BadRecordError(
            f"{source}: field '{name}' has type {array.type} (rule: the field must be numeric)"
        )
    values = pc.cast(array, pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
    return values.astype(np.float64, copy=False), np.isnan(values)


def encode_batch(
    batch: Any,
    *,
    unit_column: str | None,
    candidate_column: str | None = None,
    candidates: PublicIndex | None = None,
    value_column: str | None = None,
    key_column: str | None = None,
    keys: PublicIndex | None = None,
    on_bad_record: OnBadRecord = "fail",
    source: str = "input",
    stats: EncodeStats | None = None,
) -> ColumnBatch:
    """Turn reader output into an encoded column batch (see the module docstring).

    Args:
        batch: a pyarrow RecordBatch/Table, a mapping of columns, or a list of dicts.
        unit_column: the privacy-unit field; ``None`` makes every record its own unit.
        candidate_column, candidates: the candidate field and the public candidate list.
        value_column: a numeric field.
        key_column, keys: a partition-key field and the public key list (``.PerKey``).
        on_bad_record: ``"fail"`` or ``"skip"``.
        source: a name for error messages (a file name).
        stats: if given, aggregate counts are added to it.

    Raises:
        BadRecordError: with ``on_bad_record="fail"``, on the first rule broken; always for a
            missing field or a field of the wrong type. Messages never contain a value.
    """
    if on_bad_record not in ("fail", "skip"):
        raise ValueError(f"'on_bad_record' must be 'fail' or 'skip'; received {on_bad_record!r}")
    if (candidate_column is None) != (candidates is None):
        raise ValueError("'candidate_column' and 'candidates' must be given together")
    if (key_column is None) != (keys is None):
        raise ValueError("'key_column' and 'keys' must be given together")
    table = as_table(batch)
    n = table.num_rows
    bad = np.zeros(n, dtype=bool)
    known = np.ones(n, dtype=bool)
    out: ColumnBatch = {}
    problems: list[str] = []

    if unit_column is not None:
        unit = _column(table, unit_column, source)
        if unit.null_count:
            problems.append(f"field '{unit_column}' must not be null ({unit.null_count} record(s))")
            bad |= unit.is_null().to_numpy(zero_copy_only=False)
            unit = unit.fill_null(0) if pa.types.is_integer(unit.type) else unit.fill_null("")
        try:
            out[UNIT] = stable_hash64(unit)
        except TypeError as exc:
            raise BadRecordError(
                f"{source}: field '{unit_column}' has type {unit.type} "
                "(rule: privacy-unit identifiers must be integers or strings)"
            ) from exc
    if candidate_column is not None and candidates is not None:
        column = _column(table, candidate_column, source)
        if column.null_count:
            problems.append(
                f"field '{candidate_column}' must not be null ({column.null_count} record(s))"
            )
            bad |= column.is_null().to_numpy(zero_copy_only=False)
        try:
            index = candidates.lookup(column)
        except BadRecordError as exc:
            raise BadRecordError(f"{source}: field '{candidate_column}': {exc}") from exc
        known &= (index >= 0) | bad
        out[CANDIDATE] = index
    if key_column is not None and keys is not None:
        column = _column(table, key_column, source)
        if column.null_count:
            problems.append(
                f"field '{key_column}' must not be null ({column.null_count} record(s))"
            )
            bad |= column.is_null().to_numpy(zero_copy_only=False)
        try:
            index = keys.lookup(column)
        except BadRecordError as exc:
            raise BadRecordError(f"{source}: field '{key_column}': {exc}") from exc
        known &= (index >= 0) | bad
        out[KEY] = index
    if value_column is not None:
        values, missing = _numeric(_column(table, value_column, source), value_column, source)
        if missing.any():
            problems.append(
                f"field '{value_column}' must be a number, not null or NaN "
                f"({int(missing.sum())} record(s))"
            )
        bad |= missing
        out[VALUE] = values

    if problems and on_bad_record == "fail":
        raise BadRecordError(
            f"{source}: " + "; ".join(problems) + " (use on_bad_record='skip' to drop such records)"
        )
    keep = ~bad & known
    if stats is not None:
        stats.rows_read += n
        stats.bad_records += int(bad.sum())
        stats.unknown_labels += int((~known & ~bad).sum())
    if keep.all():
        return out
    return take(out, keep)


def to_record_batch(batch: ColumnBatch) -> pa.RecordBatch:
    """An encoded batch as a RecordBatch (for writing or debugging)."""
    return pa.RecordBatch.from_pydict({k: pa.array(v) for k, v in batch.items()})
