"""The main job: several statistics from one export under one total budget.

    python -m pipelines.release --config pipelines/configs/sample_survey.toml --output out/

The config is TOML::

    [input]
    path = "sample_data/survey/export-*.avro"   # relative paths are relative to the config
    format = "avro"                  # optional: from the suffix
    privacy_unit = "user_id"         # omit for record-level privacy
    on_bad_record = "fail"           # or "skip"

    [budget]
    epsilon = 3.0                    # the total, checked before any data is read
    delta = 1e-6                     # optional (key selection needs it)
    composition = "basic"            # or "zcdp" (tighter for many exponential-mechanism releases)
    relation = "add_remove"          # or "replace" (per statistic too)

    [[statistics]]                   # one table per statistic
    name = "top_websites"
    type = "top_candidates"          # top_candidates | best_price | election | quantiles |
                                     # median | min | max | mean
    candidate = "website"
    candidates = "websites.txt"      # a file (one per line), a list, or omit for DP key
                                     # selection (key_selection_epsilon, key_selection_delta)
    k = 3
    weight = 2                       # a share of the budget by weight, or epsilon = 0.5

Other fields of a statistic are passed to its beam_dp transform (``lower``, ``upper``,
``quantiles``, ``prices``, ``max_contributions``, ``key``/``keys`` for per-key releases, ...).
Flags other than --config and --output go to Beam's PipelineOptions.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beam_dp.accounting import PrivacyBudget
from pipelines.common import cli, parse_args, print_summary, run_statistics
from pipelines.statistics import spec_from_config


def load_config(path: str) -> dict[str, Any]:
    """Read and check the config (its structure, not the data)."""
    config_path = Path(path)
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SystemExit(f"release: cannot read the config {path}: {error}") from None
    for section in ("input", "budget"):
        if not isinstance(config.get(section), dict):
            raise SystemExit(f"release: the config {path} needs an [{section}] table")
    if not config.get("statistics"):
        raise SystemExit(f"release: the config {path} lists no [[statistics]]")
    if "path" not in config["input"]:
        raise SystemExit(f"release: [input] in {path} needs 'path'")
    if "epsilon" not in config["budget"]:
        raise SystemExit(f"release: [budget] in {path} needs 'epsilon'")
    return config


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the job's TOML config")
    parser.add_argument("--output", required=True, help="directory for the outputs")
    args, options = parse_args(parser, argv)
    config = load_config(args.config)
    base = Path(args.config).resolve().parent
    source = config["input"]
    budget_config = config["budget"]
    pattern = str(source["path"])
    if not Path(pattern).is_absolute() and "://" not in pattern:
        pattern = str(base / pattern)
    specs = [spec_from_config(entry, base=base) for entry in config["statistics"]]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise SystemExit("release: statistic names must be distinct")
    budget = PrivacyBudget(
        float(budget_config["epsilon"]),
        float(budget_config.get("delta", 0.0)),
        composition=budget_config.get("composition", "basic"),
    )
    document = run_statistics(
        specs,
        input_pattern=pattern,
        input_format=source.get("format"),
        privacy_unit=source.get("privacy_unit"),
        relation=budget_config.get("relation", "add_remove"),
        on_bad_record=source.get("on_bad_record", "fail"),
        budget=budget,
        options=options,
        output=args.output,
    )
    print_summary(document)
    print(f"\nwrote {args.output}/release.json, release.avro and report.html")
    return document


if __name__ == "__main__":
    cli(run)
