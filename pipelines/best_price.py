"""The revenue-maximising price on a public grid (seed 002's digital good).

    python -m pipelines.best_price --input 'export-*.parquet' --privacy_unit user_id \\
        --value willingness_to_pay [--prices 0.01:2.00:0.01] --epsilon 1 --output out/

``--prices START:STOP:STEP`` is read as decimals (STOP excluded); the default grid is
$0.01 ... $1.99. A unit with several answers is reduced to one by ``--per_unit``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pipelines.common import add_common_arguments, cli, parse_args, run_single
from pipelines.statistics import spec_from_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--value", required=True, help="the willingness-to-pay field")
    parser.add_argument(
        "--prices",
        default=None,
        help=(
            "START:STOP:STEP (default 0.01:2.00:0.01), or an existing file (one price per "
            "line), or p1,p2,... (one: 'p1,')"
        ),
    )
    parser.add_argument(
        "--per_unit", default="max", help="how a unit's several answers are reduced"
    )
    parser.add_argument(
        "--method", choices=["permute_and_flip", "exponential"], default="permute_and_flip"
    )
    parser.add_argument("--name", default="best_price")
    return parser


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, options = parse_args(_parser(), argv)
    config: dict[str, Any] = {
        "name": args.name,
        "type": "best_price",
        "value": args.value,
        "per_unit": args.per_unit,
        "method": args.method,
        "epsilon": args.epsilon,
    }
    if args.prices is not None:
        config["prices"] = args.prices
    return run_single(spec_from_config(config), args, options)


if __name__ == "__main__":
    cli(run)
