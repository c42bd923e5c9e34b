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
    "ResolutionKind",
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
    from beam_dp.io.readers import FORMATS, detect_format

    if input_format is None:
        return detect_format(path)
    if input_format not in FORMATS:
        raise ValueError(
            f"'input_format' must be one of {list(FORMATS)}; received {input_format!r}"
        )
    return input_format


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
