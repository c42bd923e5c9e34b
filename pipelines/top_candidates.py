"""The most popular public candidates (seed 002's heavy hitter): top-k by distinct units.

    python -m pipelines.top_candidates --input 'export-*.avro' --privacy_unit user_id \\
        --candidate website [--candidates websites.txt] [--k 3] --epsilon 1 [--delta 1e-6] \\
        --output out/

Without ``--candidates`` the labels are first chosen from the data by DP key selection
(thresholded noisy distinct-unit counts), which needs ``--delta > 0`` and spends
``--key_selection_fraction`` of epsilon.
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
    parser.add_argument("--candidate", required=True, help="the field naming the candidate")
    parser.add_argument(
        "--candidates",
        help="public candidates: an existing file (one per line) or a,b,c (one: 'a,')",
    )
    parser.add_argument("--k", type=int, default=1, help="how many candidates to release")
    parser.add_argument("--max_candidates_per_unit", type=int, default=None)
    parser.add_argument(
        "--method", choices=["permute_and_flip", "exponential"], default="permute_and_flip"
    )
    parser.add_argument("--key_selection_fraction", type=float, default=0.5)
    parser.add_argument("--name", default="top_candidates")
    return parser


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, options = parse_args(_parser(), argv)
    config: dict[str, Any] = {
        "name": args.name,
        "type": "top_candidates",
        "candidate": args.candidate,
        "k": args.k,
        "method": args.method,
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
    return run_single(spec_from_config(config), args, options)


if __name__ == "__main__":
    cli(run)
