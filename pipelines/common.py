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
import json
import logging
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import PCollection

from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.batching.columns import BadRecordError
from beam_dp.io import ReadExport
from beam_dp.io.outputs import write_outputs
from beam_dp.release import Release, ledger_entries_to_record
from pipelines.statistics import StatisticSpec

__all__ = [
    "add_common_arguments",
    "cli",
    "parse_args",
    "print_summary",
    "read_candidates",
    "run_and_write",
    "run_single",
    "run_statistics",
]

_LOG = logging.getLogger("beam_dp.pipelines")
_LOG.setLevel(logging.INFO)


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
            value = counter.committed if counter.committed is not None else counter.attempted
            _LOG.info("%s: %s: %s", counter.key.step, counter.key.metric.name, value)


class _WriteRelease(beam.DoFn):
    """Each release to its own small JSON file (works on every runner and filesystem)."""

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def process(self, release: Release) -> None:
        path = FileSystems.join(self._directory, f"{uuid.uuid4().hex}.json")
        with FileSystems.create(path) as handle:
            handle.write(json.dumps(release.to_dict()).encode("utf-8"))


def run_and_write(
    build: Callable[[beam.Pipeline], Sequence[PCollection]],
    *,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
) -> dict[str, Any]:
    """Build the pipeline with ``build``, run it, record the releases, write the outputs.

    ``build`` returns PCollections of :class:`beam_dp.release.Release`. Releases travel
    back to this process as small files in a temporary directory (under ``--temp_location``
    when given, so that remote workers can write it). Each transform is charged once,
    whatever the number of keys it released (their epsilon is accounted by the transform:
    parallel composition or a split, as its ledger says). Jobs read bounded exports, so
    there is one (global) window.
    """
    temp_root = options.get_all_options().get("temp_location") or tempfile.gettempdir()
    scratch = FileSystems.join(temp_root, f"beam_dp_releases_{uuid.uuid4().hex}")
    FileSystems.mkdirs(scratch)
    pipeline = beam.Pipeline(options=options)
    outputs = build(pipeline)
    _ = (
        tuple(outputs)
        | "AllReleases" >> beam.Flatten()
        | "Collect" >> beam.ParDo(_WriteRelease(scratch))
    )
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner's distributed.Client
        if client is not None:
            client.close()
    _log_metrics(result)
    records: list[dict[str, Any]] = []
    try:
        for match in FileSystems.match([FileSystems.join(scratch, "*.json")])[0].metadata_list:
            with FileSystems.open(match.path) as handle:
                records.append(json.loads(handle.read().decode("utf-8")))
    finally:
        FileSystems.delete([scratch])
    order = {share.name: i for i, share in enumerate(budget.shares)}
    records.sort(
        key=lambda r: (
            order.get(r["name"], len(order)),
            json.dumps(r.get("key")),
            r.get("window") or "",
        )
    )
    # Charge the budget once per transform: a .PerKey transform's releases cost as many of
    # their entries as keys a unit can reach, as the library's ledger says.
    releases = [
        Release(
            value=r["value"],
            ledger=LedgerEntry.from_dict(r),
            key=r.get("key"),
            window=r.get("window"),
        )
        for r in records
    ]
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)
    document = {"releases": records, "budget": budget.to_json()}
    write_outputs(document, output)
    return document


def run_statistics(
    specs: Sequence[StatisticSpec],
    *,
    input_pattern: str,
    input_format: str | None,
    privacy_unit: str | None,
    relation: str,
    on_bad_record: str,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
) -> dict[str, Any]:
    """Request every share, finalize the budget (before any data is read), then run.

    The export is read once; every statistic's transform consumes the same batches.
    """
    for spec in specs:
        spec.request(budget)
    budget.finalize()
    transforms = [
        (
            spec,
            spec.transform(
                unit_column=privacy_unit, relation=relation, on_bad_record=on_bad_record
            ),
        )
        for spec in specs
    ]
    columns = list(
        dict.fromkeys(
            ([privacy_unit] if privacy_unit else []) + [c for spec in specs for c in spec.columns]
        )
    )

    def build(pipeline: beam.Pipeline) -> list[PCollection]:
        rows = pipeline | "ReadExport" >> ReadExport(
            input_pattern,
            columns=columns,
            input_format=input_format,
            on_bad_record=on_bad_record,  # type: ignore[arg-type]
        )
        return [rows | spec.name >> transform for spec, transform in transforms]

    return run_and_write(build, budget=budget, options=options, output=output)


def cli(run: Callable[[], Any]) -> None:
    """Run a job from the command line: bad input or parameters end it with one clear line.

    The message names the file, the field and the rule (or the parameter), never a value; the
    output directory is left untouched (outputs are written only when the job succeeds).
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_dp").setLevel(logging.INFO)
    try:
        run()
    except BadRecordError as error:
        message = str(error).split(" [while running")[0]
        raise SystemExit(f"error: {message}") from None
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def run_single(
    spec: StatisticSpec, args: argparse.Namespace, options: PipelineOptions
) -> dict[str, Any]:
    """Run a one-statistic job from its parsed common flags, print and return its document."""
    document = run_statistics(
        [spec],
        input_pattern=args.input,
        input_format=args.input_format,
        privacy_unit=args.privacy_unit,
        relation=args.relation,
        on_bad_record=args.on_bad_record,
        budget=PrivacyBudget(args.epsilon, args.delta),
        options=options,
        output=args.output,
    )
    print_summary(document)
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
        shown = ", ".join(map(_shown, value)) if isinstance(value, list) else _shown(value)
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
