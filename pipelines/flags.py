"""A job's flags: its parser, the flags every job shares, and strict Beam pipeline options.

Flags follow Beam's underscore style and fail closed, before anything runs: abbreviations are
refused (``--relat`` is not ``--relation``); flags a job does not know must be Beam pipeline
options (``--runner``, ``--direct_num_workers``, ``--temp_location``, and the options of the
runner ``--runner`` names), and any other flag is an error naming the nearest known one; an
extra word (a glob the shell expanded) is an error asking to quote the pattern. A usage error
is one line pointing to ``--help``. Record-level privacy is asked for explicitly
(``--record_level``), never the result of a missing ``--privacy_unit``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from collections.abc import Sequence
from typing import Any, NoReturn

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    StandardOptions,
    _BeamArgumentParser,
)

from beam_dp import telemetry
from pipelines._state import STATE
from pipelines.cli import configure_logging
from pipelines.statistics import public_list, suggest_names

__all__ = [
    "JOB_EPILOG",
    "add_bounds_arguments",
    "add_common_arguments",
    "add_method_argument",
    "add_name_argument",
    "add_operator_arguments",
    "add_output_argument",
    "check_pipeline_flags",
    "int_or_auto",
    "job_parser",
    "parse_args",
    "read_candidates",
    "statistic_parser",
]

JOB_EPILOG = """\
Any other flag must be an Apache Beam pipeline option: --runner (default: DirectRunner, in
this process), --direct_num_workers, --temp_location, and the options of the runner --runner
names. A misspelt or abbreviated flag is an error naming the nearest valid one.

While it runs, the job prints progress to stderr (the files matched and their approximate
size, the stages, the elapsed time; no count of records unless --log_exact_counts) and, at
the end, a table of the releases and the budget to stdout. A failure prints one line.
"""


#: Flink's ``ExecutionMode`` values (Beam's job server option ``executionModeForBatch``).
FLINK_BATCH_EXECUTION_MODES = ("PIPELINED", "PIPELINED_FORCED", "BATCH", "BATCH_FORCED")


class FlinkJobServerOptions(PipelineOptions):
    """Options of Beam's Flink job server that Beam's Python SDK does not define.

    The portable runner sends every option set here to the job server, which reads it by name
    (``--execution_mode_for_batch`` is the Java ``FlinkPipelineOptions.executionModeForBatch``).
    Defining it makes the strict flag check (:func:`check_pipeline_flags`) know it; unset, it is
    not sent and the job server's default holds.

    ``--execution_mode_for_batch BATCH_FORCED`` makes every data exchange of a batch job
    blocking, so that Flink schedules each parallel instance of a stage on its own (a job's
    ``--parallelism`` may then exceed the cluster's slots: instances run as slots free up).
    Beam's Flink batch translation processes one parallel instance's whole input as one bundle
    and holds the bundle's output from the SDK worker on the TaskManager's heap until the bundle
    ends; many small instances bound that output by the input of one instance, where a few
    large ones hold a share of the whole export (``benchmarks/SCALE.md``).
    """

    @classmethod
    def _add_argparse_args(cls, parser: _BeamArgumentParser) -> None:
        parser.add_argument(
            "--execution_mode_for_batch",
            choices=FLINK_BATCH_EXECUTION_MODES,
            default=None,
            help="FlinkRunner: Flink's data exchange mode for a batch job (the job server's "
            "default: PIPELINED). BATCH_FORCED: every exchange blocking, so a --parallelism "
            "above the cluster's slots runs in turns and each bundle stays small.",
        )


def int_or_auto(text: str) -> int | str:
    """A flag value ``auto`` or an integer >= 1 (``--max_contributions auto``)."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 1: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 1: {text!r}")
    return value


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
        "--ledger_timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=30.0,
        help="how long the job waits for the ledger (its lock, or a PostgreSQL connection) at "
        "each attempt; the commit after the pipeline makes 4 attempts, 1, 2 and 4 s apart, "
        "and if all fail the releases are not written and the run stays charged. Default 30",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a release already in --output (recorded in the ledger; the earlier "
        "run's spend stays spent). Default: a job refuses to write over an earlier release",
    )


def _field_names(text: str) -> list[str]:
    """``--json_fields``: names between commas, blanks stripped; none may be empty."""
    names = [name.strip() for name in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            "must list distinct field names between commas (user,hours); received an empty "
            "or repeated name"
        )
    return names


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds; received {text!r}"
        ) from None
    if not (value > 0 and value < 86_400):
        raise argparse.ArgumentTypeError(f"must be > 0 and < 86400 seconds; received {text!r}")
    return value


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


def add_bounds_arguments(parser: argparse.ArgumentParser) -> None:
    """``--lower`` and ``--upper``: a numeric statistic's public bounds."""
    parser.add_argument(
        "--lower",
        metavar="NUMBER",
        type=float,
        required=True,
        help="the smallest value considered, chosen without looking at the data (it is not "
        "private); smaller values count as this one. Required",
    )
    parser.add_argument(
        "--upper",
        metavar="NUMBER",
        type=float,
        required=True,
        help="the largest value considered, chosen the same way; larger values count as this "
        "one. Required",
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
        help="the format of files whose suffix names none. Default: each file's suffix "
        "(an export may mix formats)",
    )
    parser.add_argument(
        "--json_fields",
        metavar="NAME,NAME,...",
        type=_field_names,
        default=None,
        help="the JSON lines files' field names, as the export declares them (public, like a "
        "CSV header): the named columns are checked against them before anything is charged. "
        "Default: none (a JSON line's keys are its record's, so JSON lines columns are "
        "checked only when read, after the charge)",
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
        "--unit_ids",
        choices=["normalize", "exact"],
        default="normalize",
        help="how --privacy_unit's values name a person: normalize (default) reads the forms "
        "one id takes across exports as one person (12, 12.0, ' +012 ', case and Unicode "
        "forms; merging only costs utility); exact takes each value as given, for ids that "
        "are already canonical",
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
    check_pipeline_flags(_unknown_words(parser, argv), parser)
    known, rest = parser.parse_known_args(argv)
    exact_counts = bool(getattr(known, "log_exact_counts", False))
    show_tracebacks = bool(getattr(known, "show_tracebacks_unsafe", False))
    if exact_counts:
        telemetry.enable_exact_counts()
    else:
        telemetry.disable_exact_counts()
    if STATE.in_cli:
        STATE.show_tracebacks = show_tracebacks
        configure_logging(exact_counts=exact_counts, show_tracebacks=show_tracebacks)
    return known, PipelineOptions(_default_flink_version(rest))


def _unknown_words(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> list[str]:
    """The words of ``argv`` that ``parser`` does not take, read before it checks that its
    required flags are given: a misspelt required flag (``--inptu``) is then named as the
    unknown flag it is, not reported as a missing ``--input``."""
    required: list[Any] = [action for action in parser._actions if action.required]
    required += [group for group in parser._mutually_exclusive_groups if group.required]
    for item in required:
        item.required = False
    try:
        return parser.parse_known_args(argv)[1]
    finally:
        for item in required:
            item.required = True


#: The Flink minor of the job server ``make engines`` builds (docs/runners.md).
FLINK_VERSION = "1.19"


def _default_flink_version(flags: Sequence[str]) -> list[str]:
    """``--flink_version 1.19`` for a FlinkRunner job that names none: the one Flink job server
    this project builds (Beam 2.77 would otherwise look for its 2.2 job server)."""
    flags = list(flags)
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    finder.add_argument("--runner")
    finder.add_argument("--flink_version")
    found = finder.parse_known_args(flags)[0]
    runner = str(found.runner or "").lower().rsplit(".", 1)[-1]
    if runner in ("flinkrunner", "flink") and found.flink_version is None:
        flags += ["--flink_version", FLINK_VERSION]
    return flags


def read_candidates(spec: str) -> list[str]:
    """Public candidates from a flag: see :func:`pipelines.statistics.public_list`."""
    return public_list(spec, name="candidates")


def statistic_parser(
    module: str, description: str | None, field: str, field_help: str
) -> argparse.ArgumentParser:
    """A one-statistic job's parser: the flags every job has, then ``field`` (``--value``,
    ``--candidate``), the required flag naming the field its statistic reads."""
    parser = job_parser(module, description)
    add_common_arguments(parser)
    parser.add_argument(field, metavar="FIELD", required=True, help=field_help)
    return parser
