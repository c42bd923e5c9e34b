"""The most popular labels (websites, products, ...): the top k by number of distinct people.

    python -m pipelines.top_candidates --input 'export-*.avro' --privacy_unit user_id \\
        --candidate website [--candidates websites.txt] [--k 3] --epsilon 1 [--delta 1e-6] \\
        --output out/

Without --candidates the labels are first chosen from the data by DP key selection (noisy
counts of distinct people, kept above a threshold), which needs --delta > 0 and spends
--key_selection_fraction of epsilon.
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
    field = "the field holding the label counted. Required"
    parser = statistic_parser("pipelines.top_candidates", __doc__, "--candidate", field)
    parser.add_argument(
        "--candidates",
        metavar="FILE_OR_LIST",
        help="the public labels to choose among: an existing file (one per line) or a,b,c (one "
        f"label: 'a,'); at most {MAX_CANDIDATES:,}. Default: none; the labels are then chosen "
        "from the data first (DP key selection), which needs --delta > 0 and spends "
        "--key_selection_fraction of epsilon",
    )
    parser.add_argument(
        "--k",
        metavar="K",
        type=int,
        default=1,
        help="how many labels to release, most popular first. Default 1",
    )
    parser.add_argument(
        "--max_candidates_per_unit",
        metavar="N",
        type=int,
        default=None,
        help="how many distinct labels of one person are counted (the others are dropped). "
        "Default: no limit (a person still counts at most once per label)",
    )
    add_method_argument(parser)
    parser.add_argument(
        "--key_selection_fraction",
        metavar="FRACTION",
        type=float,
        default=0.5,
        help="without --candidates: the share of epsilon spent choosing the labels from the "
        "data; the rest chooses the top k among them. Default 0.5 (half)",
    )
    add_name_argument(parser, "top_candidates")
    return parser


def _table(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "top_candidates",
        "candidate": args.candidate,
        "k": args.k,
        "max_candidates_per_unit": args.max_candidates_per_unit,
    }
    if args.candidates is not None:
        config["candidates"] = args.candidates
        config["epsilon"] = args.epsilon
    else:
        if args.delta <= 0:
            raise ValueError(
                "top_candidates: without --candidates the candidate labels must be chosen from "
                "the data by DP key selection, which needs --delta > 0 (the probability that a "
                "label held by a single unit is released); give public --candidates or a delta"
            )
        config["key_selection_epsilon"] = args.epsilon * args.key_selection_fraction
        config["key_selection_delta"] = args.delta
        config["epsilon"] = args.epsilon * (1 - args.key_selection_fraction)
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run_statistic(_parser(), argv, _table)


if __name__ == "__main__":
    cli(run)
