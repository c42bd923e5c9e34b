"""A private mean of a numeric field over public bounds.

    python -m pipelines.mean --input 'export-*.parquet' --privacy_unit user_id \\
        --value age --lower 0 --upper 120 --epsilon 1 --output out/

Values outside [lower, upper] are clamped; NaN and nulls follow --on_bad_record. The released
mean is a point of a public grid between the bounds, chosen by the exponential mechanism from
the exact sum and count of the clamped values: --num_points equally spaced values (default
10,000), log-spaced with --grid log, or the multiples of --resolution. Under --relation
replace, --n (the public number of values) tightens it.

How many values of one person are used is chosen privately by default (--max_contributions
auto, with a tenth of --epsilon; measured on real panels: 0.83 of one row per person's error,
and no bias where the value depends on how many rows a person has); --max_contributions N
keeps N, chosen at random among a person's values. With --n (the public number of values,
under --relation replace) the default is 1.
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
    field = "the numeric field whose mean is released. Required"
    parser = statistic_parser("pipelines.mean", __doc__, "--value", field)
    add_bounds_arguments(parser)
    parser.add_argument(
        "--grid",
        choices=["uniform", "log"],
        default=None,
        help="how the possible answers are spaced between the bounds: uniform (equal steps, "
        "the default) or log (equal ratios, for positive values spanning several powers of ten)",
    )
    parser.add_argument(
        "--resolution",
        metavar="STEP",
        default=None,
        help="the spacing of the possible answers: 1 for whole numbers, 0.01 for cents; the "
        "answers are its multiples between the bounds",
    )
    parser.add_argument(
        "--num_points",
        metavar="N",
        type=int,
        default=None,
        help="how many possible answers the grid has between the bounds. Default 10,000",
    )
    parser.add_argument(
        "--n",
        metavar="COUNT",
        type=int,
        default=None,
        help="the public number of values (with --relation replace only): known without "
        "looking at the data, it makes the mean's error smaller",
    )
    parser.add_argument(
        "--max_contributions",
        metavar="auto|N",
        type=int_or_auto,
        default=None,
        help="how many values of one person are used; the others are dropped, chosen at "
        "random. Default: auto (chosen privately with a tenth of --epsilon) with "
        "--privacy_unit and without --n; 1 otherwise",
    )
    add_method_argument(parser)
    add_name_argument(parser, "mean")
    return parser


def _table(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "mean",
        "value": args.value,
        "lower": args.lower,
        "upper": args.upper,
    }
    if args.grid is not None and args.resolution is not None:
        raise ValueError("give --grid or --resolution, not both")
    for key in ("grid", "resolution", "num_points", "n", "max_contributions"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_statistic(_parser(), argv, _table)


if __name__ == "__main__":
    cli(run)
