"""Column batches and their encoding from reader output.

Standard column names of an encoded batch:

* ``UNIT`` (``"unit"``): uint64, the stable hash of the privacy-unit identifier. Absent when the
  privacy unit is the record itself (each row its own unit).
* ``CANDIDATE`` (``"candidate"``): int64, the position of the record's candidate in the public
  candidate list. Records whose candidate is not in the public list are dropped (a public rule:
  they could never be released).
* ``VALUE`` (``"value"``): float64, a numeric field (a price, a measurement).
* ``KEY`` (``"key"``): int64, the position of the record's partition key in a public key list.

Bad records follow ``on_bad_record``: ``"fail"`` raises :class:`BadRecordError` naming the
source, the field and the rule (never a value, never a count), ``"skip"`` drops them (the
counts go to :class:`EncodeStats` only). Each rule looks at one record alone, so whether a
record is kept never depends on the other records of its batch:

* a privacy-unit id that is null or not an identifier (blank text, a float that is not a
  whole number, NaN, ±inf, a boolean, binary that is not UTF-8, a temporal or nested value);
  ids are read by the identity rule of :mod:`beam_dp.batching.hashing` named by ``unit_ids``
  (by default ``42``, ``"42"``, ``"42.0"``, ``" +042 "`` are one unit, and ``"ABC"`` is
  ``"abc"``; ``unit_ids="exact"`` takes text as it is);
* a value that is null, NaN, +inf or -inf, or text that is not a decimal number (±inf is a bad
  record in every format: a Parquet double and the CSV text ``inf`` alike);
* a null candidate or key. A candidate or key that is not in the public list is dropped (a
  public rule: it could never be released) and counted apart.

A field that is missing, or a value field whose Arrow type is not numeric or text, fails the
batch with either setting. Input given as Python values (a mapping of lists, a list of dicts)
is built into columns value by value when a field mixes types, never by a batch-wide guess.
No message ever quotes a value or passes on a library's message.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Required, TypedDict, TypeVar, Unpack

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from beam_dp.batching.hashing import UnitIds, canonical_hash64, canonical_id_text, check_unit_ids
from beam_dp.errors import BadRecordError, data_error

__all__ = [
    "CANDIDATE",
    "ELEMENT_SHAPES",
    "KEY",
    "UNIT",
    "VALUE",
    "BadRecordError",
    "ColumnBatch",
    "EncodeStats",
    "LabelMatch",
    "OnBadRecord",
    "PublicIndex",
    "RecordList",
    "as_table",
    "check_label_match",
    "concat_batches",
    "encode_batch",
    "is_record",
    "num_rows",
    "record_fields",
    "take",
    "with_source",
]

UNIT = "unit"
CANDIDATE = "candidate"
VALUE = "value"
KEY = "key"

ColumnBatch = dict[str, npt.NDArray[Any]]
OnBadRecord = Literal["fail", "skip"]

_T = TypeVar("_T")
# Exceptions a library raises on data it cannot convert (their messages may quote a value).
_LIBRARY_ERRORS = (
    pa.ArrowException,
    TypeError,
    ValueError,
    OverflowError,
    ArithmeticError,
    LookupError,
    UnicodeError,
)


def _guarded(call: Callable[[], _T], source: str, rule: str, field_name: str | None = None) -> _T:
    """Run ``call``; a library error becomes a :class:`BadRecordError` from public parts only.

    The error is raised outside the ``except`` block, so that neither ``__cause__`` nor
    ``__context__`` carries the library's exception (whose message may quote a value).
    """
    failed: str | None = None
    try:
        return call()
    except BadRecordError:
        raise
    except _LIBRARY_ERRORS as exc:
        failed = type(exc).__name__
    raise data_error(source, f"{rule}; {failed}", field=field_name)


def _label_key(value: Any, fold: bool = False) -> Any:
    """A value's label identity for comparing labels and data of different types.

    Numbers compare by value (``1``, ``1.0`` and the text ``"1"`` are one label, as an integer
    id and its canonical decimal text are one unit); other text and bytes by their text, with
    ``fold`` by :func:`_normalized_text`'s rule.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (float, np.floating, decimal.Decimal)):
        number = float(value)
        if math.isfinite(number) and number.is_integer():
            return ("number", int(value))
        return ("number", number)
    if isinstance(value, (int, np.integer)):
        return ("number", int(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = canonical_id_text(value)
        if value is None:
            return None
    if isinstance(value, str):
        text = canonical_id_text(value)
        if text is not None and text.lstrip("-").isdigit() and str(int(text)) == text:
            return ("number", int(text))
        if fold:
            return ("text", _normalized_text(pa.array([value], pa.string()))[0].as_py())
        return ("text", value)
    return ("other", repr(value))


LabelMatch = Literal["exact", "normalize"]


def check_label_match(value: object) -> LabelMatch:
    if value == "exact":
        return "exact"
    if value == "normalize":
        return "normalize"
    raise ValueError(f"'label_match' must be 'exact' or 'normalize'; received {value!r}")


def _normalized_text(array: pa.Array) -> pa.Array:
    """Text with its surrounding whitespace removed, lower-cased, in one Unicode normal form
    (the same call on both sides of a comparison)."""
    trimmed = pc.utf8_trim_whitespace(array)
    return pc.utf8_lower(pc.utf8_normalize(trimmed, form="NFC"))


@dataclass(frozen=True)
class PublicIndex:
    """A public, ordered list of labels (candidates or partition keys) and their positions.

    Labels must be public: chosen by the analyst or from public knowledge, never read from the
    data (candidates are public). A data value matches a label of another Arrow type
    when the label converts to the data's type exactly, or else when both are the same number
    or the same text (``1``, ``1.0`` and ``"1"`` match the label ``1``).

    ``match="exact"`` (default) compares text as it is: ``"Apple"`` and ``" apple"`` are not
    the label ``"apple"``, and a record naming them is dropped as naming no public label.
    ``match="normalize"`` compares text labels and values after removing surrounding
    whitespace, lower-casing and one Unicode normal form; the released label is the public one
    as given. Two public labels that would then be equal are refused at construction.
    """

    labels: tuple[Any, ...]
    match: LabelMatch
    _value_set: pa.Array = field(init=False, repr=False, compare=False)
    _normalized_set: pa.Array | None = field(init=False, repr=False, compare=False)

    def __init__(self, labels: Iterable[Any], match: LabelMatch = "exact"):
        items = tuple(labels)
        check_label_match(match)
        if not items:
            raise ValueError("'candidates' must hold at least one public label; received none")
        if len(set(items)) != len(items):
            raise ValueError("'candidates' must be distinct; received duplicate labels")
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError("'candidates' must be finite; received NaN or infinity")
        failed = False
        try:
            value_set = pa.array(list(items))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            failed = True
        if failed:
            raise ValueError(
                "'candidates' must all be numbers or all be text (one Arrow type); received a "
                "mix of types"
            )
        normalized = None
        if match == "normalize" and pa.types.is_string(value_set.type):
            normalized = _normalized_text(value_set)
            if len(pc.unique(normalized)) != len(normalized):
                raise ValueError(
                    "with label_match='normalize', public labels that differ only in case, "
                    "surrounding whitespace or Unicode form would be one label; make them "
                    "distinct, or use label_match='exact'"
                )
        object.__setattr__(self, "labels", items)
        object.__setattr__(self, "match", match)
        object.__setattr__(self, "_value_set", value_set)
        object.__setattr__(self, "_normalized_set", normalized)

    def __len__(self) -> int:
        return len(self.labels)

    def lookup(self, values: Any) -> npt.NDArray[np.int64]:
        """Position of each value in the list, -1 where it is not a public label (or null).

        Raises:
            BadRecordError: never with a value in its message (a library error on the data
                becomes one built from the rule only).
        """
        return _guarded(lambda: self._lookup(values), "input", "labels could not be compared")

    def _lookup(self, values: Any) -> npt.NDArray[np.int64]:
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            array = values
        else:
            try:
                array = pa.array(values)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                items = values.tolist() if isinstance(values, np.ndarray) else list(values)
                return self._lookup_by_key(items)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_dictionary(array.type):
            array = array.cast(array.type.value_type)
        value_set = self._value_set
        if self._normalized_set is not None and (
            pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
        ):
            array = _normalized_text(array.cast(pa.string()))
            value_set = self._normalized_set
        if array.type != value_set.type:
            try:
                value_set = value_set.cast(array.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return self._lookup_by_key(array.to_pylist())
        index = pc.index_in(array, value_set=value_set)
        result: npt.NDArray[np.int64] = (
            index.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        )
        return result

    def _lookup_by_key(self, items: Sequence[Any]) -> npt.NDArray[np.int64]:
        """Row-wise comparison by :func:`_label_key` (labels and data of different types)."""
        fold = self._normalized_set is not None
        positions: dict[Any, int] = {}
        for position, label in enumerate(self.labels):
            positions.setdefault(_label_key(label, fold), position)
        return np.array([positions.get(_label_key(v, fold), -1) for v in items], dtype=np.int64)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PublicIndex, (self.labels, self.match))


@dataclass
class EncodeStats:
    """Aggregate counts from encoding (exact and data-dependent: reported only behind
    :func:`beam_dp.telemetry.enable_exact_counts`)."""

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


def concat_batches(batches: Iterable[ColumnBatch]) -> ColumnBatch:
    """Concatenate column batches with the same columns."""
    items = [b for b in batches]
    if not items:
        return {}
    names = list(items[0])
    return {name: np.concatenate([b[name] for b in items]) for name in names}


def _value_text(value: Any) -> str | None:
    """One Python value of a mixed field as text: numbers stay parsable, the rest is None."""
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, decimal.Decimal):
        return str(value)
    return canonical_id_text(value)


def _array_of(values: Any, as_id: bool) -> pa.Array | pa.ChunkedArray:
    """One column from Python values: Arrow's own type when the values share one, else text.

    A field that mixes types (``42`` and ``"u7"``, ints and bools) is built value by value
    (:func:`canonical_id_text` for ids), so a value's reading never depends on its batch.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind != "O":
        return pa.array(values)
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    try:
        return pa.array(items)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    text = canonical_id_text if as_id else _value_text
    return pa.array([text(v) for v in items], type=pa.string())


#: The element shapes a transform reads, named in the error for any other.
ELEMENT_SHAPES = (
    "a pyarrow RecordBatch or Table; a mapping of columns (field -> list or array); one record "
    "per element: a dict, a beam.Row or other NamedTuple, or a dataclass instance; or a list "
    "of such records"
)

#: The types a mapping's values have when the mapping is a batch of columns, not a record.
COLUMN_TYPES = (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)


def record_fields(element: Any) -> Mapping[str, Any] | None:
    """One record's fields, or None if ``element`` is not one record.

    A record is a mapping whose values are not columns (lists, arrays), a ``beam.Row`` or any
    other NamedTuple (``_asdict``), or a dataclass instance. Each record is read alone: the
    same record gives the same fields in any batch.
    """
    if isinstance(element, Mapping):
        if element and all(isinstance(v, COLUMN_TYPES) for v in element.values()):
            return None  # a mapping of columns: a batch
        return element
    as_dict = getattr(element, "_asdict", None)
    if callable(as_dict):
        fields = as_dict()
        if isinstance(fields, Mapping):
            return fields
    if dataclasses.is_dataclass(element) and not isinstance(element, type):
        return {f.name: getattr(element, f.name) for f in dataclasses.fields(element)}
    return None


def is_record(element: Any) -> bool:
    """Whether ``element`` is one record (:func:`record_fields`), not a batch of them."""
    return record_fields(element) is not None


class RecordList(list[Any]):
    """A list whose every item is one record (:func:`is_record`, not an empty mapping): what
    the Beam transforms build from one-record elements, already judged record by record.

    :func:`as_table` reads only the fields it is asked for from such a list, with the same
    rules as for any list of records (each value read alone, a field that mixes types built
    value by value); a list of another type is checked item by item first.
    """

    __slots__ = ()


def as_table(
    batch: Any,
    *,
    source: str = "input",
    id_columns: Sequence[str] = (),
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch | pa.Table:
    """A batch as a RecordBatch or Table: any of :data:`ELEMENT_SHAPES`.

    Args:
        batch: a pyarrow RecordBatch/Table, a mapping of columns, one record, or a list of
            records (dicts, ``beam.Row`` and other NamedTuples, dataclass instances).
        source: a name for error messages.
        id_columns: fields read as identifiers when they mix types (canonical text).
        columns: the fields the caller reads, or None for all. A :class:`RecordList` is
            read into these fields only (a field no record has stays absent); other batches
            keep all their fields.

    Raises:
        BadRecordError: the batch cannot be read as columns (messages hold no value).
        TypeError: an element of another shape (naming the shapes that work).
    """
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return batch
    if type(batch) is RecordList and batch:
        return _record_list_table(batch, source, id_columns, columns)
    if type(batch) is list and batch and type(batch[0]) is dict:
        fast = _dict_records_table(batch)
        if fast is not None:
            return fast
    one = record_fields(batch)
    if one is not None:
        columns_of = {name: [value] for name, value in one.items()}
    elif isinstance(batch, Mapping):
        columns_of = dict(batch)
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        rows = [record_fields(row) for row in batch]
        if not all(row is not None for row in rows):
            raise data_error(
                source, f"a batch given as a list must hold records ({ELEMENT_SHAPES})"
            )
        names: dict[Any, None] = {}
        for row in rows:
            assert row is not None
            names.update(dict.fromkeys(row))
        columns_of = {name: [row.get(name) for row in rows if row is not None] for name in names}
    else:
        raise TypeError(
            f"an element must be {ELEMENT_SHAPES}; received type {type(batch).__name__}"
        )
    return _columns_table(columns_of, source, id_columns)


def _columns_table(columns: Mapping[Any, Any], source: str, id_columns: Sequence[str]) -> pa.Table:
    """Named columns of Python values (or arrays) as one table, each column by
    :func:`_array_of`."""
    if not all(isinstance(name, str) for name in columns):
        raise data_error(source, "field names must be text")
    arrays = {
        name: _guarded(
            partial(_array_of, values, name in id_columns),
            source,
            "the field's values could not be read as one column",
            name,
        )
        for name, values in columns.items()
    }
    return _guarded(lambda: pa.table(arrays), source, "every field must have one value per record")


def _record_list_table(
    records: RecordList, source: str, id_columns: Sequence[str], wanted: Sequence[str] | None
) -> pa.Table:
    """The fields ``wanted`` of records known to be records: the general path of
    :func:`as_table` for a list of records, without building the fields nobody reads.

    Every field name of every record is still checked to be text, and a wanted field that no
    record has stays absent (the encoder names it as missing); a record without a field that
    others have holds a null there, as on the general path.
    """
    if set(map(type, records)) == {dict}:
        rows: Sequence[Mapping[Any, Any]] = records  # plain dicts: the records themselves
    else:
        rows = [_fields_of_record(record) for record in records]
    present = set().union(*rows)
    names = list(dict.fromkeys(wanted)) if wanted is not None else None
    if names is None or not any(name in present for name in names):
        names = list(dict.fromkeys(name for row in rows for name in row))  # every field
    if not all(isinstance(name, str) for name in present):
        raise data_error(source, "field names must be text")
    columns: dict[str, list[Any]] = {}
    for name in names:
        if name not in present:
            continue
        try:
            columns[name] = [row[name] for row in rows]
        except KeyError:  # some record lacks the field: a null there
            columns[name] = [row.get(name) for row in rows]
    return _columns_table(columns, source, id_columns)


def _fields_of_record(record: Any) -> Mapping[Any, Any]:
    fields = record_fields(record)
    if fields is None:  # not a record: a RecordList holds records only
        raise TypeError(f"a RecordList must hold records; received type {type(record).__name__}")
    return fields


def _dict_records_table(rows: list[Any]) -> pa.Table | None:
    """Records that are all plain dicts with the same text keys and one Arrow type per field,
    read by Arrow in one call; None for anything else (read value by value, as before).

    The same columns as the general path: each field holds one Arrow type, so no value is
    read differently for the values around it.
    """
    names = rows[0].keys()
    if not all(type(row) is dict and row.keys() == names for row in rows):
        return None
    if not all(type(name) is str for name in names):
        return None
    if any(isinstance(value, COLUMN_TYPES) for value in rows[0].values()):
        return None  # a mapping of columns, not a record: the general path decides
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def _column(table: pa.RecordBatch | pa.Table, name: str, source: str) -> pa.Array:
    if name not in table.schema.names:
        raise BadRecordError(f"{source}: field '{name}' is missing (rule: the field is required)")
    column = table.column(name)
    if isinstance(column, pa.ChunkedArray):
        column = _guarded(column.combine_chunks, source, "the field could not be read", name)
    if pa.types.is_dictionary(column.type):
        decoded = column
        column = _guarded(
            lambda: decoded.cast(decoded.type.value_type),
            source,
            "the field could not be read",
            name,
        )
    return column


_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def _parse_numbers(array: pa.Array) -> npt.NDArray[np.float64]:
    """Text entries as float64, NaN where an entry is no decimal number (entry by entry)."""
    array = pc.utf8_trim_whitespace(array)
    parsable = pc.fill_null(pc.match_substring_regex(array, _NUMBER), False)
    array = pc.if_else(parsable, array, pa.scalar(None, array.type))
    try:
        parsed = pc.cast(array, pa.float64())
    except (pa.ArrowException, ValueError):  # one entry at a time, never quoting any
        return np.array(
            [math.nan if v is None else _float_or_nan(v) for v in array.to_pylist()],
            dtype=np.float64,
        )
    values: npt.NDArray[np.float64] = parsed.fill_null(math.nan).to_numpy(zero_copy_only=False)
    return values


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return math.nan


def _numeric(
    array: pa.Array, name: str, source: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The column as float64 and a mask of bad entries (null, NaN, ±inf, text no number).

    Text columns (CSV, JSON lines) are parsed entry by entry, so one bad entry is one bad
    record, not a bad column. Integers beyond 2**53 are rounded to the nearest double (never
    an error quoting the value).
    """
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        values = _parse_numbers(
            array.cast(pa.large_string()) if pa.types.is_string_view(kind) else array
        )
    elif pa.types.is_integer(kind):
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        numbers = array.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        values = np.where(nulls, math.nan, numbers)
    elif pa.types.is_floating(kind):
        values = array.cast(pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
    elif pa.types.is_decimal(kind):
        try:
            values = pc.cast(array, pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
        except (pa.ArrowException, ValueError):
            values = np.array(
                [math.nan if v is None else float(v) for v in array.to_pylist()], np.float64
            )
    elif pa.types.is_null(kind):
        values = np.full(len(array), math.nan)
    else:
        raise BadRecordError(
            f"{source}: field '{name}' has type {kind} (rule: the field must be numeric)"
        )
    values = np.asarray(values, dtype=np.float64)
    return values, ~np.isfinite(values)


def _null_rows(column: pa.Array) -> npt.NDArray[np.bool_]:
    if not column.null_count:
        return np.zeros(len(column), dtype=bool)
    rows: npt.NDArray[np.bool_] = column.is_null().to_numpy(zero_copy_only=False)
    return rows


class EncodeOptions(TypedDict, total=False):
    """The public parameters of an encoding, declared once (:func:`encode_batch`, and the
    Beam transform that applies it to every batch). Defaults: ``None`` for the optional
    fields, ``on_bad_record="fail"``, ``unit_ids="normalize"``, ``source="input"``."""

    unit_column: Required[str | None]
    candidate_column: str | None
    candidates: PublicIndex | None
    value_column: str | None
    key_column: str | None
    keys: PublicIndex | None
    on_bad_record: OnBadRecord
    unit_ids: UnitIds
    source: str


_ENCODE_DEFAULTS: dict[str, Any] = {
    "candidate_column": None,
    "candidates": None,
    "value_column": None,
    "key_column": None,
    "keys": None,
    "on_bad_record": "fail",
    "unit_ids": "normalize",
    "source": "input",
}


def encode_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The validated parameters of an encoding with their defaults (the one place they are
    checked; errors name the parameter and the rule, never the data)."""
    unknown = sorted(set(options) - set(_ENCODE_DEFAULTS) - {"unit_column"})
    if unknown:
        raise TypeError(f"unknown encoding parameter(s) {unknown}")
    if "unit_column" not in options:
        raise TypeError("missing required keyword argument 'unit_column'")
    full = {**_ENCODE_DEFAULTS, **options}
    if full["on_bad_record"] not in ("fail", "skip"):
        raise ValueError(
            f"'on_bad_record' must be 'fail' or 'skip'; received {full['on_bad_record']!r}"
        )
    check_unit_ids(full["unit_ids"])
    if (full["candidate_column"] is None) != (full["candidates"] is None):
        raise ValueError("'candidate_column' and 'candidates' must be given together")
    if (full["key_column"] is None) != (full["keys"] is None):
        raise ValueError("'key_column' and 'keys' must be given together")
    return full


def encode_batch(
    batch: Any, *, stats: EncodeStats | None = None, **options: Unpack[EncodeOptions]
) -> ColumnBatch:
    """Turn reader output into an encoded column batch (see the module docstring).

    Args:
        batch: a pyarrow RecordBatch/Table, a mapping of columns, or a list of dicts.
        unit_column: the privacy-unit field; ``None`` makes every record its own unit.
        candidate_column, candidates: the candidate field and the public candidate list.
        value_column: a numeric field.
        key_column, keys: a partition-key field and the public key list (``.PerKey``).
        on_bad_record: ``"fail"`` or ``"skip"``.
        unit_ids: how unit ids are read: ``"normalize"`` (default: the identity rule of
            :mod:`beam_dp.batching.hashing`) or ``"exact"`` (ids already canonical).
        source: a name for error messages (a file name).
        stats: if given, aggregate counts are added to it.

    Raises:
        BadRecordError: with ``on_bad_record="fail"``, on the first rule broken; always for a
            missing field or a value field of the wrong type. Messages never contain a value
            or a count, and never carry a library's exception.
        ValueError: for a bad parameter (never about the data).
    """
    full = encode_options(options)
    source: str = full["source"]
    ids = () if full["unit_column"] is None else (full["unit_column"],)
    read = ("unit_column", "candidate_column", "value_column", "key_column")
    columns = [full[name] for name in read if full[name] is not None]
    table = as_table(batch, source=source, id_columns=ids, columns=columns)
    return _guarded(
        lambda: _encode_table(table, stats=stats, **full),
        source,
        "the batch could not be encoded",
    )


def _encode_table(
    table: pa.RecordBatch | pa.Table,
    *,
    unit_column: str | None,
    candidate_column: str | None,
    candidates: PublicIndex | None,
    value_column: str | None,
    key_column: str | None,
    keys: PublicIndex | None,
    on_bad_record: OnBadRecord,
    unit_ids: UnitIds,
    source: str,
    stats: EncodeStats | None,
) -> ColumnBatch:
    n = table.num_rows
    bad = np.zeros(n, dtype=bool)
    known = np.ones(n, dtype=bool)
    out: ColumnBatch = {}
    problems: list[str] = []

    if unit_column is not None:
        unit = _column(table, unit_column, source)
        nulls = _null_rows(unit)
        hashes, not_ids = _guarded(
            lambda: canonical_hash64(unit, unit_ids),
            source,
            "privacy-unit identifiers must be integers or text",
            unit_column,
        )
        if nulls.any():
            problems.append(f"field '{unit_column}' must not be null")
        if (not_ids & ~nulls).any():
            problems.append(
                f"field '{unit_column}' must hold privacy-unit identifiers: integers, whole "
                "numbers or text (not blank, a fraction, NaN, infinity, boolean or nested value)"
            )
        bad |= not_ids | nulls
        out[UNIT] = hashes
    for name, index, encoded in (
        (candidate_column, candidates, CANDIDATE),
        (key_column, keys, KEY),
    ):
        if name is None or index is None:
            continue
        column = _column(table, name, source)
        nulls = _null_rows(column)
        if nulls.any():
            problems.append(f"field '{name}' must not be null")
            bad |= nulls
        positions = _guarded(
            partial(index._lookup, column),
            source,
            "the field's values could not be compared with the public labels",
            name,
        )
        known &= (positions >= 0) | bad
        out[encoded] = positions
    if value_column is not None:
        values, missing = _numeric(_column(table, value_column, source), value_column, source)
        if missing.any():
            problems.append(
                f"field '{value_column}' must be a number, not null or NaN, nor infinite"
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
