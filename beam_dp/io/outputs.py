"""Write a job's outputs: ``release.json``, ``release.avro`` and ``report.html``.

Everything written here is built from released values and public parameters only (the
release records and the budget): no score, count or record ever reaches these files.

Outputs go through Beam's ``FileSystems``, so ``gs://``, ``s3://`` and every registered scheme
work. A local directory is written into a temporary directory beside it and moved into place
only when every file is complete, so a failed job leaves nothing in it; on a remote filesystem
each file is written under a temporary name inside the output location and renamed into place
when all three are written (a failure removes them).

``release.avro`` holds typed records, one per release, that fastavro, polars and pyarrow read
without parsing JSON: the value in the column of its kind (``value_number``, ``value_integer``,
``value_text``, ``value_numbers``, ``value_integers``, ``value_texts`` or ``value_cdf``, with
``value_kind`` naming it), the accuracy bounds and the contribution bounds as arrays of
``{name, value}`` records (no map fields), and the run's id and time on every row. A quantile
release's intervals are the record ``interval`` (``quantiles``, ``lower``, ``upper``: arrays in
the release's order; ``confidence``, ``method``, ``epsilon``, ``rho``, ``share``), null for other
releases. The budget (and the files skipped under ``on_bad_record="skip"``) ride in the file's
metadata.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fastavro
from apache_beam.io.filesystems import FileSystems

from beam_dp.io.report import render_report

__all__ = [
    "OUTPUT_FILES",
    "RELEASE_AVRO_SCHEMA",
    "atomic_output_dir",
    "output_files",
    "read_release_avro",
    "release_avro_rows",
    "write_outputs",
]

OUTPUT_FILES = ("release.json", "release.avro", "report.html")

_BOUND = {
    "type": "record",
    "name": "Bound",
    "fields": [{"name": "name", "type": "string"}, {"name": "value", "type": "long"}],
}
_ACCURACY = {
    "type": "record",
    "name": "AccuracyBound",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": ["null", "string"], "default": None},
    ],
}
_QUANTILE = {
    "type": "record",
    "name": "QuantileValue",
    "fields": [{"name": "alpha", "type": "double"}, {"name": "value", "type": "double"}],
}
_CDF = {
    "type": "record",
    "name": "CDFValue",
    "doc": "a released CDF: its points, its steps and cumulative fractions, its quantiles",
    "fields": [
        {"name": "points", "type": {"type": "array", "items": "double"}},
        {"name": "steps", "type": {"type": "array", "items": "double"}},
        {"name": "cdf", "type": {"type": "array", "items": "double"}},
        {"name": "quantiles", "type": {"type": "array", "items": _QUANTILE}},
        {"name": "lower", "type": "double"},
        {"name": "upper", "type": "double"},
        {"name": "k", "type": "long"},
        {"name": "n_hat", "type": ["null", "long"], "default": None},
        {"name": "count_released", "type": "boolean"},
    ],
}
_INTERVAL = {
    "type": "record",
    "name": "QuantileIntervals",
    "doc": "randomization intervals of a quantile release, in the column's units",
    "fields": [
        {"name": "quantiles", "type": {"type": "array", "items": "double"}},
        {"name": "lower", "type": {"type": "array", "items": "double"}},
        {"name": "upper", "type": {"type": "array", "items": "double"}},
        {"name": "confidence", "type": "double"},
        {"name": "method", "type": "string"},
        {"name": "epsilon", "type": "double"},
        {"name": "rho", "type": ["null", "double"], "default": None},
        {"name": "share", "type": ["null", "double"], "default": None},
    ],
}
_KINDS = ("number", "integer", "text", "numbers", "integers", "texts", "cdf")


def _optional(kind: Any) -> dict[str, Any]:
    return {"type": ["null", kind], "default": None}


RELEASE_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Release",
    "namespace": "beam_dp",
    "doc": "One differentially private release (DESIGN section 7), one row per release.",
    "fields": [
        {"name": "run_id", "type": "string", "doc": "the job run that released it"},
        {"name": "released_at", "type": "string", "doc": "when the run released it (UTC)"},
        {"name": "name", "type": "string"},
        {"name": "statistic", "type": "string"},
        {"name": "value_kind", "type": {"type": "enum", "name": "ValueKind", "symbols": _KINDS}},
        {"name": "value_number", **_optional("double")},
        {"name": "value_integer", **_optional("long")},
        {"name": "value_text", **_optional("string")},
        {"name": "value_numbers", **_optional({"type": "array", "items": "double"})},
        {"name": "value_integers", **_optional({"type": "array", "items": "long"})},
        {"name": "value_texts", **_optional({"type": "array", "items": "string"})},
        {"name": "value_cdf", **_optional(_CDF)},
        {"name": "interval", **_optional(_INTERVAL)},
        {"name": "key_text", **_optional("string")},
        {"name": "key_integer", **_optional("long")},
        {"name": "window", **_optional("string")},
        {"name": "mechanism", "type": "string"},
        {"name": "epsilon", "type": "double"},
        {"name": "delta", "type": "double"},
        {"name": "rho", **_optional("double")},
        {"name": "sensitivity", "type": "double"},
        {"name": "neighbouring", "type": "string"},
        {"name": "monotone", "type": "boolean"},
        {"name": "num_candidates", "type": "long"},
        {"name": "contribution_bounds", "type": {"type": "array", "items": _BOUND}},
        {"name": "accuracy", "type": {"type": "array", "items": _ACCURACY}},
        {"name": "accuracy_description", **_optional("string")},
        {"name": "notes", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "rng", "type": "string"},
    ],
}


@contextlib.contextmanager
def atomic_output_dir(output_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory; on success move its files into ``output_dir``.

    On an exception the temporary directory is removed and ``output_dir`` is untouched
    (created only if the job succeeds).
    """
    target = Path(output_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        yield staging
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(staging.iterdir()):
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value_columns(value: Any) -> dict[str, Any]:
    """The typed column (and ``value_kind``) of one released value."""
    if isinstance(value, Mapping) and "points" in value:
        quantiles = [
            {"alpha": float(alpha), "value": float(point)}
            for alpha, point in sorted(
                value.get("quantiles", {}).items(), key=lambda i: float(i[0])
            )
        ]
        cdf = {
            "points": [float(x) for x in value["points"]],
            "steps": [float(x) for x in value.get("steps", value["points"])],
            "cdf": [float(x) for x in value.get("cdf", [])],
            "quantiles": quantiles,
            "lower": float(value["lower"]),
            "upper": float(value["upper"]),
            "k": int(value["k"]),
            "n_hat": None if value.get("n_hat") is None else int(value["n_hat"]),
            "count_released": bool(value.get("count_released", False)),
        }
        return {"value_kind": "cdf", "value_cdf": cdf}
    if isinstance(value, list):
        if all(_is_integer(v) for v in value) and value:
            return {"value_kind": "integers", "value_integers": [int(v) for v in value]}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return {"value_kind": "numbers", "value_numbers": [float(v) for v in value]}
        if all(isinstance(v, str) for v in value):
            return {"value_kind": "texts", "value_texts": list(value)}
    elif _is_integer(value):
        return {"value_kind": "integer", "value_integer": int(value)}
    elif isinstance(value, float):
        return {"value_kind": "number", "value_number": value}
    elif isinstance(value, str):
        return {"value_kind": "text", "value_text": value}
    raise TypeError(f"a released value of type {type(value).__name__} has no Avro column")


def _value_of(row: Mapping[str, Any]) -> Any:
    kind = row["value_kind"]
    if kind != "cdf":
        return row[f"value_{kind}"]
    cdf = dict(row["value_cdf"])
    quantiles = cdf.pop("quantiles")
    value: dict[str, Any] = {
        "points": cdf["points"],
        "steps": cdf["steps"],
        "cdf": cdf["cdf"],
        "quantiles": {_alpha_text(q["alpha"]): q["value"] for q in quantiles},
        "lower": cdf["lower"],
        "upper": cdf["upper"],
        "k": cdf["k"],
        "n_hat": cdf["n_hat"],
        "count_released": cdf["count_released"],
    }
    return value


def _ends(ends: Any) -> list[float]:
    return [float(x) for x in ends] if isinstance(ends, list) else [float(ends)]


def _interval_columns(interval: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``interval`` record of a release (ends as arrays whatever the value's shape)."""
    if interval is None:
        return None
    return {
        "quantiles": [float(q) for q in interval["quantiles"]],
        "lower": _ends(interval["lower"]),
        "upper": _ends(interval["upper"]),
        "confidence": float(interval["confidence"]),
        "method": str(interval["method"]),
        "epsilon": float(interval["epsilon"]),
        "rho": None if interval.get("rho") is None else float(interval["rho"]),
        "share": None if interval.get("share") is None else float(interval["share"]),
    }


def _interval_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """``release.json``'s ``interval`` back from its record: ends as numbers for a one-number
    value, as lists otherwise (as the release writes them)."""
    record = row.get("interval")
    if record is None:
        return None
    scalar = row["value_kind"] in ("number", "integer")
    out: dict[str, Any] = {
        "lower": record["lower"][0] if scalar else list(record["lower"]),
        "upper": record["upper"][0] if scalar else list(record["upper"]),
        "confidence": record["confidence"],
        "method": record["method"],
        "quantiles": list(record["quantiles"]),
        "epsilon": record["epsilon"],
    }
    for field in ("rho", "share"):
        if record[field] is not None:
            out[field] = record[field]
    return out


def _alpha_text(alpha: float) -> str:
    """A CDF quantile's name in ``release.json`` (``f"{alpha:g}"``, as the release writes it)."""
    return f"{alpha:g}"


def release_avro_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One typed row per release of a ``release.json`` document (:data:`RELEASE_AVRO_SCHEMA`)."""
    run = document.get("run", {})
    rows = []
    for release in document["releases"]:
        key = release.get("key")
        if key is not None and not isinstance(key, str) and not _is_integer(key):
            raise TypeError(f"a key of type {type(key).__name__} has no Avro column")
        units = release.get("accuracy_units") or {}
        rows.append(
            {
                "run_id": str(run.get("id", "")),
                "released_at": str(run.get("released_at", "")),
                "name": release["name"],
                "statistic": release["statistic"],
                **{f"value_{kind}": None for kind in _KINDS},
                **_value_columns(release["value"]),
                "interval": _interval_columns(release.get("interval")),
                "key_text": key if isinstance(key, str) else None,
                "key_integer": key if _is_integer(key) else None,
                "window": release.get("window"),
                "mechanism": release["mechanism"],
                "epsilon": float(release["epsilon"]),
                "delta": float(release["delta"]),
                "rho": None if release.get("rho") is None else float(release["rho"]),
                "sensitivity": float(release["sensitivity"]),
                "neighbouring": release["neighbouring"],
                "monotone": bool(release["monotone"]),
                "num_candidates": int(release["num_candidates"]),
                "contribution_bounds": [
                    {"name": k, "value": int(v)} for k, v in release["contribution_bounds"].items()
                ],
                "accuracy": [
                    {"name": k, "value": float(v), "unit": units.get(k)}
                    for k, v in release["accuracy"].items()
                ],
                "accuracy_description": release.get("accuracy_description"),
                "notes": list(release.get("notes") or ()),
                "rng": release["rng"],
            }
        )
    return rows


def _release_json(document: Mapping[str, Any]) -> bytes:
    """The document as UTF-8 JSON (unicode labels written as themselves, not ``\\u`` escapes)."""
    return (json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()


def _release_avro(document: Mapping[str, Any]) -> bytes:
    """One typed Avro row per release; the budget and the run in the file's metadata."""
    metadata = {"beam_dp.budget": json.dumps(document["budget"], sort_keys=True)}
    if document.get("run") is not None:
        metadata["beam_dp.run"] = json.dumps(document["run"], sort_keys=True)
    if document.get("skipped_files"):
        metadata["beam_dp.skipped_files"] = json.dumps(document["skipped_files"])
    buffer = io.BytesIO()
    fastavro.writer(
        buffer,
        fastavro.parse_schema(RELEASE_AVRO_SCHEMA),
        release_avro_rows(document),
        metadata=metadata,
    )
    return buffer.getvalue()


def output_files(document: Mapping[str, Any]) -> dict[str, bytes]:
    """The three output files' bytes (``report.html``: :mod:`beam_dp.io.report`).

    **Privacy**: built from ``document`` only (released values and public parameters).
    """
    return {
        "release.json": _release_json(document),
        "release.avro": _release_avro(document),
        "report.html": render_report(document).encode("utf-8"),
    }


def write_outputs(document: Mapping[str, Any], output: str | os.PathLike[str]) -> str:
    """Write every output file into ``output`` (a directory or a ``scheme://`` location),
    all or nothing (module docstring); return ``output``."""
    files = output_files(document)
    target = os.fspath(output)
    if "://" not in target:
        with atomic_output_dir(target) as staging:
            for name, data in files.items():
                (staging / name).write_bytes(data)
        return target
    tag = uuid.uuid4().hex
    staged = {name: FileSystems.join(target, f".{name}.partial-{tag}") for name in files}
    try:
        for name, data in files.items():
            with FileSystems.create(staged[name]) as handle:
                handle.write(data)
        finals = [FileSystems.join(target, name) for name in files]
        present = [path for path in finals if FileSystems.exists(path)]
        if present:  # --overwrite: the earlier run's files go first
            FileSystems.delete(present)
        FileSystems.rename([staged[name] for name in files], finals)
    except BaseException:
        with contextlib.suppress(Exception):
            leftover = [path for path in staged.values() if FileSystems.exists(path)]
            if leftover:
                FileSystems.delete(leftover)
        raise
    return target


def read_release_avro(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``release.avro`` back into the ``release.json`` document (through ``FileSystems``)."""
    with FileSystems.open(os.fspath(path)) as handle:
        reader = fastavro.reader(io.BytesIO(handle.read()))
        document: dict[str, Any] = {}
        releases = []
        for raw in reader:
            row: dict[str, Any] = raw  # type: ignore[assignment]
            record: dict[str, Any] = {
                "name": row["name"],
                "statistic": row["statistic"],
                "value": _value_of(row),
            }
            interval = _interval_of(row)
            if interval is not None:
                record["interval"] = interval
            key = row["key_text"] if row["key_text"] is not None else row["key_integer"]
            if key is not None:
                record["key"] = key
            if row["window"] is not None:
                record["window"] = row["window"]
            for field in ("mechanism", "epsilon", "delta", "rho", "sensitivity", "neighbouring",
                          "monotone", "num_candidates"):  # fmt: skip
                record[field] = row[field]
            record["contribution_bounds"] = {
                b["name"]: b["value"] for b in row["contribution_bounds"]
            }
            record["accuracy"] = {a["name"]: a["value"] for a in row["accuracy"]}
            units = {a["name"]: a["unit"] for a in row["accuracy"] if a["unit"] is not None}
            if units:
                record["accuracy_units"] = units
            if row["accuracy_description"] is not None:
                record["accuracy_description"] = row["accuracy_description"]
            if row["notes"]:
                record["notes"] = list(row["notes"])
            record["rng"] = row["rng"]
            releases.append(record)
        metadata = reader.metadata
        document["releases"] = releases
        document["budget"] = json.loads(str(metadata["beam_dp.budget"]))
        if "beam_dp.run" in metadata:
            document["run"] = json.loads(str(metadata["beam_dp.run"]))
        if "beam_dp.skipped_files" in metadata:
            document["skipped_files"] = json.loads(str(metadata["beam_dp.skipped_files"]))
    return document
