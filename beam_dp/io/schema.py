"""A column's resolution from the export's schema: public facts, never values.

Whether a column holds integers, or decimals with ``s`` digits after the point, is declared by
the file's schema: Parquet's footer (read by pyarrow without decoding any page) and Avro's
writer schema (the header, read by fastavro without decoding any record). Grids that follow
the column (:func:`beam_dp.summaries.grids.resolution_grid`) are built from it; reading the
values to guess a resolution would be a data-dependent choice and is never done.

CSV and JSON lines have no schema: their resolution is ``"unknown"`` and the grid stays the
uniform default unless the user passes ``resolution=``.

Kinds (:class:`ColumnResolution`):

* ``"integer"``: Parquet/Arrow integer types; Avro ``int``/``long`` without a logical type.
  Resolution 1.
* ``"decimal"``: Parquet/Arrow ``decimal(p, s)``; Avro ``bytes``/``fixed`` with logical type
  ``decimal`` and its ``scale``. Resolution ``10**-s``.
* ``"float"``: floating-point types (no resolution; the uniform grid stays).
* ``"other"``: anything else the schema declares (text, dates, timestamps, booleans, ...).
* ``"unknown"``: no schema (CSV, JSON lines).

Errors name the file and the field and the rule, never a value, and never chain a library's
message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import pyarrow as pa

from beam_dp.errors import BadRecordError, data_error

__all__ = [
    "ColumnResolution",
    "ColumnRole",
    "NamedColumn",
    "ResolutionKind",
    "check_export_columns",
    "column_resolution",
    "combine_resolutions",
    "export_resolution",
]

ResolutionKind = Literal["integer", "decimal", "float", "other", "unknown"]

_AVRO_INTEGERS = ("int", "long")
_AVRO_FLOATS = ("float", "double")


@dataclass(frozen=True)
class ColumnResolution:
    """What a file's schema says about a column's values.

    Attributes:
        kind: ``"integer"``, ``"decimal"``, ``"float"``, ``"other"`` or ``"unknown"``.
        scale: digits after the decimal point (0 for integers; None otherwise).
    """

    kind: ResolutionKind
    scale: int | None = None

    @property
    def resolution(self) -> Fraction | None:
        """The spacing of the values the column can hold (1, 1/100, ...), or None."""
        if self.scale is None:
            return None
        return Fraction(1, 10**self.scale)

    @property
    def resolution_text(self) -> str | None:
        """The resolution as decimal text (``"1"``, ``"0.01"``), for ``resolution=``."""
        if self.scale is None:
            return None
        return "1" if self.scale == 0 else "0." + "0" * (self.scale - 1) + "1"


_UNKNOWN = ColumnResolution("unknown")
_FLOAT = ColumnResolution("float")
_OTHER = ColumnResolution("other")
_INTEGER = ColumnResolution("integer", 0)


def _from_arrow(data_type: pa.DataType) -> ColumnResolution:
    if pa.types.is_dictionary(data_type):
        return _from_arrow(data_type.value_type)
    if pa.types.is_integer(data_type):
        return _INTEGER
    if pa.types.is_decimal(data_type):
        scale = int(data_type.scale)
        if scale < 0:  # a negative scale: multiples of 10**-scale, still integers
            return _INTEGER
        return ColumnResolution("decimal", scale) if scale else _INTEGER
    if pa.types.is_floating(data_type):
        return _FLOAT
    return _OTHER


def _from_avro(schema: Any) -> ColumnResolution:
    """The resolution of one Avro field type (a name, a union list or a type object)."""
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        if len(branches) != 1:
            return _OTHER
        return _from_avro(branches[0])
    if isinstance(schema, str):
        if schema in _AVRO_INTEGERS:
            return _INTEGER
        if schema in _AVRO_FLOATS:
            return _FLOAT
        return _OTHER
    if isinstance(schema, Mapping):
        logical = schema.get("logicalType")
        base = schema.get("type")
        if logical == "decimal" and base in ("bytes", "fixed"):
            scale = schema.get("scale", 0)
            if isinstance(scale, int) and not isinstance(scale, bool) and scale >= 0:
                return ColumnResolution("decimal", scale) if scale else _INTEGER
            return _OTHER
        if logical is not None:  # dates, times, timestamps: integers that are not numbers
            return _OTHER
        return _from_avro(base)
    return _OTHER


def _open(path: str) -> Any:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type="uncompressed")


def _format_of(path: str, input_format: str | None) -> str:
    from beam_dp.io.readers import file_format

    return file_format(path, input_format)


def _missing(path: str, field: str) -> BadRecordError:
    return data_error(path, "the file's schema has no such field", field=field)


def _parquet(path: str, field: str) -> ColumnResolution:
    import pyarrow.parquet as pq

    try:
        with _open(path) as handle:
            schema = pq.ParquetFile(handle).schema_arrow  # the footer only
    except Exception:
        raise data_error(path, "cannot read the Parquet footer (not a Parquet file?)") from None
    index = schema.get_field_index(field)
    if index < 0:
        raise _missing(path, field)
    return _from_arrow(schema.field(index).type)


def _avro(path: str, field: str) -> ColumnResolution:
    import fastavro

    try:
        with _open(path) as handle:
            schema = fastavro.reader(handle).writer_schema  # the header only; no record
    except Exception:
        raise data_error(path, "cannot read the Avro header (not an Avro file?)") from None
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise data_error(path, "the Avro schema is not a record")
    for entry in schema.get("fields", ()):
        if isinstance(entry, Mapping) and entry.get("name") == field:
            return _from_avro(entry.get("type"))
    raise _missing(path, field)


def column_resolution(
    path: str, field: str, *, input_format: str | None = None
) -> ColumnResolution:
    """What ``path``'s schema declares about ``field`` (Parquet footer, Avro header).

    Args:
        path: one export file (any filesystem Beam knows).
        field: the value column.
        input_format: ``"parquet"``, ``"avro"``, ``"csv"`` or ``"jsonl"``; from the suffix when
            None.

    Returns:
        The column's :class:`ColumnResolution`; ``"unknown"`` for CSV and JSON lines (no
        schema; the file is not opened).

    Raises:
        BadRecordError: naming the file (and the field): unreadable footer or header, or no
            such field in the schema.
    """
    fmt = _format_of(path, input_format)
    if fmt == "parquet":
        return _parquet(path, field)
    if fmt == "avro":
        return _avro(path, field)
    return _UNKNOWN


def combine_resolutions(resolutions: Iterable[ColumnResolution]) -> ColumnResolution:
    """One resolution for several files: the finest that holds every file's values.

    Integers and decimals combine to the largest scale (every value is a multiple of it);
    any float, other or unknown file makes the whole float, other or unknown (in that order of
    precedence: unknown, other, float), since its values need not lie on a resolution.
    """
    items = list(resolutions)
    if not items:
        return _UNKNOWN
    for kind in ("unknown", "other", "float"):
        if any(item.kind == kind for item in items):
            return ColumnResolution(kind)
    scale = max(item.scale or 0 for item in items)
    return ColumnResolution("decimal", scale) if scale else _INTEGER


def export_resolution(
    paths: Sequence[str], field: str, *, input_format: str | None = None
) -> ColumnResolution:
    """The resolution of ``field`` over all the files of an export (each schema is read)."""
    return combine_resolutions(
        column_resolution(path, field, input_format=input_format) for path in paths
    )


# --- the named columns, checked against every file's schema before anything is charged ------

#: What a named column is for; each has its type rule (:func:`check_export_columns`).
ColumnRole = Literal["unit", "value", "label", "event_seconds", "event_iso8601"]
_ROLES = ("unit", "value", "label", "event_seconds", "event_iso8601")

# A field's declared type, in the few classes the rules tell apart. "unknown": a type the
# rules do not judge (a union of several types, an enum a reader may read as text, ...):
# such a field passes here and the record rules apply when the data is read.
_TypeClass = Literal[
    "integer",
    "float",
    "decimal",
    "text",
    "binary",
    "timestamp",
    "boolean",
    "null",
    "nested",
    "other",
    "unknown",
]

#: The type classes each role accepts (the record rules' own: beam_dp.batching.columns for
#: values and units, the stream job's event-time reader for event times).
_ACCEPTS: dict[str, frozenset[str]] = {
    "unit": frozenset({"integer", "float", "decimal", "text", "binary", "unknown"}),
    "value": frozenset({"integer", "float", "decimal", "text", "null", "unknown"}),
    "label": frozenset(
        {"integer", "float", "decimal", "text", "binary", "boolean", "null", "unknown"}
    ),
    "event_seconds": frozenset({"integer", "float", "decimal", "text", "timestamp", "unknown"}),
    "event_iso8601": frozenset({"text", "timestamp", "unknown"}),
}
_ROLE_NAMES = {
    "unit": "the privacy unit",
    "value": "a value",
    "label": "a label",
    "event_seconds": "the event time",
    "event_iso8601": "the event time",
}
_RULES = {
    "unit": "a privacy unit is an integer, a whole number, text or bytes",
    "value": "the field must be numeric (or text holding numbers)",
    "label": "a label is a single value, not a list or a record",
    "event_seconds": "an event time in seconds is a number, a timestamp or text holding one",
    "event_iso8601": "an ISO 8601 event time is a timestamp or text",
}


@dataclass(frozen=True)
class NamedColumn:
    """A column a job names, what it is for and how the user named it.

    Attributes:
        name: the field's name in the export.
        role: ``"unit"`` (the privacy unit), ``"value"`` (a numeric value), ``"label"`` (a
            candidate or a key), ``"event_seconds"`` or ``"event_iso8601"`` (an event time).
        what: how the user named it, for the message (``"--privacy_unit"``, ``"the value of
            'median'"``); the role's name when empty.
    """

    name: str
    role: ColumnRole
    what: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"'name' must be a non-empty field name; received {self.name!r}")
        if self.role not in _ROLES:
            raise ValueError(f"'role' must be one of {list(_ROLES)}; received {self.role!r}")
        if not isinstance(self.what, str):
            raise ValueError(f"'what' must be text; received {self.what!r}")


def _arrow_class(data_type: pa.DataType) -> _TypeClass:
    if pa.types.is_dictionary(data_type):
        return _arrow_class(data_type.value_type)
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_floating(data_type):
        return "float"
    if pa.types.is_decimal(data_type):
        return "decimal"
    if (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_string_view(data_type)
    ):
        return "text"
    if (
        pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_binary_view(data_type)
        or pa.types.is_fixed_size_binary(data_type)
    ):
        return "binary"
    if pa.types.is_timestamp(data_type):
        return "timestamp"
    if pa.types.is_boolean(data_type):
        return "boolean"
    if pa.types.is_null(data_type):
        return "null"
    if pa.types.is_nested(data_type):
        return "nested"
    return "other"  # dates, times, durations, ...


_AVRO_PRIMITIVES: dict[str, _TypeClass] = {
    "null": "null",
    "boolean": "boolean",
    "int": "integer",
    "long": "integer",
    "float": "float",
    "double": "float",
    "bytes": "binary",
    "string": "text",
}


def _avro_class(schema: Any) -> _TypeClass:
    """The class of one Avro field type (a name, a union list or a type object)."""
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        return _avro_class(branches[0]) if len(branches) == 1 else "unknown"
    if isinstance(schema, str):
        return _AVRO_PRIMITIVES.get(schema, "unknown")  # a named type: judged when read
    if isinstance(schema, Mapping):
        logical = schema.get("logicalType")
        base = schema.get("type")
        if logical == "decimal" and base in ("bytes", "fixed"):
            return "decimal"
        if logical in ("timestamp-millis", "timestamp-micros"):
            return "timestamp"
        if logical is not None:
            return "unknown"
        if base in ("record", "array", "map"):
            return "nested"
        if base == "fixed":
            return "binary"
        if base == "enum":
            return "text"
        return _avro_class(base)
    return "unknown"


def _nearest(name: str, present: Sequence[str]) -> str:
    """``the nearest is 'x' (its fields: ...)``: public names from the schema or header.

    The nearest by :mod:`difflib`'s ratio when one is close (0.5 or more); else the fields
    alone (a name sharing one letter with the typo would mislead).
    """
    import difflib

    if not present:
        return "it has no field"
    ranked = difflib.get_close_matches(name, present, n=1, cutoff=0.5)
    listed = ", ".join(present[:12]) + (", ..." if len(present) > 12 else "")
    if not ranked:
        return f"no field is close (its fields: {listed})"
    return f"the nearest is '{ranked[0]}' (its fields: {listed})"


def _file_fields(
    path: str, fmt: str, skip: bool, json_fields: Sequence[str] | None = None
) -> tuple[str, dict[str, _TypeClass]] | None:
    """``(where, {field: type class})`` from the file's schema or header, or None when the
    format has none that is public (JSON lines without ``json_fields``) or the file is skipped
    as undecodable. JSON lines with ``json_fields``: the operator's declared names (public),
    of unknown type (a JSON value's type is its record's)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            with _open(path) as handle:
                schema = pq.ParquetFile(handle).schema_arrow  # the footer only
        except Exception:
            if skip:
                return None
            raise _undecodable(path, fmt, "its footer") from None
        return "schema", {field.name: _arrow_class(field.type) for field in schema}
    if fmt == "avro":
        import fastavro

        try:
            with _open(path) as handle:
                writer = fastavro.reader(handle).writer_schema  # the header only; no record
        except Exception:
            if skip:
                return None
            raise _undecodable(path, fmt, "its header") from None
        if not isinstance(writer, Mapping) or writer.get("type") != "record":
            if skip:
                return None
            raise _undecodable(path, fmt, "its header", "the schema is not a record")
        return "schema", {
            str(entry.get("name")): _avro_class(entry.get("type"))
            for entry in writer.get("fields", ())
            if isinstance(entry, Mapping)
        }
    if fmt == "csv":
        names = _csv_header_names(path)
        if names is None:
            if skip:
                return None
            raise _undecodable(path, fmt, "its header")
        return "header", dict.fromkeys(names, "text")
    if json_fields is not None:  # declared by the operator: no line is read
        return "declared fields (json_fields)", dict.fromkeys(json_fields, "unknown")
    return None  # JSON lines: a line's keys are a record's, read only once the run is charged


def _undecodable(path: str, fmt: str, where: str, reason: str | None = None) -> BadRecordError:
    """The reader's own error for a file it cannot decode (the same words, before the charge)."""
    from beam_dp.io.decoding import _undecodable_error

    return _undecodable_error(path, fmt, where, reason)


def _csv_header_names(path: str) -> list[str] | None:
    """The field names of a CSV file's header row, read as the reader reads it, or None."""
    from apache_beam.io.filesystems import FileSystems

    from beam_dp.io.decoding import _CSV_READ_BYTES, ReadLimits, _csv_names
    from beam_dp.io.framing import csv_header

    limits = ReadLimits()
    try:
        with FileSystems.open(path) as handle:  # compression from the suffix, as the reader
            header = csv_header(
                handle.read, min(_CSV_READ_BYTES, limits.csv_row_bytes), limits.csv_header_bytes
            )
            if header.row is None:
                return None
            return _csv_names(header.row)
    except Exception:
        return None


def check_export_columns(
    paths: Sequence[str],
    columns: Sequence[NamedColumn],
    *,
    input_format: str | None = None,
    on_bad_record: str = "fail",
    json_fields: Sequence[str] | None = None,
    pattern: str | None = None,
) -> None:
    """Check every named column against every file's schema or header: public facts only.

    Run before anything is charged: a misspelt column, or one whose declared type its role
    cannot use, then costs nothing. Each file's format is its own
    (:func:`beam_dp.io.readers.file_format`: its suffix, else ``input_format``). Parquet's
    footer and Avro's header (schemas) and a CSV file's header row are read; never a record.
    JSON lines have no schema: a line's keys belong to its record (an exporter may leave a
    null field out), so no line is read here. With ``json_fields`` (the operator's list of the
    export's field names, public like a CSV header) the columns are checked against that list;
    without it they are checked only when the data is read, after the charge.

    The files are checked in order, so the first file whose schema disagrees (lacks a column
    the files before it have, or declares it of another type) is the one named.

    Args:
        paths: the export's files (any filesystem Beam knows), e.g. the matched input or a
            stream's landing files present at its start.
        columns: the columns the job names (:class:`NamedColumn`).
        input_format: the format of files whose suffix names none.
        on_bad_record: ``"skip"`` passes over a file whose schema or header cannot be read
            (the reader skips it as undecodable); ``"fail"`` names it.
        json_fields: the JSON lines files' field names as the operator declares them, or
            None (JSON lines columns then checked when read).
        pattern: the location the files come from (a stream's landing pattern); with
            ``json_fields``, when it names JSON lines (its suffix, else ``input_format``), the
            columns are checked against the declared fields even if no file has landed yet.

    Raises:
        BadRecordError: one line naming the file, the column and how it was named, and the
            nearest field the file has (or the type rule broken); never a value.
        ValueError: a file whose format neither its suffix nor ``input_format`` tells.
    """
    from beam_dp.io.readers import file_format

    wanted = list(columns)
    for column in wanted:
        if not isinstance(column, NamedColumn):
            raise ValueError(f"'columns' must hold NamedColumn entries; received {column!r}")
    if json_fields is not None:
        declared = list(json_fields)
        if not declared or not all(isinstance(name, str) and name for name in declared):
            raise ValueError(
                "'json_fields' must list the JSON lines files' field names (non-empty texts)"
            )
    checked = list(paths)
    if json_fields is not None and pattern is not None:
        try:
            if file_format(pattern, input_format) == "jsonl":
                checked.append(pattern)  # its declared fields: no file is opened
        except ValueError:
            pass  # each file tells its format as it lands
    for path in checked:
        fields = _file_fields(
            path, file_format(path, input_format), on_bad_record == "skip", json_fields
        )
        if fields is None:
            continue
        where, types = fields
        for column in wanted:
            what = column.what or _ROLE_NAMES[column.role]
            kind = types.get(column.name)
            if kind is None:
                raise BadRecordError(
                    f"{path}: field '{column.name}' is missing from the file's {where} "
                    f"(rule: {what} is required); "
                    f"{_nearest(column.name, list(types))}"
                )
            if kind not in _ACCEPTS[column.role]:
                raise BadRecordError(
                    f"{path}: field '{column.name}' ({what}) is {kind} in the file's {where} "
                    f"(rule: {_RULES[column.role]})"
                )
