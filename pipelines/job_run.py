"""Running a job's statistics: every check, then the budget, then the ledger, then the data.

:func:`run_statistics` is the order every job follows, all before any data is read: the
statistics' parameters, the output directory, every named column against every input file's
schema or header (Parquet footer, Avro header, CSV header row: public, so a misspelt column
costs nothing; JSON lines, which have none, are checked when read, after the charge), the
budget (an over-spent budget fails before any data is read), the transforms, the input files,
the workers' view of the temporary location (a probe job on a distributed runner), and the
reservation in the ledger when one is
given (which checks the input files against what the datasets protect). The ledger then
records that the run starts reading; the pipeline runs; its releases are checked against the
plan (:mod:`pipelines.execute`); the ledger commits them; and only then are the outputs
written. The export is read once; every statistic's transform consumes the same rows.
:func:`run_statistic` is a one-statistic job (``best_price``, ``election``, ...) from its
flags.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import PCollection

from beam_dp import BadRecordError, PrivacyBudget, ReadExport, SkippedFile
from beam_dp.jobs import (
    ColumnResolution,
    NamedColumn,
    check_export_columns,
    column_resolution,
    combine_resolutions,
)
from beam_dp.ledger import RunInfo, config_digest
from pipelines._state import LOG, STATE
from pipelines.execute import (
    JOB_STAGES,
    READ_EXPORT,
    RECORDS,
    SKIPPED_FILES,
    PlannedRelease,
    check_temp_location,
    run_releases,
    write_document,
)
from pipelines.flags import parse_args
from pipelines.ledger_charge import (
    LEDGER_TIMEOUT,
    check_ledger_flags,
    commit,
    reserve,
    settle_failure,
    start,
)
from pipelines.outputs import check_output, check_writable
from pipelines.statistics import StatisticSpec, spec_from_config
from pipelines.summary import print_summary

__all__ = [
    "QUANTILE_TYPES",
    "apply_quantile_defaults",
    "bounding_shards",
    "check_input_columns",
    "named_columns",
    "run_single",
    "run_statistic",
    "run_statistics",
]

#: The statistics whose jobs default to ``max_contributions="auto"`` and the column's grid.
QUANTILE_TYPES = ("quantiles", "median", "min", "max")


def check_privacy_unit(privacy_unit: str | None, record_level: bool) -> None:
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


def approximate_size(size: int) -> str:
    """A size to two significant digits (``1.2 MB``): progress, not an exact figure."""
    units = ("bytes", "kB", "MB", "GB", "TB")
    value = float(size)
    for unit in units:
        rounded = float(f"{value:.2g}")
        if rounded < 1000 or unit == units[-1]:
            return f"{rounded:g} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


#: The input: one pattern, or a list of them (a TOML ``path = [...]``).
Patterns = str | Sequence[str]


def _each(patterns: Patterns) -> list[str]:
    return [patterns] if isinstance(patterns, str) else list(patterns)


def _shown(patterns: Patterns) -> str:
    """The input as a log line or the ledger shows it (patterns are public)."""
    return patterns if isinstance(patterns, str) else ", ".join(patterns)


def match_input_files(patterns: Patterns) -> tuple[list[str], int]:
    """The files the input patterns match (sorted, each once) and their total size; a pattern
    that matches none is an error.

    Both are facts about the files an operator can list, not about records; the size is only
    ever shown to two significant digits (:func:`_approximate_size`).
    """
    found: dict[str, int] = {}
    for pattern in _each(patterns):
        found.update(_match_one(pattern))
    return sorted(found), sum(found.values())


def _match_one(pattern: str) -> dict[str, int]:
    path = pattern if "://" in pattern or os.path.isabs(pattern) else os.path.abspath(pattern)
    try:
        found = FileSystems.match([path])[0].metadata_list
    except Exception:
        raise ValueError(
            f"cannot list the input {pattern!r} (check the path, its filesystem and access to it)"
        ) from None
    if not found:
        raise ValueError(f"no file matches the input {pattern!r}")
    return {match.path: int(match.size_in_bytes or 0) for match in found}


#: Input file bytes per bounding shard (:func:`bounding_shards`).
BYTES_PER_SHARD = 16 << 20
#: The fewest and the most bounding shards a job uses (the library's default is the fewest).
MIN_SHARDS, MAX_SHARDS = 32, 1 << 16


def bounding_shards(input_bytes: int) -> int:
    """How many groups contribution bounding hashes the units into, for ``input_bytes`` of
    input files: a power of two, one shard per about :data:`BYTES_PER_SHARD` bytes, at least
    :data:`MIN_SHARDS` and at most :data:`MAX_SHARDS`.

    Every row of one shard reaches one ``DoFn`` call (and, on Flink and Spark, one grouped
    element in the runner's memory), so a fixed count lets that element grow with the rows;
    sized from the files it stays about the same (~16 MB of input, 10^6 rows of the
    benchmarks' Parquet) whatever the input. The count is not a privacy parameter: bounding
    only needs every row of a unit in one shard, which any count gives. It is computed from
    the files' sizes (a fact an operator can list, not a record), rounded to a power of two,
    and never released.
    """
    if isinstance(input_bytes, bool) or not isinstance(input_bytes, int) or input_bytes < 0:
        raise ValueError(f"'input_bytes' must be an integer >= 0; received {input_bytes!r}")
    wanted = -(-input_bytes // BYTES_PER_SHARD)
    shards = MIN_SHARDS
    while shards < wanted and shards < MAX_SHARDS:
        shards *= 2
    return shards


def _matched(patterns: Patterns) -> dict[str, int]:
    """The files the input patterns match and their sizes, or fewer (the usual error about a
    pattern that matches nothing comes later, in order)."""
    found: dict[str, int] = {}
    for pattern in _each(patterns):
        try:
            found.update(_match_one(pattern))
        except ValueError:
            continue
    return found


def _matched_size(patterns: Patterns) -> int:
    return sum(_matched(patterns).values())


def _matched_paths(patterns: Patterns) -> list[str]:
    return sorted(_matched(patterns))


def named_columns(
    specs: Sequence[StatisticSpec],
    privacy_unit: str | None,
    *,
    event_time: str | None = None,
    event_time_format: str = "seconds",
) -> list[NamedColumn]:
    """The columns a job names, each with its role: the privacy unit, a stream's event time
    (``--event_time``, read as ``event_time_format``: ``"seconds"`` or ``"iso8601"``), then
    every statistic's value, candidate or key column (in the statistics' order)."""
    named = [NamedColumn(privacy_unit, "unit", "the privacy unit")] if privacy_unit else []
    if event_time:
        role: Literal["event_seconds", "event_iso8601"] = (
            "event_iso8601" if event_time_format == "iso8601" else "event_seconds"
        )
        named.append(NamedColumn(event_time, role, "--event_time"))
    for spec in specs:
        params = spec.params
        if "key_column" in params:
            named.append(NamedColumn(params["key_column"], "label", f"the key of {spec.name!r}"))
        if "candidate_column" in params:
            named.append(
                NamedColumn(params["candidate_column"], "label", f"the candidate of {spec.name!r}")
            )
        if "value_column" in params:
            named.append(
                NamedColumn(params["value_column"], "value", f"the value of {spec.name!r}")
            )
    return named


def check_input_columns(
    input_pattern: Patterns,
    columns: Sequence[NamedColumn],
    *,
    input_format: str | None,
    on_bad_record: str,
    json_fields: Sequence[str] | None = None,
) -> None:
    """Every named column against every matched file's schema or header, before anything is
    charged (:func:`beam_dp.io.schema.check_export_columns`; JSON lines against the
    operator's ``json_fields``, else when read). A pattern that matches nothing passes: the
    usual error comes later, in order."""
    check_export_columns(
        _matched_paths(input_pattern),
        columns,
        input_format=input_format,
        on_bad_record=on_bad_record,
        json_fields=json_fields,
        pattern=input_pattern if isinstance(input_pattern, str) else None,
    )


def _export_resolution(
    paths: Sequence[str], column: str, input_format: str | None, *, skip: bool
) -> tuple[ColumnResolution, int]:
    """The column's resolution over the export's files, and how many files declare it float
    while the resolution is another's (0: every file agrees).

    Files that declare the column integer or decimal and files that declare it float (and
    nothing else: no unknown or other type) follow the majority of the files: a float shard
    among integer ones is most often an integer column written with nulls (pandas writes
    such a column as float64), and an integer shard among float ones a float column whose
    values happened to be whole. A tie keeps the uniform grid. Schemas are public: no value
    decides it. A float value on a resolution grid is released as well as the grid allows:
    the statement's "values between grid points" term covers it."""
    found = []
    for path in paths:
        try:
            found.append(column_resolution(path, column, input_format=input_format))
        except BadRecordError:
            if not skip:
                raise
            found.append(ColumnResolution("unknown"))
    exact = [item for item in found if item.kind in ("integer", "decimal")]
    floats = [item for item in found if item.kind == "float"]
    if exact and floats and len(exact) + len(floats) == len(found) and len(exact) > len(floats):
        return combine_resolutions(exact), len(floats)
    return combine_resolutions(found), 0


def _mean_defaults(spec: StatisticSpec, privacy_unit: str | None) -> None:
    """A mean's rows per person: ``"auto"`` when a privacy unit is given and the statistic
    sets neither ``max_contributions``, ``max_keys_per_unit`` nor a public ``n`` (the count
    of values kept depends on the bound, so a public ``n`` fixes the bound the user chose).

    Measured on four real panels (benchmarks/RESULTS.md, "Real panels against the peers"):
    the mean's error with ``auto`` was 0.83 of one row per person's (geometric mean over
    the cells, better in 10 of 18), and one row per person is biased wherever the value
    depends on how many rows a person has (11x on flight distances)."""
    if (
        privacy_unit is not None
        and "max_contributions" not in spec.params
        and "max_keys_per_unit" not in spec.params
        and spec.params.get("n") is None
    ):
        spec.params["max_contributions"] = "auto"
        LOG.info("%s: max_contributions chosen privately (auto)", spec.name)


def apply_quantile_defaults(
    specs: Sequence[StatisticSpec],
    *,
    input_pattern: Patterns,
    input_format: str | None,
    privacy_unit: str | None,
    on_bad_record: str = "fail",
) -> None:
    """The jobs' defaults for the quantile statistics and the mean, from public facts only
    (in place; the mean: :func:`_mean_defaults`).

    * ``max_contributions``: ``"auto"`` (chosen privately with a share of the statistic's
      epsilon, or of its rho under zCDP; :mod:`beam_dp.summaries.contribution_bounds`) when
      a privacy unit is given and the statistic neither sets it nor asks for ``refine``
      (not wired with ``"auto"``); otherwise the transform's default, 1.
    * the grid: when the statistic sets neither ``grid`` nor ``resolution`` and the export's
      schema (Parquet footer, Avro header: never a value) declares the value column integer
      or decimal in every matched file, ``resolution`` is that of the column; a float column,
      or a format without a schema (CSV, JSON lines), keeps the uniform grid. A file whose
      schema cannot be read (or lacks the field) fails the job before any data is read, or,
      with ``on_bad_record="skip"`` (the reader then skips such a file), counts as a file of
      unknown resolution: the grid stays uniform. One log line per statistic says which
      grid and why (no value, no count).
    """
    paths: list[str] | None = None
    for spec in specs:
        if spec.type == "mean":
            _mean_defaults(spec, privacy_unit)
            continue
        if spec.type not in QUANTILE_TYPES:
            continue
        if (
            spec.params.get("max_keys_per_unit") == "auto"
            and "max_contributions" not in spec.params
        ):
            # one 'auto' bound per statistic: the keys are chosen, the rows stay at 1
            LOG.info("%s: max_keys_per_unit chosen privately (auto), 1 row per key", spec.name)
        elif (
            privacy_unit is not None
            and not spec.params.get("refine", False)  # auto with refine is not wired either
            and "max_contributions" not in spec.params
        ):
            spec.params["max_contributions"] = "auto"
            LOG.info("%s: max_contributions chosen privately (auto)", spec.name)
        if "grid" in spec.params or "resolution" in spec.params:
            LOG.info("%s: grid as configured", spec.name)
            continue
        if paths is None:
            paths = _matched_paths(input_pattern)
        if not paths:
            continue  # no file: the job fails below, before reading, with the usual error
        column = spec.params["value_column"]
        found, outvoted = _export_resolution(
            paths, column, input_format, skip=on_bad_record == "skip"
        )
        if found.kind in ("integer", "decimal") and found.resolution_text is not None:
            spec.params["resolution"] = found.resolution_text
            LOG.info(
                "%s: grid on the multiples of %s between the bounds (the schema declares %r %s%s)",
                spec.name,
                found.resolution_text,
                column,
                "an integer" if found.kind == "integer" else f"a decimal of scale {found.scale}",
                f" in {len(paths) - outvoted} of {len(paths)} files, float in the rest; give "
                "'resolution' or 'grid' to choose otherwise"
                if outvoted
                else "",
            )
        else:
            LOG.info(
                "%s: uniform grid (the schema declares %r %s; give 'resolution' for a "
                "column of known resolution)",
                spec.name,
                column,
                "no resolution: " + found.kind if found.kind != "unknown" else "nothing: no schema",
            )


def run_statistics(
    specs: Sequence[StatisticSpec],
    *,
    input_pattern: Patterns,
    input_format: str | None,
    privacy_unit: str | None,
    relation: str,
    on_bad_record: str,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
    record_level: bool = False,
    unit_ids: str = "normalize",
    ledger: str | None = None,
    dataset: str | None = None,
    overwrite: bool = False,
    job: str = "pipelines",
    config: str | None = None,
    ledger_timeout: float = LEDGER_TIMEOUT,
    json_fields: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Check every statistic, request every share, finalize the budget, then run.

    In this order, all before any data is read: every transform is built once with its own
    parameters (so a bad parameter fails first), the shares are requested and the budget
    finalized (an over-spent budget fails next), the real transforms are built, and the input
    must match at least one file. The export is read once; every statistic's transform
    consumes the same batches. ``privacy_unit=None`` needs ``record_level=True``.
    """
    check_privacy_unit(privacy_unit, record_level)
    check_ledger_flags(ledger, dataset)
    reserved_names = sorted({spec.name for spec in specs} & set(JOB_STAGES))
    if reserved_names:
        raise ValueError(
            f"statistic name {reserved_names[0]!r} is taken by a stage of the job "
            f"({', '.join(JOB_STAGES)}); choose another name"
        )
    relations = sorted({relation if spec.relation is None else spec.relation for spec in specs})
    if len(relations) > 1:
        raise ValueError(
            f"the statistics use different neighbouring relations ({', '.join(relations)}), but "
            "one budget composes one relation: give every statistic the same 'relation' (or "
            "set it once, in [budget])"
        )
    check_output(output, overwrite)
    check_writable(output)
    # public facts before the ledger: a misspelt column costs nothing
    named = named_columns(specs, privacy_unit)
    STATE.columns = frozenset(column.name for column in named)
    check_input_columns(
        input_pattern,
        named,
        input_format=input_format,
        on_bad_record=on_bad_record,
        json_fields=json_fields,
    )
    apply_quantile_defaults(
        specs,
        input_pattern=input_pattern,
        input_format=input_format,
        privacy_unit=privacy_unit,
        on_bad_record=on_bad_record,
    )
    for spec in specs:
        spec.check(
            unit_column=privacy_unit,
            relation=relation,
            on_bad_record=on_bad_record,
            unit_ids=unit_ids,
        )
    for spec in specs:
        spec.request(budget)
    budget.finalize()
    shards = bounding_shards(_matched_size(input_pattern))
    for spec in specs:  # a config's own num_shards stays
        spec.params.setdefault("num_shards", shards)
    transforms = [
        (
            spec,
            spec.transform(
                unit_column=privacy_unit,
                relation=relation,
                on_bad_record=on_bad_record,
                unit_ids=unit_ids,
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
        report_skipped_files=on_bad_record == "skip",
    )
    files, size = match_input_files(input_pattern)
    STATE.sources = frozenset(files)
    LOG.info("statistics: %s", ", ".join(spec.name for spec in specs))
    LOG.info(
        "input: %s (%d file(s), about %s)",
        _shown(input_pattern),
        len(files),
        approximate_size(size),
    )
    planned = [
        PlannedRelease(name, key, optional=optional)
        for _spec, transform in transforms
        for name, key, optional in transform.planned_releases
    ]

    def build(pipeline: beam.Pipeline) -> tuple[list[PCollection], PCollection | None]:
        read = pipeline | READ_EXPORT >> reader
        if on_bad_record != "skip":
            return [read | spec.name >> transform for spec, transform in transforms], None
        # Skipped files ride in the reader's one output (no tagged outputs: Beam's Dask runner
        # hands every output to every consumer); both branches reach the job's commit step.
        rows = read | RECORDS >> beam.Filter(lambda element: not isinstance(element, SkippedFile))
        skipped = read | SKIPPED_FILES >> beam.FlatMap(
            lambda element: [element.path] if isinstance(element, SkippedFile) else []
        )
        return [rows | spec.name >> transform for spec, transform in transforms], skipped

    check_temp_location(options)
    location = output if "://" in output else os.path.abspath(output)
    run = RunInfo(
        job,
        config_digest(config) if config else "",
        details={"input": _shown(input_pattern)},
        inputs=tuple(files),
        output_location=location,
    )
    # The relation every release is private under (checked above to be one): the ledger
    # compares it with the dataset's, so a statistic's own 'relation' counts, not the default.
    released_under = relations[0] if relations else relation
    reserved = reserve(ledger, dataset, budget, released_under, run, timeout=ledger_timeout)
    if reserved is None:
        document = run_releases(build, budget=budget, options=options, planned=planned)
        write_document(document, output)
        return document
    reservation, ledger_record = reserved
    started: list[bool] = []

    def before_run() -> None:
        start(reservation)
        started.append(True)

    try:
        document = run_releases(
            build, budget=budget, options=options, planned=planned, before_run=before_run
        )
    except BaseException:
        settle_failure(reservation, started=bool(started))
        raise
    document["budget"]["ledger"] = ledger_record
    ledger_record["after_commit"] = commit(reservation, budget, output, overwrite)
    write_document(document, output)
    return document


def run_single(
    spec: StatisticSpec, args: argparse.Namespace, options: PipelineOptions
) -> dict[str, Any]:
    """Run a one-statistic job from its parsed common flags, print and return its document."""
    document = run_statistics(
        [spec],
        input_pattern=args.input,
        input_format=args.input_format,
        json_fields=args.json_fields,
        privacy_unit=args.privacy_unit,
        record_level=args.record_level,
        unit_ids=args.unit_ids,
        relation=args.relation,
        on_bad_record=args.on_bad_record,
        budget=PrivacyBudget(args.epsilon, args.delta),
        options=options,
        output=args.output,
        ledger=args.ledger,
        dataset=args.dataset,
        overwrite=args.overwrite,
        job=spec.name,
        ledger_timeout=args.ledger_timeout,
    )
    print_summary(document)
    return document


def run_statistic(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    table: Callable[[argparse.Namespace], dict[str, Any]],
) -> dict[str, Any]:
    """A one-statistic job: parse its flags, build its statistic, run it, print the summary.

    ``table`` gives, from the parsed flags, the statistic's table as the release job's config
    would hold it: its ``type`` and its own keys. The flags every such job has fill in
    ``name``, ``method`` and ``epsilon`` (unless ``table`` splits epsilon itself).
    """
    args, options = parse_args(parser, argv)
    config = {"name": args.name, **table(args), "method": args.method}
    config.setdefault("epsilon", args.epsilon)
    return run_single(spec_from_config(config), args, options)
