"""Releases as schema'd Beam rows, for Beam's own transforms and sinks.

``releases | ReleaseRows()`` turns each :class:`~beam_dp.release.Release` into a
:class:`ReleaseRow`: a NamedTuple with a RowCoder whose fields are the typed columns of
``release.avro`` (:data:`~beam_dp.io.outputs.RELEASE_AVRO_SCHEMA`, the one schema both follow):
the value in the column its kind names (``value_kind``), the key, the window, the budget, the
accuracy and contribution bounds as lists of ``(name, value)`` rows, the notes. So a pipeline can
``beam.Select`` fields, or write the releases with Beam's own sinks, without parsing JSON.
``releases | ReleaseRecords()`` gives the same rows as dicts in the Avro schema's form, for
``WriteToAvro(schema=RELEASE_AVRO_SCHEMA)``.

Writing through a sink keeps the releases inside the graph: Beam's file sinks commit the files
of the bundles that succeeded, once, so a retried bundle's sample never reaches the output
(a DoFn that writes files itself would publish every attempt).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.coders import RowCoder
from apache_beam.coders.typecoders import registry
from apache_beam.pvalue import PCollection

from beam_dp.io.outputs import RELEASE_AVRO_SCHEMA, release_avro_rows
from beam_dp.release import Release

__all__ = ["ReleaseRecords", "ReleaseRow", "ReleaseRows"]

_PRIMITIVES: dict[str, Any] = {
    "string": str,
    "double": float,
    "long": int,
    "boolean": bool,
}
_ROW_TYPES: dict[str, type] = {}


def _python_type(avro: Any) -> Any:
    """The Python type hint of an Avro type (records become registered NamedTuples)."""
    if isinstance(avro, str):
        if avro in _ROW_TYPES:
            return _ROW_TYPES[avro]
        return _PRIMITIVES[avro]
    if isinstance(avro, list):  # ["null", X]: the only unions the schema uses
        (inner,) = [t for t in avro if t != "null"]
        return typing.Optional[_python_type(inner)]  # noqa: UP045 (Beam reads typing forms)
    kind = avro["type"]
    if kind == "array":
        return Sequence[_python_type(avro["items"])]  # type: ignore[misc]
    if kind == "enum":
        return str
    if kind == "record":
        return _row_type(avro)
    return _python_type(kind)


def _row_type(record: Mapping[str, Any]) -> type:
    name = record["name"]
    if name not in _ROW_TYPES:
        fields = [(field["name"], _python_type(field["type"])) for field in record["fields"]]
        row_name = "ReleaseRow" if name == "Release" else f"Release{name}Row"
        row = NamedTuple(row_name, fields)  # type: ignore[misc]
        row.__module__ = __name__
        row.__qualname__ = row.__name__
        globals()[row.__name__] = row  # importable by name: pickled by reference on workers
        registry.register_coder(row, RowCoder)
        _ROW_TYPES[name] = row
    return _ROW_TYPES[name]


#: One release as a schema'd row: the fields of ``release.avro``, typed.
ReleaseRow: type = _row_type(RELEASE_AVRO_SCHEMA)


def _as_row(value: Any, avro: Any) -> Any:
    """A value of the Avro row form as the NamedTuples of :data:`ReleaseRow`'s fields."""
    if value is None:
        return None
    if isinstance(avro, list):
        (inner,) = [t for t in avro if t != "null"]
        return _as_row(value, inner)
    if isinstance(avro, str):
        return _as_row(value, _SCHEMAS[avro]) if avro in _SCHEMAS else value
    kind = avro["type"]
    if kind == "array":
        return [_as_row(item, avro["items"]) for item in value]
    if kind == "record":
        row_type = _ROW_TYPES[avro["name"]]
        return row_type(**{f["name"]: _as_row(value[f["name"]], f["type"]) for f in avro["fields"]})
    return value


def _named_records(avro: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Every named record of the schema by name (Avro refers to a record by name once defined)."""
    if isinstance(avro, list):
        for item in avro:
            _named_records(item, found)
    elif isinstance(avro, Mapping):
        if avro.get("type") == "record":
            found.setdefault(avro["name"], avro)
            for field in avro["fields"]:
                _named_records(field["type"], found)
        elif avro.get("type") == "array":
            _named_records(avro["items"], found)
    return found


_SCHEMAS = _named_records(RELEASE_AVRO_SCHEMA, {})


def release_record(release: Release) -> dict[str, Any]:
    """One release in the Avro schema's dict form (no run: ``run_id`` and ``released_at`` are
    empty; a job's ``release.avro`` fills them)."""
    (record,) = release_avro_rows({"releases": [release.to_dict()]})
    return record


@beam.typehints.with_input_types(Release)
@beam.typehints.with_output_types(dict[str, Any])
class ReleaseRecords(beam.PTransform):
    """Releases as dicts of :data:`~beam_dp.io.outputs.RELEASE_AVRO_SCHEMA` (for
    ``WriteToAvro``)."""

    def expand(self, releases: PCollection) -> PCollection:
        return releases | "ToRecord" >> beam.Map(release_record)


@beam.typehints.with_input_types(Release)
class ReleaseRows(beam.PTransform):
    """Releases as schema'd :data:`ReleaseRow` elements (``beam.Select``, Beam's sinks)."""

    def expand(self, releases: PCollection) -> PCollection:
        return releases | "ToRow" >> beam.Map(
            lambda release: _as_row(release_record(release), RELEASE_AVRO_SCHEMA)
        ).with_output_types(ReleaseRow)
