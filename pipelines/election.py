"""The winner of a vote among public candidates (seed 003's village election).

    python -m pipelines.election --input 'votes-*.csv' --privacy_unit voter_id \\
        --candidate party --candidates 'Gyudon Party,Melon-pan Party' --epsilon 0.1 --output out/

One vote per unit (a unit with several records is reduced to one). ``--score margin`` with two
candidates and ``--relation replace`` is the seed's margin form (sensitivity 2).
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
    parser.add_argument("--candidate", required=True, help="the field holding the vote")
    parser.add_argument(
        "--candidates",
        required=True,
        help="public candidates: an existing file (one per line) or a,b,c (one: 'a,')",
    )
    parser.add_argument("--score", choices=["plurality", "margin"], default="plurality")
    parser.add_argument(
        "--method", choices=["permute_and_flip", "exponential"], default="permute_and_flip"
    )
    parser.add_argument("--name", default="election")
    return parser


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, options = parse_args(_parser(), argv)
    config: dict[str, Any] = {
        "name": args.name,
        "type": "election",
        "candidate": args.candidate,
        "candidates": args.candidates,
        "score": args.score,
        "method": args.method,
        "epsilon": args.epsilon,
    }
    return run_single(spec_from_config(config), args, options)


if __name__ == "__main__":
    cli(run)
