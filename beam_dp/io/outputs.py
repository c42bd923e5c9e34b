"""Write a job's outputs: ``release.json``, ``release.avro`` and ``report.html``.

Everything written here is built from released values and public parameters only (the
release records and the budget): no score, count or record ever reaches these files.
Outputs are written into a temporary directory beside the target and moved into place only
when all of them are complete, so a failed job leaves nothing partial in the output directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fastavro

from beam_dp.io.report import render_report

__all__ = [
    "OUTPUT_FILES",
    "atomic_output_dir",
    "read_release_avro",
    "write_outputs",
    "write_release_avro",
    "write_release_json",
    "write_report",
]

OUTPUT_FILES = ("release.json", "release.avro", "report.html")

_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Release",
    "namespace": "beam_dp",
    "doc": "One differentially private release (DESIGN section 7), one row per release.",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "statistic", "type": "string"},
        {"name": "value_json", "type": "string", "doc": "the released value, JSON-encoded"},
        {"name": "key_json", "type": ["null", "string"], "default": None},
        {"name": "window", "type": ["null", "string"], "default": None},
        {"name": "mechanism", "type": "string"},
        {"name": "epsilon", "type": "double"},
        {"name": "delta", "type": "double"},
        {"name": "rho", "type": ["null", "double"], "default": None},
        {"name": "sensitivity", "type": "double"},
        {"name": "neighbouring", "type": "string"},
        {"name": "monotone", "type": "boolean"},
        {"name": "num_candidates", "type": "long"},
        {"name": "contribution_bounds", "type": {"type": "map", "values": "long"}},
        {"name": "accuracy", "type": {"type": "map", "values": "double"}},
        {
            "name": "accuracy_units",
            "type": ["null", {"type": "map", "values": "string"}],
            "default": None,
            "doc": "the unit of each accuracy bound, when the release states them",
        },
        {
            "name": "accuracy_description",
            "type": ["null", "string"],
            "default": None,
            "doc": "the accuracy in one plain sentence, when the release states it",
        },
        {"name": "rng", "type": "string"},
        {"name": "budget_json", "type": "string", "doc": "the job's budget object, JSON"},
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


def write_release_json(document: Mapping[str, Any], path: Path) -> None:
    """The document as UTF-8 JSON (unicode labels written as themselves, not ``\\u`` escapes)."""
    text = json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def _avro_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    budget_json = json.dumps(document["budget"], sort_keys=True)
    rows = []
    for release in document["releases"]:
        rows.append(
            {
                "name": release["name"],
                "statistic": release["statistic"],
                "value_json": json.dumps(release["value"]),
                "key_json": json.dumps(release["key"]) if "key" in release else None,
                "window": release.get("window"),
                "mechanism": release["mechanism"],
                "epsilon": float(release["epsilon"]),
                "delta": float(release["delta"]),
                "rho": None if release.get("rho") is None else float(release["rho"]),
                "sensitivity": float(release["sensitivity"]),
                "neighbouring": release["neighbouring"],
                "monotone": bool(release["monotone"]),
                "num_candidates": int(release["num_candidates"]),
                "contribution_bounds": {
                    k: int(v) for k, v in release["contribution_bounds"].items()
                },
                "accuracy": {k: float(v) for k, v in release["accuracy"].items()},
                "accuracy_units": release.get("accuracy_units"),
                "accuracy_description": release.get("accuracy_description"),
                "rng": release["rng"],
                "budget_json": budget_json,
            }
        )
    return rows


def write_release_avro(document: Mapping[str, Any], path: Path) -> None:
    """One Avro row per release; the budget rides along as JSON (and in the file metadata)."""
    schema = fastavro.parse_schema(_AVRO_SCHEMA)
    with path.open("wb") as handle:
        fastavro.writer(
            handle,
            schema,
            _avro_rows(document),
            metadata={"beam_dp.budget": json.dumps(document["budget"], sort_keys=True)},
        )


def read_release_avro(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``release.avro`` back into the ``release.json`` document."""
    with Path(path).open("rb") as handle:
        reader = fastavro.reader(handle)
        budget = json.loads(str(reader.metadata["beam_dp.budget"]))
        releases = []
        for raw in reader:
            row: dict[str, Any] = raw  # type: ignore[assignment]
            record: dict[str, Any] = {
                "name": row["name"],
                "statistic": row["statistic"],
                "value": json.loads(row["value_json"]),
            }
            if row["key_json"] is not None:
                record["key"] = json.loads(row["key_json"])
            if row["window"] is not None:
                record["window"] = row["window"]
            for field in (
                "mechanism",
                "epsilon",
                "delta",
                "rho",
                "sensitivity",
                "neighbouring",
                "monotone",
                "num_candidates",
                "contribution_bounds",
                "accuracy",
                "accuracy_units",
                "accuracy_description",
                "rng",
            ):
                if field in ("accuracy_units", "accuracy_description") and row[field] is None:
                    continue  # optional: absent from the release, absent again
                record[field] = row[field]
            releases.append(record)
    return {"releases": releases, "budget": budget}


def write_report(document: Mapping[str, Any], directory: Path) -> None:
    """``report.html``: the releases, their accuracy and the budget on one page.

    See :mod:`beam_dp.io.report` (plain HTML and CSS, no image file).

    **Privacy**: built from ``document`` only (released values and public parameters).
    """
    (directory / "report.html").write_text(render_report(document), encoding="utf-8")


def write_outputs(document: Mapping[str, Any], output_dir: str | os.PathLike[str]) -> Path:
    """Write every output file atomically into ``output_dir``; return its path."""
    with atomic_output_dir(output_dir) as staging:
        write_release_json(document, staging / "release.json")
        write_release_avro(document, staging / "release.avro")
        write_report(document, staging)
    return Path(output_dir)
