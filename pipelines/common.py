"""What every job shares: flags, running a pipeline, collecting releases, writing outputs.

Jobs are thin CLIs: they parse flags into library parameters, ask a
:class:`~beam_dp.accounting.PrivacyBudget` for their shares *before* the pipeline is built
(so an over-spent budget fails before any data is read), apply beam_dp transforms, and hand
the released records to :func:`run_and_write`. No DP math lives here.

Flags follow Beam's underscore style; flags a job does not know are passed to Beam's
``PipelineOptions`` (``--runner``, ``--direct_num_workers``, ``--temp_location`` ...).
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import PCollection

from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.io.outputs import write_outputs

__all__ = [
    "add_common_arguments",
    "parse_args",
    "print_summary",
    "read_candidates",
    "run_and_write",
]

_LOG = logging.getLogger("beam_dp.pipelines")


def add_common_arguments(parser: argparse.ArgumentParser, *, value: bool = False) -> None:
    """The flags every job has."""
    parser.add_argument("--input", required=True, help="glob over the export's files")
    parser.add_argument(
        "--input_format",
        choices=["avro", "parquet", "csv", "jsonl"],
        default=None,
        help="default: from the file suffix",
    )
    parser.add_argument(
        "--privacy_unit", required=True, help="the field identifying a privacy unit"
    )
    parser.add_argument("--epsilon", type=float, required=True, help="the total epsilon of the job")
    parser.add_argument("--delta", type=float, default=0.0, help="the total delta (default 0)")
    parser.add_argument(
        "--output", required=True, help="directory for release.json/.avro and report.html"
    )
    parser.add_argument(
        "--relation",
        choices=["add_remove", "replace"],
        default="add_remove",
        help="neighbouring relation: add/remove one privacy unit (default) or replace one",
    )
    parser.add_argument(
        "--on_bad_record",
        choices=["fail", "skip"],
        default="fail",
        help="fail on the first bad record (default) or drop bad records and count them",
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, PipelineOptions]:
    """Split ``argv`` into the job's flags and Beam's pipeline options."""
    known, beam_args = parser.parse_known_args(argv)
    return known, PipelineOptions(beam_args)


def read_candidates(spec: str) -> list[str]:
    """Public candidates: a file with one per line, or a comma-separated list."""
    path = Path(spec)
    if path.is_file():
        labels = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        return [label for label in labels if label and not label.startswith("#")]
    return [label.strip() for label in spec.split(",") if label.strip()]


def _log_metrics(result: Any) -> None:
    try:
        counters = result.metrics().query()["counters"]
    except Exception:  # some runners do not report metrics
        return
    for counter in counters:
        if counter.key.metric.namespace == "beam_dp":
            _LOG.info("%s: %s", counter.key.metric.name, counter.committed or counter.attempted)


def run_and_write(
    build: Callable[[beam.Pipeline], Sequence[PCollection]],
    *,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
) -> dict[str, Any]:
    """Build the pipeline with ``build``, run it, record the releases, write the outputs.

    ``build`` returns PCollections of :class:`beam_dp.release.Release`. Releases travel
    back to this process through a temporary file (on ``--temp_location`` when given, so that
    remote runners can write it). Each budget share is recorded once, whatever the number of
    keys or windows it released (their epsilon is accounted by the transform: parallel
    composition or a split, as its ledger says).
    """
    temp_root = options.get_all_options().get("temp_location") or tempfile.gettempdir()
    scratch = tempfile.mkdtemp(
        prefix="beam_dp_releases_", dir=temp_root if os.path.isdir(temp_root) else None
    )
    prefix = os.path.join(scratch, "releases")
    pipeline = beam.Pipeline(options=options)
    releases = build(pipeline)
    (
        tuple(releases)
        | "AllReleases" >> beam.Flatten()
        | "ToJson" >> beam.Map(lambda release: json.dumps(release.to_dict()))
        | "WriteReleases" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl")
    )
    result = pipeline.run()
    result.wait_until_finish()
    _log_metrics(result)
    records: list[dict[str, Any]] = []
    for path in sorted(glob.glob(prefix + "*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    order = {share.name: i for i, share in enumerate(budget.shares)}
    records.sort(
        key=lambda r: (
            order.get(r["name"], len(order)),
            json.dumps(r.get("key")),
            r.get("window") or "",
        )
    )
    recorded: set[str] = set()
    for record in records:
        if record["name"] not in recorded:
            budget.record(LedgerEntry.from_dict(record))
            recorded.add(record["name"])
    document = {"releases": records, "budget": budget.to_json()}
    write_outputs(document, output)
    return document


def print_summary(document: dict[str, Any], file: Any = None) -> None:
    """A readable table of the releases and the budget."""
    out = file if file is not None else sys.stdout
    rows = [("name", "key", "released value", "epsilon", "accuracy (95%)")]
    for r in document["releases"]:
        accuracy = r["accuracy"]
        parts = [f"score within {accuracy['score_loss']:.3g}"] if "score_loss" in accuracy else []
        if "rank_error" in accuracy:
            parts.append(f"rank error <= {accuracy['rank_error']:.3g}")
        value = r["value"]
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        rows.append(
            (
                r["name"],
                "" if r.get("key") is None else str(r["key"]),
                shown,
                f"{r['epsilon']:.4g}",
                "; ".join(parts),
            )
        )
    widths = [min(max(len(row[i]) for row in rows), 48) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print(
            "  ".join(cell[:48].ljust(width) for cell, width in zip(row, widths, strict=True)),
            file=out,
        )
        if n == 0:
            print("  ".join("-" * width for width in widths), file=out)
    budget = document["budget"]
    print(
        f"\nbudget: epsilon {budget['epsilon_spent']:.4g} of {budget['epsilon_total']:.4g} spent, "
        f"delta {budget['delta_spent']:.3g} of {budget['delta_total']:.3g} "
        f"({budget.get('composition', 'basic')} composition)",
        file=out,
    )
