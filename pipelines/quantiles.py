"""Private quantiles of a numeric field over public bounds (seeds 000/001).

    python -m pipelines.quantiles --input 'export-*.parquet' --privacy_unit user_id \\
        --value age --quantiles 0.25,0.5,0.75 --lower 0 --upper 120 --epsilon 1 --output out/

Values outside [lower, upper] are clamped; NaN and nulls follow --on_bad_record. The
candidates are a public grid of --num_points points (uniform, or log-spaced with --grid log).
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
    parser.add_argument("--value", required=True, help="the numeric field")
    parser.add_argument("--quantiles", required=True, help="comma-separated, e.g. 0.25,0.5,0.75")
    parser.add_argument("--lower", type=float, required=True, help="public lower bound")
    parser.add_argument("--upper", type=float, required=True, help="public upper bound")
    parser.add_argument("--grid", choices=["uniform", "log"], default="uniform")
    parser.add_argument("--num_points", type=int, default=None, help="grid size (default 10^6)")
    parser.add_argument("--max_contributions", type=int, default=1, help="values kept per unit")
    parser.add_argument("--split", choices=["recursive", "independent"], default=None)
    parser.add_argument(
        "--method", choices=["permute_and_flip", "exponential"], default="permute_and_flip"
    )
    parser.add_argument("--name", default="quantiles")
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


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, options = parse_args(_parser(), argv)
    config: dict[str, Any] = {
        "name": args.name,
        "type": "quantiles",
        "value": args.value,
        "quantiles": _quantiles(args.quantiles),
        "lower": args.lower,
        "upper": args.upper,
        "grid": args.grid,
        "max_contributions": args.max_contributions,
        "method": args.method,
        "epsilon": args.epsilon,
    }
    if args.num_points is not None:
        config["num_points"] = args.num_points
    if args.split is not None:
        config["split"] = args.split
    return run_single(spec_from_config(config), args, options)


if __name__ == "__main__":
    cli(run)
