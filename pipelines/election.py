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

from pipelines.cli import cli
from pipelines.flags import add_method_argument, add_name_argument, statistic_parser
from pipelines.job_run import run_statistic
from pipelines.statistics import MAX_CANDIDATES


def _parser() -> argparse.ArgumentParser:
    field = "the field holding each person's vote. Required"
    parser = statistic_parser("pipelines.election", __doc__, "--candidate", field)
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


def _table(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "election",
        "candidate": args.candidate,
        "candidates": args.candidates,
        "score": args.score,
    }
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_statistic(_parser(), argv, _table)


if __name__ == "__main__":
    cli(run)
