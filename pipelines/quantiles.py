"""Private quantiles of a numeric field (median, quartiles, ...) over public bounds.

    python -m pipelines.quantiles --input 'export-*.parquet' --privacy_unit user_id \\
        --value age --quantiles 0.25,0.5,0.75 --lower 0 --upper 120 --epsilon 1 --output out/

Values outside [lower, upper] are clamped; NaN and nulls follow --on_bad_record. The
released quantiles are points of a public grid between the bounds: by default, when the
export's schema (Parquet, Avro) declares the field integer or decimal, its multiples (every
m-th one beyond --num_points); otherwise --num_points equally spaced values (or log-spaced
with --grid log). --resolution sets the spacing of the values yourself.

How many values of one person are used is chosen privately by default (--max_contributions
auto: a tenth of --epsilon chooses it among 1, 2, 4, ..., 1024 as a private 0.9-quantile of
the rows per person; the rest releases the quantiles, the total is --epsilon).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pipelines.cli import cli
from pipelines.flags import (
    add_bounds_arguments,
    add_method_argument,
    add_name_argument,
    int_or_auto,
    statistic_parser,
)
from pipelines.job_run import run_statistic


def _parser() -> argparse.ArgumentParser:
    field = "the numeric field whose quantiles are released. Required"
    parser = statistic_parser("pipelines.quantiles", __doc__, "--value", field)
    parser.add_argument(
        "--quantiles",
        metavar="LIST",
        required=True,
        help="which quantiles, as fractions separated by commas: 0.5 is the median, "
        "0.25,0.5,0.75 the quartiles. Required",
    )
    add_bounds_arguments(parser)
    parser.add_argument(
        "--grid",
        choices=["uniform", "log"],
        default=None,
        help="how the possible answers are spaced between the bounds: uniform (equal steps) "
        "or log (equal ratios, for positive values spanning several powers of ten). Default: "
        "the field's resolution when the schema declares it, else uniform",
    )
    parser.add_argument(
        "--resolution",
        metavar="STEP",
        default=None,
        help="the spacing of the field's values: integer (or 1), 0.01 for cents, 0.1 for "
        "tenths; the possible answers are its multiples between the bounds. Default: from the "
        "export's schema (Parquet, Avro) when it declares one",
    )
    parser.add_argument(
        "--num_points",
        metavar="N",
        type=int,
        default=None,
        help="how many possible answers the grid has between the bounds (its resolution). "
        "Default 1,000,000; at most 2,097,152",
    )
    parser.add_argument(
        "--max_contributions",
        metavar="auto|N",
        type=int_or_auto,
        default=None,
        help="how many values of one person are used; the others are dropped, chosen at "
        "random. More keeps more data but each person weighs more. Default auto (chosen "
        "privately with a tenth of --epsilon; 1 with --record_level)",
    )
    parser.add_argument(
        "--split",
        choices=["joint", "recursive", "independent"],
        default=None,
        help="how several quantiles share epsilon: joint (chosen one or two at a time, each "
        "inside the range the others leave, in ceil(log3(m+1)) rounds), recursive (one at a "
        "time, ceil(log2(m+1)) rounds) or independent (each on all the data with an equal "
        "share). Default: joint for two quantiles or more",
    )
    add_method_argument(parser)
    add_name_argument(parser, "quantiles")
    return parser


def _quantiles(spec: str) -> list[float]:
    """``--quantiles 0.25,0.5,0.75``: numbers separated by commas (one: ``0.5``)."""
    parts = [part.strip() for part in spec.split(",")]
    try:
        return [float(part) for part in parts]
    except ValueError:
        raise ValueError(
            f"--quantiles must be numbers separated by commas (0.25,0.5,0.75); received {spec!r}"
        ) from None


def _table(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "quantiles",
        "value": args.value,
        "quantiles": _quantiles(args.quantiles),
        "lower": args.lower,
        "upper": args.upper,
    }
    if args.grid is not None and args.resolution is not None:
        raise ValueError("give --grid or --resolution, not both")
    if args.grid is not None:
        config["grid"] = args.grid
    if args.resolution is not None:
        config["resolution"] = args.resolution
    if args.max_contributions is not None:
        config["max_contributions"] = args.max_contributions
    if args.num_points is not None:
        config["num_points"] = args.num_points
    if args.split is not None:
        config["split"] = args.split
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_statistic(_parser(), argv, _table)


if __name__ == "__main__":
    cli(run)
