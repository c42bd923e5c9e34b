"""Write a job's outputs: ``release.json``, ``release.avro`` and ``report.html`` (+ chart PNG).

Everything written here is built from released values and public parameters only (the
release records and the budget): no score, count or record ever reaches these files.
Outputs are written into a temporary directory beside the target and moved into place only
when all of them are complete, so a failed job leaves nothing partial in the output directory.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fastavro

__all__ = [
    "OUTPUT_FILES",
    "atomic_output_dir",
    "read_release_avro",
    "write_outputs",
    "write_release_avro",
    "write_release_json",
    "write_report",
]

OUTPUT_FILES = ("release.json", "release.avro", "report.html", "report.png")

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
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")


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
                "rng",
            ):
                record[field] = row[field]
            releases.append(record)
    return {"releases": releases, "budget": budget}


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ", ".join(_shown(v) for v in value)
    return str(value)


def _shorten(text: str, width: int = 58) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _chart_png(document: Mapping[str, Any]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    releases = list(document["releases"])
    budget = document["budget"]
    labels = [
        r["name"]
        + (f" [{r['key']}]" if "key" in r else "")
        + (f" {r['window']}" if "window" in r else "")
        for r in releases
    ]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, max(3.0, 0.45 * len(releases) + 1.5)))
    # budget split: epsilon charged per budget share (a per-key statistic is one share, however
    # many keys it released), and what is left
    shares = list(budget.get("shares", []))
    share_names = [str(share["name"]) for share in shares]
    epsilons = [float(share.get("epsilon_spent", share.get("epsilon", 0.0))) for share in shares]
    if not shares:  # a budget without a share list: one bar per release
        share_names = labels
        epsilons = [float(r["epsilon"]) for r in releases]
    remaining = max(float(budget["epsilon_total"]) - float(budget["epsilon_spent"]), 0.0)
    names = [*share_names, "unspent"]
    left.barh(names, [*epsilons, remaining], color=["#4C72B0"] * len(epsilons) + ["#CCCCCC"])
    left.set_xlabel("epsilon")
    left.set_title(f"Budget split (total epsilon = {float(budget['epsilon_total']):g})")
    left.invert_yaxis()
    # released numeric values with their accuracy bounds (public: from the mechanism's guarantee)
    numeric = [
        (label, r)
        for label, r in zip(labels, releases, strict=True)
        if isinstance(r["value"], (int, float)) and not isinstance(r["value"], bool)
    ]
    if numeric:
        ys = range(len(numeric))
        values = [float(r["value"]) for _, r in numeric]
        half_widths = [float(r["accuracy"].get("cell_width", 0.0)) for _, r in numeric]
        right.errorbar(values, list(ys), xerr=half_widths, fmt="o", color="#DD8452", capsize=4)
        right.set_yticks(list(ys), [label for label, _ in numeric])
        right.invert_yaxis()
        right.set_title("Released values (bars: grid cell width)")
        right.xaxis.set_major_locator(MaxNLocator(5))
    else:
        right.axis("off")
    lines = [
        _shorten(
            f"{label}: {_shown(r['value'])} (score within "
            f"{float(r['accuracy'].get('score_loss', 0.0)):.3g} at "
            f"{float(r['accuracy'].get('confidence', 0.95)):.0%})"
        )
        for label, r in zip(labels, releases, strict=True)
        if not (isinstance(r["value"], (int, float)) and not isinstance(r["value"], bool))
    ]
    if lines:
        right.text(
            0.0, -0.25, "\n".join(lines[:12]), transform=right.transAxes, va="top", fontsize=8
        )
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def write_report(document: Mapping[str, Any], directory: Path) -> None:
    """``report.html`` with the releases, their accuracy and the budget, plus ``report.png``."""
    png = _chart_png(document)
    (directory / "report.png").write_bytes(png)
    budget = document["budget"]
    rows = []
    for r in document["releases"]:
        accuracy = ", ".join(f"{k} = {v:.4g}" for k, v in r["accuracy"].items())
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(cell))}</td>"
                for cell in (
                    r["name"],
                    r["statistic"],
                    r.get("key", ""),
                    json.dumps(r["value"]),
                    r["mechanism"],
                    f"{float(r['epsilon']):.4g}",
                    r["neighbouring"],
                    accuracy,
                )
            )
            + "</tr>"
        )
    encoded = base64.b64encode(png).decode("ascii")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>beam-dp release report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:4px 8px;text-align:left}}</style></head>
<body>
<h1>Differentially private releases</h1>
<p>Budget: epsilon {float(budget["epsilon_spent"]):.4g} spent of
{float(budget["epsilon_total"]):.4g};
delta {float(budget["delta_spent"]):.3g} spent of {float(budget["delta_total"]):.3g}
(composition: {html.escape(str(budget.get("composition", "basic")))}).
Only released values and public parameters appear on this page.</p>
<table><tr><th>name</th><th>statistic</th><th>key</th><th>value</th><th>mechanism</th>
<th>epsilon</th><th>neighbouring</th><th>accuracy</th></tr>
{"".join(rows)}
</table>
<p><img id="chart" alt="budget split and released values" src="data:image/png;base64,{encoded}"></p>
</body></html>
"""
    (directory / "report.html").write_text(page, encoding="utf-8")


def write_outputs(document: Mapping[str, Any], output_dir: str | os.PathLike[str]) -> Path:
    """Write every output file atomically into ``output_dir``; return its path."""
    with atomic_output_dir(output_dir) as staging:
        write_release_json(document, staging / "release.json")
        write_release_avro(document, staging / "release.avro")
        write_report(document, staging)
    return Path(output_dir)
