"""The price that earns the most, chosen privately from a public list of prices.

    python -m pipelines.best_price --input 'export-*.parquet' --privacy_unit user_id \\
        --value willingness_to_pay [--prices 0.01:2.00:0.01] --epsilon 1 --output out/

Each person states the most they would pay; a price earns the price times the number of
people willing to pay it. --prices START:STOP:STEP is read as decimals (STOP excluded); the
default grid is $0.01 ... $1.99. A person with several answers is reduced to one by
--per_unit.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pipelines.cli import cli
from pipelines.flags import add_method_argument, add_name_argument, statistic_parser
from pipelines.job_run import run_statistic
from pipelines.statistics import MAX_CANDIDATES


def _parser() -> argparse.ArgumentParser:
    field = "the field holding the most each person would pay. Required"
    parser = statistic_parser("pipelines.best_price", __doc__, "--value", field)
    parser.add_argument(
        "--prices",
        metavar="GRID_FILE_OR_LIST",
        default=None,
        help=(
            "the public prices to choose from: START:STOP:STEP in decimals, STOP excluded; or "
            "an existing file (one price per line); or p1,p2,... (one price: 'p1,'). Default "
            f"0.01:2.00:0.01, that is $0.01 ... $1.99. At most {MAX_CANDIDATES:,} prices"
        ),
    )
    parser.add_argument(
        "--per_unit",
        metavar="RULE",
        default="max",
        help="how several answers of one person become one: max (default), min or mean",
    )
    add_method_argument(parser)
    add_name_argument(parser, "best_price")
    return parser


def _table(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "best_price",
        "value": args.value,
        "per_unit": args.per_unit,
    }
    if args.prices is not None:
        config["prices"] = args.prices
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_statistic(_parser(), argv, _table)


if __name__ == "__main__":
    cli(run)
