"""The winner of a vote among public candidates.

    python -m pipelines.election --input 'votes-*.csv' --privacy_unit voter_id \\
        --candidate party --candidates 'Gyudon Party,Melon-pan Party' --epsilon 0.1 --output out/

One vote per person (a person with several vote records keeps one of them). --score margin
with two candidates scores each by its lead over the other (with --relation replace, a
switched vote moves the lead by 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pipelines.common import (
    add_common_arguments,
    add_method_argument,
    add_name_argument,
    cli,
    job_parser,
    parse_args,
    run_single,
)
from pipelines.statistics import MAX_CANDIDATES, spec_from_config


def _parser() -> argparse.ArgumentParser:
    parser = job_parser("pipelines.election", __doc__)
    add_common_arguments(parser)
    parser.add_argument(
        "--candidate",
        metavar="FIELD",
        required=True,
        help="the field holding each person's vote. Required",
    )
    parser.add_argument(
        "--candidates",
        metavar="FILE_OR_LIST",
        required=True,
        help="the public candidates: an existing file (one per line) or a,b,c (one candidate: "
        f"'a,'); votes for anything else are not counted. Required; at most {MAX_CANDIDATES:,}",
    )
    parser.add_argument(
        "--score",
        choices=["plurality", "margin"],
        default="plurality",
        help="plurality (default): the candidate with the most votes is likeliest to win; "
        "margin: exactly two candidates, each scored by its lead over the other",
    )
    add_method_argument(parser)
    add_name_argument(parser, "election")
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
