"""What every job shares: flags, running a pipeline, collecting releases, writing outputs.

Jobs are thin CLIs: they parse flags into library parameters, ask a
:class:`~beam_dp.accounting.PrivacyBudget` for their shares *before* the pipeline is built
(so an over-spent budget fails before any data is read), apply beam_dp transforms, and hand
the released records to :func:`run_and_write`. No DP math lives here.

Everything fails closed, before any data is read:

* Flags follow Beam's underscore style. Flags a job does not know must be Beam pipeline options
  (``--runner``, ``--direct_num_workers``, ``--temp_location``, and the options of the runner
  that ``--runner`` names); any other flag is an error naming the nearest known one, and an
  extra word (a glob the shell expanded) is an error asking to quote the pattern.
* Record-level privacy is asked for explicitly (``--record_level``), never the result of a
  missing ``--privacy_unit``.
* Every transform is built (and so validated) before the budget is asked and before the input
  is listed; the input must match at least one file.

What a job reports (see :mod:`beam_dp.telemetry`): by default only public facts (the
statistics, the input pattern and its number of files, elapsed time). ``--log_exact_counts``
(an operator's choice, NOT private) logs exact data-dependent counts. When a job fails,
:func:`cli` prints one line: the message of a :class:`beam_dp.errors.BeamDPError` (built from
file, field and rule), or of a ValueError/TypeError raised while the job was parsed and built
(parameter validation); anything raised while the pipeline runs prints only the stage that
failed, unless ``--show_tracebacks_unsafe`` (NOT private) is given.
"""

from __future__ import annotations

import argparse
import contextlib
import decimal
import importlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    PipelineOptions,
    StandardOptions,
    _BeamArgumentParser,
)
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.pvalue import PCollection

from beam_dp import telemetry
from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.errors import BeamDPError
from beam_dp.io import ReadExport
from beam_dp.io.outputs import write_outputs
from beam_dp.ledger import LedgerError, Plan, Reservation, RunInfo, config_digest, open_ledger
from beam_dp.release import Release, ledger_entries_to_record
from pipelines import _terminal
from pipelines.statistics import StatisticSpec, public_list, suggest_names

__all__ = [
    "SKIP_HINT_CONFIG",
    "SKIP_HINT_FLAG",
    "add_common_arguments",
    "add_method_argument",
    "add_name_argument",
    "add_operator_arguments",
    "add_output_argument",
    "check_pipeline_flags",
    "cli",
    "job_parser",
    "parse_args",
    "print_summary",
    "read_candidates",
    "run_and_write",
    "run_single",
    "run_statistics",
    "wait_for",
]

_LOG = logging.getLogger("beam_dp.pipelines")
_LOG.setLevel(logging.INFO)

SKIP_HINT_FLAG = "--on_bad_record skip"
SKIP_HINT_CONFIG = 'on_bad_record = "skip" in the config\'s [input]'
_LIBRARY_SKIP_HINT = re.compile(r"on_bad_record='skip'")

_UNSAFE_HINT = (
    "details are withheld because they may contain data; rerun with --show_tracebacks_unsafe "
    "to see them (not private)"
)


class _JobState:
    """What :func:`cli` needs to know when a job fails (one job at a time per process)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, *, in_cli: bool = False) -> None:
        self.in_cli = in_cli
        self.phase = "prepare"  # "prepare" (parse and build), "run", then "write"
        self.writing_outputs = False  # once True, a release may have escaped
        self.stages: frozenset[str] = frozenset()
        self.show_tracebacks = False
        self.skip_hint = SKIP_HINT_FLAG


_STATE = _JobState()


JOB_EPILOG = """\
Any other flag must be an Apache Beam pipeline option: --runner (default: DirectRunner, in
this process), --direct_num_workers, --temp_location, and the options of the runner --runner
names. A misspelt or abbreviated flag is an error naming the nearest valid one.

While it runs, the job prints progress to stderr (the files matched and their approximate
size, the stages, the elapsed time; no count of records unless --log_exact_counts) and, at
the end, a table of the releases and the budget to stdout. A failure prints one line.
"""


class _JobArgumentParser(argparse.ArgumentParser):
    """Reports a usage error in one line (the full usage is in --help), like every failure."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def job_parser(
    module: str, description: str | None, *, epilog: str = JOB_EPILOG
) -> argparse.ArgumentParser:
    """A job's parser: its module docstring as description, kept as written, and the epilog.

    A usage error (a missing flag, a value not among the choices) is one line, not the usage.
    """
    return _JobArgumentParser(
        prog=f"python -m {module}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's switches every job has (both default off; neither is private)."""
    parser.add_argument(
        "--log_exact_counts",
        action="store_true",
        help=(
            "NOT PRIVATE: log and report as metrics exact data-dependent counts (rows read, "
            "rows dropped by contribution bounding, bad records skipped, records with an "
            "unknown candidate or key). They reveal facts about individuals (a non-zero "
            "'rows dropped' says someone exceeded a bound): use only where the raw data may "
            "go. Default: only public facts (statistics, input files, elapsed time)"
        ),
    )
    parser.add_argument(
        "--show_tracebacks_unsafe",
        action="store_true",
        help=(
            "NOT PRIVATE: when the job fails while the pipeline runs, show the full error, "
            "Beam's logs and the traceback, which may quote record values. Default: one line "
            "naming the failed stage"
        ),
    )
    parser.add_argument(
        "--ledger",
        metavar="URL",
        default=os.environ.get("BEAM_DP_LEDGER_URL") or None,
        help="a persistent budget ledger (sqlite:///path/budget.db or postgresql://user@host/db) "
        "that keeps what each dataset has spent across runs: with --dataset, the job reserves "
        "its whole budget there before reading any data, and fails at once if the dataset "
        "cannot afford it. Default: $BEAM_DP_LEDGER_URL if set, otherwise no ledger (nothing "
        "remembers this run's spend)",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        help="the ledger's name for the population this job reads (see python -m "
        "pipelines.budget create). Default: none (give it with --ledger)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a release already in --output (recorded in the ledger; the earlier "
        "run's spend stays spent). Default: a job refuses to write over an earlier release",
    )


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``--output``: the directory every job writes its release into."""
    parser.add_argument(
        "--output",
        metavar="DIR",
        required=True,
        help="a directory for release.json, release.avro and report.html, created if missing; "
        "checked writable before anything runs, written only if the job succeeds. Required",
    )


def add_method_argument(parser: argparse.ArgumentParser) -> None:
    """``--method``: how a job's selection is drawn."""
    parser.add_argument(
        "--method",
        choices=["permute_and_flip", "exponential"],
        default="permute_and_flip",
        help="how the released answer is drawn: permute_and_flip (default; never less "
        "accurate on average than exponential for the same epsilon) or exponential (the "
        "exponential mechanism)",
    )


def add_name_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """``--name``: the release's name in the outputs."""
    parser.add_argument(
        "--name",
        metavar="NAME",
        default=default,
        help=f"the release's name in the outputs. Default: {default}",
    )


def add_common_arguments(parser: argparse.ArgumentParser, *, value: bool = False) -> None:
    """The flags every job has."""
    parser.add_argument(
        "--input",
        metavar="PATTERN",
        required=True,
        help="the export's files: a path or a glob in quotes ('export-*.avro'), local or on any "
        "filesystem Beam reads (gs://...); it must match at least one file. Required",
    )
    parser.add_argument(
        "--input_format",
        choices=["avro", "parquet", "csv", "jsonl"],
        default=None,
        help="the files' format. Default: taken from each file's suffix",
    )
    unit = parser.add_mutually_exclusive_group(required=True)
    unit.add_argument(
        "--privacy_unit",
        metavar="FIELD",
        help="the field that identifies a person (a user id): all of one person's records are "
        "bounded together, so the release protects people, not just records. Required unless "
        "--record_level",
    )
    unit.add_argument(
        "--record_level",
        action="store_true",
        help=(
            "record-level privacy instead of --privacy_unit: every record is its own unit. "
            "It protects single records, not people: someone with r records is protected "
            "only at r times epsilon"
        ),
    )
    parser.add_argument(
        "--epsilon",
        metavar="EPSILON",
        type=float,
        required=True,
        help="the privacy budget of the whole job (smaller is more private and less accurate); "
        "checked before any data is read. Required",
    )
    parser.add_argument(
        "--delta",
        metavar="DELTA",
        type=float,
        default=0.0,
        help="the small probability that the epsilon guarantee does not hold; only choosing "
        "labels from the data (no public candidates) needs it. Default 0: pure epsilon-DP",
    )
    add_output_argument(parser)
    parser.add_argument(
        "--relation",
        choices=["add_remove", "replace"],
        default="add_remove",
        help="what the guarantee hides: add_remove (default) hides whether a person is in the "
        "data at all; replace hides what a person's records say when who is in the data "
        "(and so its size) is public",
    )
    parser.add_argument(
        "--on_bad_record",
        choices=["fail", "skip"],
        default="fail",
        help="what a record that breaks a rule (a missing field, a wrong type, NaN, a file "
        "that cannot be decoded) does: fail (default) ends the job with one line naming the "
        "file, field and rule; skip drops it and goes on (how many were dropped is logged "
        "only with --log_exact_counts)",
    )
    add_operator_arguments(parser)


def _flags_of(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


def _import_runner(flags: Sequence[str]) -> None:
    """Import the module of the runner ``--runner`` names, so its options are registered.

    Beam registers a runner's options (``--dask_client_address``) when the runner's module is
    imported, which it does itself only when the pipeline is built; the names are resolved as
    Beam does. A module that cannot be imported is left to Beam, which names the runner.
    """
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    finder.add_argument("--runner")
    runner = finder.parse_known_args(list(flags))[0].runner
    if not runner:
        return
    paths = {path.rsplit(".", 1)[-1].lower(): path for path in StandardOptions.ALL_KNOWN_RUNNERS}
    path = paths.get(runner.lower(), paths.get(runner.lower() + "runner", runner))
    if "." in path:
        with contextlib.suppress(ImportError):  # Beam names the runner when it builds
            importlib.import_module(path.rsplit(".", 1)[0])


def _beam_parser(flags: Sequence[str]) -> argparse.ArgumentParser:
    """A strict parser of every option Beam knows, built the way ``PipelineOptions`` does."""
    _import_runner(flags)
    parser = _BeamArgumentParser(allow_abbrev=False, add_help=False)
    classes: dict[str, type[PipelineOptions]] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


def check_pipeline_flags(flags: Sequence[str], job: argparse.ArgumentParser | None = None) -> None:
    """Refuse what Beam would drop: flags that no ``PipelineOptions`` defines, and extra words.

    ``PipelineOptions`` discards unknown flags with a warning, so a misspelt job flag
    (``--relaton``, ``--num-points``) would silently run with its default.

    Raises:
        ValueError: naming the first unknown flag and the nearest known one (among ``job``'s
            flags and Beam's), or the first extra word with a hint to quote a glob.
    """
    beam_parser = _beam_parser(flags)
    unknown = beam_parser.parse_known_args(list(flags))[1]
    unknown = [word for word in unknown if word != "--"]
    if not unknown:
        return
    known = _flags_of(beam_parser) + ([] if job is None else _flags_of(job))
    for word in unknown:
        if word.startswith("-") and len(word) > 1:
            flag = word.split("=", 1)[0]
            # Compared without dashes, so that '--num-points' is '--num_points' and the
            # shared '--' does not make unrelated flags look alike.
            names = {name.lstrip("-").replace("-", "_"): name for name in known}
            spelled = flag.lstrip("-").replace("-", "_")
            nearest = [spelled] if spelled in names else suggest_names(spelled, names)
            hint = f"; did you mean {names[nearest[0]]!r}?" if nearest else ""
            raise ValueError(
                f"unknown flag {flag!r}{hint} (flags a job does not know must be Beam pipeline "
                "options; a runner's options are known when --runner names the runner)"
            )
    raise ValueError(
        f"unexpected argument {unknown[0]!r}: every flag takes one value; if the shell expanded "
        "a glob into several words, quote the pattern (--input 'export-*.avro')"
    )


def _configure_logging(*, exact_counts: bool, show_tracebacks: bool) -> None:
    """Under :func:`cli`: library logs at INFO only with exact counts; Beam's only if unsafe."""
    logging.getLogger("beam_dp").setLevel(logging.INFO if exact_counts else logging.WARNING)
    # Beam logs a failing step's exception (which may quote a record) at ERROR.
    logging.getLogger("apache_beam").setLevel(
        logging.NOTSET if show_tracebacks else logging.CRITICAL
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, PipelineOptions]:
    """Split ``argv`` into the job's flags and Beam's pipeline options, strictly.

    Abbreviated flags are refused (``--relat`` is not ``--relation``); flags the job does not
    know must be Beam options (:func:`check_pipeline_flags`). The operator's switches take
    effect here, before the pipeline is built: ``--log_exact_counts`` turns on
    :func:`beam_dp.telemetry.enable_exact_counts` (and is off otherwise).
    """
    parser.allow_abbrev = False
    known, rest = parser.parse_known_args(argv)
    check_pipeline_flags(rest, parser)
    exact_counts = bool(getattr(known, "log_exact_counts", False))
    show_tracebacks = bool(getattr(known, "show_tracebacks_unsafe", False))
    if exact_counts:
        telemetry.enable_exact_counts()
    else:
        telemetry.disable_exact_counts()
    if _STATE.in_cli:
        _STATE.show_tracebacks = show_tracebacks
        _configure_logging(exact_counts=exact_counts, show_tracebacks=show_tracebacks)
    return known, PipelineOptions(rest)


def read_candidates(spec: str) -> list[str]:
    """Public candidates from a flag: see :func:`pipelines.statistics.public_list`."""
    return public_list(spec, name="candidates")


def _log_metrics(result: Any) -> None:
    """Exact counts, only when the operator asked for them (they are not private)."""
    if not telemetry.exact_counts_enabled():
        return
    try:
        counters = result.metrics().query()["counters"]
    except Exception:  # some runners do not report metrics
        return
    _LOG.info("exact counts (NOT private; --log_exact_counts):")
    for counter in counters:
        if counter.key.metric.namespace == "beam_dp":
            value = counter.committed if counter.committed is not None else counter.attempted
            _LOG.info("%s: %s: %s", counter.key.step, counter.key.metric.name, value)


class _Stages(PipelineVisitor):
    """The full labels of a pipeline's transforms (public: they come from the job)."""

    def __init__(self) -> None:
        self.labels: dict[str, None] = {}  # in the order the pipeline visits them

    def enter_composite_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def visit_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def top_level(self) -> list[str]:
        """The job's own stages (reading, each statistic, collecting), in pipeline order."""
        return [label for label in self.labels if label and "/" not in label]


class _WriteRelease(beam.DoFn):
    """Each release to its own small JSON file (works on every runner and filesystem)."""

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def process(self, release: Release) -> None:
        path = FileSystems.join(self._directory, f"{uuid.uuid4().hex}.json")
        with FileSystems.create(path) as handle:
            handle.write(json.dumps(release.to_dict()).encode("utf-8"))


def wait_for(result: Any) -> Any:
    """Wait until a pipeline's run ends; return its result.

    Whatever the outcome, the Dask runner's ``distributed.Client`` (``result.client``) is
    closed: the run is over, and an open client would hold its sockets until collected.
    """
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner's distributed.Client
        if client is not None:
            client.close()
    return result


def run_and_write(
    build: Callable[[beam.Pipeline], Sequence[PCollection]],
    *,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
    ledger_record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the pipeline with ``build``, run it, record the releases, write the outputs.

    ``build`` returns PCollections of :class:`beam_dp.release.Release`. Releases travel
    back to this process as small files in a temporary directory (under ``--temp_location``
    when given, so that remote workers can write it). Each transform is charged once,
    whatever the number of keys it released (their epsilon is accounted by the transform:
    parallel composition or a split, as its ledger says). Jobs read bounded exports, so
    there is one (global) window.
    """
    _STATE.phase = "prepare"
    _STATE.writing_outputs = False
    temp_root = options.get_all_options().get("temp_location") or tempfile.gettempdir()
    scratch = FileSystems.join(temp_root, f"beam_dp_releases_{uuid.uuid4().hex}")
    pipeline = beam.Pipeline(options=options)
    outputs = build(pipeline)
    _ = (
        tuple(outputs)
        | _ALL_RELEASES >> beam.Flatten()
        | _COLLECT >> beam.ParDo(_WriteRelease(scratch))
    )
    stages = _Stages()
    pipeline.visit(stages)
    _STATE.stages = frozenset(stages.labels)
    top = stages.top_level()
    shown = ", ".join(top)
    FileSystems.mkdirs(scratch)
    _STATE.phase = "run"
    started = time.monotonic()
    _LOG.info("running %d stage(s): %s", len(top), shown)
    try:
        result = wait_for(pipeline.run())
        _LOG.info(
            "the pipeline finished in %.1f s; %d stage(s) done: %s",
            time.monotonic() - started,
            len(top),
            shown,
        )
        _STATE.phase = "write"
        _log_metrics(result)
        records: list[dict[str, Any]] = []
        for match in FileSystems.match([FileSystems.join(scratch, "*.json")])[0].metadata_list:
            with FileSystems.open(match.path) as handle:
                records.append(json.loads(handle.read().decode("utf-8")))
    finally:
        try:
            FileSystems.delete([scratch])
        except Exception:  # never hide the job's own error; name the (public) directory
            _LOG.warning("could not remove the temporary directory %s", scratch)
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
    document: dict[str, Any] = {"releases": records, "budget": budget.to_json()}
    if ledger_record is not None:
        document["budget"]["ledger"] = ledger_record
    _STATE.writing_outputs = True
    write_outputs(document, output)
    return document


def _check_privacy_unit(privacy_unit: str | None, record_level: bool) -> None:
    if privacy_unit is not None and record_level:
        raise ValueError(
            "give either a privacy unit (--privacy_unit, or privacy_unit in [input]) or "
            "record-level privacy (--record_level, or record_level = true), not both"
        )
    if privacy_unit is None and not record_level:
        raise ValueError(
            "no privacy unit: give the field identifying a person (--privacy_unit, or "
            "privacy_unit in [input]), or ask for record-level privacy explicitly "
            "(--record_level, or record_level = true in [input]), which protects single "
            "records, not people"
        )


def _approximate_size(size: int) -> str:
    """A size to two significant digits (``1.2 MB``): progress, not an exact figure."""
    units = ("bytes", "kB", "MB", "GB", "TB")
    value = float(size)
    for unit in units:
        rounded = float(f"{value:.2g}")
        if rounded < 1000 or unit == units[-1]:
            return f"{rounded:g} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _match_input_files(pattern: str) -> tuple[int, int]:
    """How many files the input pattern matches and their total size; none is an error.

    Both are facts about the files an operator can list, not about records; the size is only
    ever shown to two significant digits (:func:`_approximate_size`).
    """
    path = pattern if "://" in pattern or os.path.isabs(pattern) else os.path.abspath(pattern)
    try:
        found = FileSystems.match([path])[0].metadata_list
    except Exception:
        raise ValueError(
            f"cannot list the input {pattern!r} (check the path, its filesystem and access to it)"
        ) from None
    if not found:
        raise ValueError(f"no file matches the input {pattern!r}")
    return len(found), sum(int(match.size_in_bytes or 0) for match in found)


_READ_EXPORT, _ALL_RELEASES, _COLLECT = "ReadExport", "AllReleases", "Collect"
_JOB_STAGES = (_READ_EXPORT, _ALL_RELEASES, _COLLECT)  # a statistic may not take these names


def _check_output(output: str, overwrite: bool) -> None:
    """An output directory that holds a release is replaced only with --overwrite."""
    if not overwrite and FileSystems.exists(FileSystems.join(output, "release.json")):
        raise ValueError(
            f"--output {output} already holds a release; give --overwrite to replace it (the "
            "ledger records the overwrite, and the earlier run's spend stays spent)"
        )


def _check_writable(output: str) -> None:
    """Refuse an output directory this job could not write, before anything runs.

    A probe file is created and deleted again in the output directory, or, while it does not
    exist yet, in its nearest existing ancestor (where the job will create it): nothing is
    left behind, and jobs writing next to each other (``out/1``, ``out/2``) cannot trip over
    one another's directories. Remote filesystems (``gs://``, ...) are probed through Beam's
    ``FileSystems`` (their directories are prefixes: nothing to create).

    Raises:
        ValueError: naming the directory and the reason, never a library's message.
    """
    probe_name = f".beam_dp_write_probe_{uuid.uuid4().hex}"
    if "://" in output:
        try:
            probe = FileSystems.join(output, probe_name)
            with FileSystems.create(probe) as handle:
                handle.write(b"")
            FileSystems.delete([probe])
        except Exception:
            raise ValueError(
                f"--output {output} is not writable (check the path, its filesystem and "
                "access to it)"
            ) from None
        return
    existing = os.path.abspath(output)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise NotADirectoryError(0, f"{existing} is a file, not a directory")
        probe = os.path.join(existing, probe_name)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or "it cannot be created or written"
        raise ValueError(f"--output {output} is not writable: {reason}") from None


def _reserve(
    ledger: str | None, dataset: str | None, budget: PrivacyBudget, relation: str, run: RunInfo
) -> tuple[Reservation, dict[str, Any]] | None:
    """Reserve the final budget's whole spend in the ledger, before any data is read.

    Returns the reservation and the record that goes into ``release.json`` and the report:
    this run's reservation, the dataset's budget with it, and the dataset's earlier runs
    (public facts only: amounts, times, jobs, statistics' names, output locations).
    """
    if ledger is None and dataset is None:
        return None
    if ledger is None or dataset is None:
        raise ValueError("give both --ledger URL and --dataset NAME, or neither")
    with open_ledger(ledger) as opened:  # closed while the pipeline runs; commit reconnects
        reservation = opened.reserve(dataset, Plan.from_budget(budget, relation=relation), run)
        status = opened.status(dataset)
        runs, _ = opened.history(dataset)
    record = {
        **reservation.describe(),
        "dataset_budget": status.describe_remaining(),
        "earlier_runs": [
            {
                key: value
                for key, value in past.to_json(status.composition).items()
                if key in _HISTORY_FIELDS
            }
            for past in runs
            if past.id != reservation.run_id
        ],
    }
    return reservation, record


# What the report shows of each earlier run of the dataset.
_HISTORY_FIELDS = (
    "run", "shown_state", "reserved_at", "epsilon", "delta", "rho", "job", "statistics",
    "output_location",
)  # fmt: skip


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
    record_level: bool = False,
    ledger: str | None = None,
    dataset: str | None = None,
    overwrite: bool = False,
    job: str = "pipelines",
    config: str | None = None,
) -> dict[str, Any]:
    """Check every statistic, request every share, finalize the budget, then run.

    In this order, all before any data is read: every transform is built once with its own
    parameters (so a bad parameter fails first), the shares are requested and the budget
    finalized (an over-spent budget fails next), the real transforms are built, and the input
    must match at least one file. The export is read once; every statistic's transform
    consumes the same batches. ``privacy_unit=None`` needs ``record_level=True``.
    """
    _check_privacy_unit(privacy_unit, record_level)
    if (ledger is None) != (dataset is None):
        raise ValueError("give both --ledger URL and --dataset NAME, or neither")
    reserved_names = sorted({spec.name for spec in specs} & set(_JOB_STAGES))
    if reserved_names:
        raise ValueError(
            f"statistic name {reserved_names[0]!r} is taken by a stage of the job "
            f"({', '.join(_JOB_STAGES)}); choose another name"
        )
    relations = sorted({relation if spec.relation is None else spec.relation for spec in specs})
    if len(relations) > 1:
        raise ValueError(
            f"the statistics use different neighbouring relations ({', '.join(relations)}), but "
            "one budget composes one relation: give every statistic the same 'relation' (or "
            "set it once, in [budget])"
        )
    _check_output(output, overwrite)
    _check_writable(output)
    for spec in specs:
        spec.check(unit_column=privacy_unit, relation=relation, on_bad_record=on_bad_record)
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
    reader = ReadExport(
        input_pattern,
        columns=columns,
        input_format=input_format,
        on_bad_record=on_bad_record,  # type: ignore[arg-type]
        unit_column=privacy_unit,
    )
    files, size = _match_input_files(input_pattern)
    _LOG.info("statistics: %s", ", ".join(spec.name for spec in specs))
    _LOG.info("input: %s (%d file(s), about %s)", input_pattern, files, _approximate_size(size))

    def build(pipeline: beam.Pipeline) -> list[PCollection]:
        rows = pipeline | _READ_EXPORT >> reader
        return [rows | spec.name >> transform for spec, transform in transforms]

    run = RunInfo(job, config_digest(config) if config else "", details={"input": input_pattern})
    # The relation every release is private under (checked above to be one): the ledger
    # compares it with the dataset's, so a statistic's own 'relation' counts, not the default.
    released_under = relations[0] if relations else relation
    reserved = _reserve(ledger, dataset, budget, released_under, run)
    if reserved is None:
        return run_and_write(build, budget=budget, options=options, output=output)
    reservation, ledger_record = reserved
    try:
        document = run_and_write(
            build, budget=budget, options=options, output=output, ledger_record=ledger_record
        )
    except BaseException:
        # Fail closed: the reservation goes back only when the job failed before the pipeline
        # ran (parameters, files, the ledger itself). Once records were read, whether the job
        # fails may depend on them (a bad record with on_bad_record=fail), and a refund would
        # let such a one-bit leak repeat for free; a release may also have escaped while the
        # outputs were written. If the ledger fails too, the charge stays.
        with contextlib.suppress(LedgerError):
            if _STATE.phase == "prepare":
                reservation.release()
            elif _STATE.writing_outputs:
                reservation.abandon("the job failed while writing its outputs")
            else:
                reservation.abandon("the job failed after it began reading data")
        raise
    location = output if "://" in output else os.path.abspath(output)
    reservation.commit(budget.ledger, location, overwrite=overwrite)
    return document


_STAGE = re.compile(r"\[while running '([^']*)'\]")


def _failure_message(error: Exception) -> str:
    """The one line :func:`cli` prints: never a library's text from a running pipeline."""
    if isinstance(error, BeamDPError):
        # The library's hint names its parameter; a user of a job sets a flag or a config key.
        text = str(error).split(" [while running")[0]
        return _LIBRARY_SKIP_HINT.sub(lambda _: _STATE.skip_hint, text)
    if _STATE.phase == "prepare" and isinstance(error, (ValueError, TypeError)):
        return str(error)  # parameter validation: parameters are public
    if _STATE.phase != "run" and isinstance(error, OSError) and error.strerror:
        # A path the job chose (config, candidates, output, temp location) and the OS's words.
        target = f" {error.filename!r}" if error.filename else ""
        return f"cannot access{target}: {error.strerror}"
    kind = type(error).__name__
    if _STATE.phase == "prepare":
        return f"the job failed while it was being prepared ({kind}); {_UNSAFE_HINT}"
    if _STATE.phase == "write":
        return f"the job failed while writing its outputs ({kind}); {_UNSAFE_HINT}"
    # Only a label of this job's own pipeline is named (they are public), never other text.
    stages = [label for label in _STAGE.findall(str(error)) if label in _STATE.stages]
    where = f"in stage {stages[0]!r}" if stages else "while the pipeline ran"
    return f"the pipeline failed {where} ({kind}); {_UNSAFE_HINT}"


def cli(run: Callable[[], Any], *, skip_hint: str = SKIP_HINT_FLAG) -> None:
    """Run a job from the command line: a failure ends it with one line and a non-zero status.

    The line is the message of a :class:`beam_dp.errors.BeamDPError` (it names file, field and
    rule, never a value), or of a ValueError/TypeError raised while the job is parsed and
    built (parameter validation). Any other failure, and anything raised while the pipeline
    runs, prints only where it happened (the stage, when known): library messages can quote
    records. Beam's own error logs are silenced for the same reason. ``--show_tracebacks_unsafe``
    shows everything (not private). The output directory is left untouched (outputs are
    written only when the job succeeds).

    A data error's hint to skip bad records names the library's parameter; it is shown as
    ``skip_hint`` instead (the job's flag by default; the release job names its config key).
    Known third-party noise (Beam's ``apitools`` warning, Dask's start-up logs and partition
    warnings) is filtered while the job runs (:mod:`pipelines._terminal`).

    Temporary files go to a directory of this run (``tempfile``'s directory and ``TMPDIR``
    for the processes it starts), removed when the job ends, whether it succeeded or not:
    Beam leaves its staging directories (``beam-temp*``, ``tmp*``) behind otherwise.
    """
    _STATE.reset(in_cli=True)
    _STATE.skip_hint = skip_hint
    exact_counts = telemetry.exact_counts_enabled()
    environment = {name: os.environ.get(name) for name in (*_terminal.ENVIRONMENT, "TMPDIR")}
    _terminal.quiet_third_party()
    saved_tempdir = tempfile.tempdir
    run_temp = tempfile.mkdtemp(prefix="beam_dp_job_")
    tempfile.tempdir = os.environ["TMPDIR"] = run_temp
    saved = {
        name: logging.getLogger(name).level
        for name in ("beam_dp", "beam_dp.pipelines", "apache_beam")
    }
    logging.getLogger("beam_dp.pipelines").setLevel(logging.INFO)
    _configure_logging(exact_counts=False, show_tracebacks=False)
    try:
        run()
    except Exception as error:
        if _STATE.show_tracebacks:
            raise
        raise SystemExit(f"error: {_failure_message(error)}") from None
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if not exact_counts:
            telemetry.disable_exact_counts()
        for name, was in environment.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was
        if tempfile.tempdir == run_temp:  # not if a job started after this one replaced it
            still_there = saved_tempdir is None or os.path.isdir(saved_tempdir)
            tempfile.tempdir = saved_tempdir if still_there else None
        shutil.rmtree(run_temp, ignore_errors=True)
        _STATE.reset()


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
        record_level=args.record_level,
        relation=args.relation,
        on_bad_record=args.on_bad_record,
        budget=PrivacyBudget(args.epsilon, args.delta),
        options=options,
        output=args.output,
        ledger=args.ledger,
        dataset=args.dataset,
        overwrite=args.overwrite,
        job=spec.name,
    )
    print_summary(document)
    return document


# The ledger's own accuracy keys (in the score's units); a release that states its accuracy in
# the statistic's units (``accuracy_units``) shows its other keys instead.
_LEDGER_ACCURACY = frozenset({"score_loss", "rank_error", "cell_width", "confidence"})
_CELL = 48  # the widest shown cell but the last (accuracy), which is never cut


def _cut(cell: str, width: int) -> str:
    """``cell`` in ``width`` characters; a longer one visibly cut (``...``), never silently:
    a number cut short would read as another number."""
    return cell if len(cell) <= width else cell[: width - 3] + "..."


def _accuracy_cell(release: dict[str, Any]) -> str:
    """The accuracy column: the bounds in the statistic's units when the release states them
    (``accuracy_units``), else the ledger's score-loss and rank-error bounds."""
    accuracy = release.get("accuracy") or {}
    units = release.get("accuracy_units") or {}
    stated = [
        f"{key.replace('_', ' ')} <= {_rounded_up(bound)}"
        for key, bound in accuracy.items()
        if key in units and key not in _LEDGER_ACCURACY and isinstance(bound, (int, float))
    ]
    if stated:
        return "; ".join(stated)
    parts = [f"score within {accuracy['score_loss']:.3g}"] if "score_loss" in accuracy else []
    if "rank_error" in accuracy:
        parts.append(f"rank error <= {accuracy['rank_error']:.3g}")
    return "; ".join(parts)


def _rounded_up(bound: float) -> str:
    """A bound to three significant digits, rounded up (a stated bound never shrinks)."""
    number = float(bound)
    if number <= 0 or not math.isfinite(number):
        return f"{number:g}"
    rounded = decimal.Context(prec=3, rounding=decimal.ROUND_CEILING).plus(
        decimal.Decimal(repr(number))
    )
    return f"{rounded:f}"


def _accuracy_header(releases: Sequence[dict[str, Any]]) -> str:
    levels = {(r.get("accuracy") or {}).get("confidence", 0.95) for r in releases}
    if len(levels) == 1:
        return f"accuracy ({float(levels.pop()) * 100:g}%)"
    return "accuracy (at each release's confidence)"


def _print_descriptions(releases: Sequence[dict[str, Any]], out: Any) -> None:
    """Each release's accuracy in words, once per statistic when its keys share the text."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in releases:
        text = r.get("accuracy_description")
        if isinstance(text, str) and text:
            seen.setdefault((r["name"], text), []).append(
                "" if r.get("key") is None else str(r["key"])
            )
    if not seen:
        return
    print("\naccuracy, in words:", file=out)
    for (name, text), keys in seen.items():
        label = name if keys == [""] or len(keys) > 1 else f"{name} [{keys[0]}]"
        for line in textwrap.wrap(
            f"{label}: {text}", width=100, initial_indent="  ", subsequent_indent="    "
        ):
            print(line, file=out)


def print_summary(document: dict[str, Any], file: Any = None) -> None:
    """A readable table of the releases and the budget.

    The accuracy column shows a release's bounds in the statistic's own units when the release
    states them (``accuracy_units``, with the sentence ``accuracy_description`` printed in full
    after the table), and otherwise the ledger's bounds in the score's units.
    """
    out = file if file is not None else sys.stdout
    rows = [("name", "key", "released value", "epsilon", _accuracy_header(document["releases"]))]
    for r in document["releases"]:
        value = r["value"]
        shown = ", ".join(map(_shown, value)) if isinstance(value, list) else _shown(value)
        rows.append(
            (
                r["name"],
                "" if r.get("key") is None else str(r["key"]),
                shown,
                f"{r['epsilon']:.4g}",
                _accuracy_cell(r),
            )
        )
    limits = [_CELL] * (len(rows[0]) - 1) + [max(len(row[-1]) for row in rows)]
    widths = [min(max(len(row[i]) for row in rows), limits[i]) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [_cut(cell, width).ljust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join(cells).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * width for width in widths), file=out)
    _print_descriptions(document["releases"], out)
    budget = document["budget"]
    print(
        f"\nbudget: epsilon {budget['epsilon_spent']:.4g} of {budget['epsilon_total']:.4g} spent, "
        f"delta {budget['delta_spent']:.3g} of {budget['delta_total']:.3g} "
        f"({budget.get('composition', 'basic')} composition)",
        file=out,
    )
