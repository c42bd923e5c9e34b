"""The main job: several statistics from one export under one total budget.

    python -m pipelines.release --config pipelines/configs/sample_survey.toml --output out/

The config is TOML (every key is listed after the flags below):

    [input]
    path = "sample_data/survey/export-*.avro"   # relative paths are relative to the config;
                                     # or a list: ["part-*.parquet", "part-*.csv"]
    format = "avro"                  # optional: for files whose suffix names no format
    privacy_unit = "user_id"         # the field identifying a person; or, instead:
    # record_level = true            # record-level privacy, asked for explicitly
    on_bad_record = "fail"           # or "skip"

    [budget]
    epsilon = 3.0                    # the total, checked before any data is read
    delta = 1e-6                     # optional (key selection needs it)
    composition = "basic"            # or "zcdp" (tighter for many exponential-mechanism releases)
    relation = "add_remove"          # or "replace" (per statistic too)

    [[statistics]]                   # one table per statistic
    name = "top_websites"
    type = "top_candidates"          # top_candidates | best_price | election | quantiles |
                                     # median | min | max | mean | cdf
    candidate = "website"
    candidates = "websites.txt"      # a list, or an existing file (one per line), or "a,b,c";
                                     # omit for DP key selection (key_selection_epsilon,
                                     # key_selection_delta)
    k = 3
    weight = 2                       # a share of the budget by weight, or epsilon = 0.5

A statistic's other keys are the parameters of its type (lower, upper, quantiles, prices,
max_contributions, key and keys for one release per key, ...): the keys each type accepts are
listed below (derived from the library's signatures, so the list cannot drift from the code).
Quantile statistics (quantiles, median, min, max) default to max_contributions = "auto" (a
share bound_share, default 1/10, of their epsilon chooses the bound privately; 1 with
record_level) and, when the export's schema (Parquet, Avro) declares the value field integer
or decimal, to the grid of its multiples (resolution); set grid or resolution to choose.
An unknown key in any table is an error naming the nearest valid key; so is a value of the
wrong type. Flags other than --config, --output and the operator's switches must be Beam
pipeline options.
"""

from __future__ import annotations

import argparse
import textwrap
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from beam_dp import PrivacyBudget
from beam_dp.jobs import FORMATS
from pipelines.cli import SKIP_HINT_CONFIG, cli
from pipelines.flags import (
    JOB_EPILOG,
    add_operator_arguments,
    add_output_argument,
    job_parser,
    parse_args,
)
from pipelines.job_run import run_statistics
from pipelines.statistics import TYPES, check_table, spec_from_config, statistic_keys
from pipelines.summary import print_summary

TABLES: dict[str, Any] = {"input": dict, "budget": dict, "statistics": list}
INPUT_KEYS: dict[str, Any] = {
    "path": str | list[str],
    "format": Literal[FORMATS],
    "privacy_unit": str,
    "record_level": bool,
    "unit_ids": Literal["normalize", "exact"],
    "on_bad_record": Literal["fail", "skip"],
    "json_fields": list[str],
}
BUDGET_KEYS: dict[str, Any] = {
    "epsilon": float,
    "delta": float,
    "composition": str,
    "relation": Literal["add_remove", "replace"],
}


def load_config(path: str, *, require_path: bool = True) -> dict[str, Any]:
    """Read and check the config (its structure, keys and types, not the data).

    ``require_path=False``: ``[input]`` may leave out ``path`` (the streaming job's
    ``--landing`` gives the location).

    Raises:
        ValueError: for an unreadable file, a missing table or key, an unknown key in any
            table (naming the nearest valid one) or a value of the wrong type.
    """
    config_path = Path(path)
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"release: cannot read the config {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"release: the config {path} is not valid TOML: {error}") from None
    check_table(config, TABLES, f"the config {path}")
    for section in ("input", "budget"):
        if section not in config:
            raise ValueError(f"release: the config {path} needs an [{section}] table")
    if not config.get("statistics"):
        raise ValueError(f"release: the config {path} lists no [[statistics]]")
    check_table(config["input"], INPUT_KEYS, "[input]")
    check_table(config["budget"], BUDGET_KEYS, "[budget]")
    source = config["input"]
    if require_path and "path" not in source:
        raise ValueError(f"release: [input] in {path} needs 'path'")
    if "epsilon" not in config["budget"]:
        raise ValueError(f"release: [budget] in {path} needs 'epsilon'")
    if "privacy_unit" in source and source.get("record_level", False):
        raise ValueError("[input]: give either 'privacy_unit' or 'record_level = true', not both")
    if "privacy_unit" not in source and source.get("record_level") is not True:
        raise ValueError(
            "[input] needs 'privacy_unit' (the field identifying a person), or "
            "'record_level = true' to ask explicitly for record-level privacy, which protects "
            "single records, not people (someone with r records is protected at r times epsilon)"
        )
    return config


def config_keys_help() -> str:
    """The keys each table of the config accepts, derived from the same lists the checks use."""
    common = set.intersection(*(set(statistic_keys(kind, per_key=False)) for kind in TYPES))
    rows = [
        ("[input]", ", ".join(INPUT_KEYS)),
        ("[budget]", ", ".join(BUDGET_KEYS)),
        ("[[statistics]]", ", ".join(sorted(common))),
    ]
    for kind in TYPES:
        own = sorted(set(statistic_keys(kind, per_key=False)) - common)
        per_key = sorted(set(statistic_keys(kind, per_key=True)) - common - set(own))
        text = ", ".join(own) + (f"; per key: {', '.join(per_key)}" if per_key else "")
        rows.append((f'type = "{kind}"', text))
    lines = ["The config's keys (docs/jobs.md, \"The release job's config\", explains them):"]
    for table, keys in rows:
        lines += textwrap.wrap(
            keys,
            width=92,
            initial_indent=f"  {table:<25} ",
            subsequent_indent=" " * 28,
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = job_parser("pipelines.release", __doc__, epilog=config_keys_help() + "\n" + JOB_EPILOG)
    parser.add_argument(
        "--config",
        metavar="FILE",
        required=True,
        help="the job's TOML config: the input, the total budget and one [[statistics]] table "
        "per release (the format is above, the keys below). Required",
    )
    add_output_argument(parser)
    add_operator_arguments(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = _parser()
    args, options = parse_args(parser, argv)
    config = load_config(args.config)
    base = Path(args.config).resolve().parent
    source = config["input"]
    budget_config = config["budget"]
    given = source["path"]
    patterns = [
        pattern if Path(pattern).is_absolute() or "://" in pattern else str(base / pattern)
        for pattern in ([given] if isinstance(given, str) else given)
    ]
    if not patterns:
        raise ValueError(f"release: [input] 'path' in {args.config} lists no pattern")
    specs = [spec_from_config(entry, base=base) for entry in config["statistics"]]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError("release: statistic names must be distinct")
    budget = PrivacyBudget(
        float(budget_config["epsilon"]),
        float(budget_config.get("delta", 0.0)),
        composition=budget_config.get("composition", "basic"),
    )
    document = run_statistics(
        specs,
        input_pattern=patterns[0] if len(patterns) == 1 else patterns,
        input_format=source.get("format"),
        privacy_unit=source.get("privacy_unit"),
        record_level=bool(source.get("record_level", False)),
        unit_ids=source.get("unit_ids", "normalize"),
        relation=budget_config.get("relation", "add_remove"),
        on_bad_record=source.get("on_bad_record", "fail"),
        json_fields=source.get("json_fields"),
        budget=budget,
        options=options,
        output=args.output,
        ledger=args.ledger,
        dataset=args.dataset,
        overwrite=args.overwrite,
        job="pipelines.release",
        config=args.config,
        ledger_timeout=args.ledger_timeout,
    )
    print_summary(document)
    print(f"\nwrote {args.output}/release.json, release.avro and report.html")
    return document


if __name__ == "__main__":
    cli(run, skip_hint=SKIP_HINT_CONFIG)
