"""Statistic specs shared by the jobs: what to read, what budget share to ask for, which transform.

Each statistic of a job (one of the single-statistic CLIs, or an entry of the release job's
config) becomes a :class:`StatisticSpec`: the columns it reads, the budget share it requests
(mechanism and rounds, decided by the library's own planning), and the beam_dp transform that
releases it. The budget asks for every share before any transform is built, so an over-spent
budget fails before any data is read. No DP math here: sensitivities, epsilons per round and
accuracy all come from beam_dp.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import apache_beam as beam

from beam_dp.accounting import BudgetShare, PrivacyBudget
from beam_dp.beam.key_selection import KeySelection
from beam_dp.beam.quantiles import (
    PrivateMax,
    PrivateMean,
    PrivateMedian,
    PrivateMin,
    PrivateQuantiles,
)
from beam_dp.beam.selection import BestPrice, Election, TopCandidates
from beam_dp.summaries.quantiles import DEFAULT_SPLIT, parse_quantiles, plan_quantiles

__all__ = ["TYPES", "StatisticSpec", "parse_prices", "spec_from_config"]

TYPES = ("top_candidates", "best_price", "election", "quantiles", "median", "min", "max", "mean")
_EXTREMES = {"median": PrivateMedian, "min": PrivateMin, "max": PrivateMax}


def parse_prices(spec: str) -> list[float]:
    """START:STOP:STEP as exact decimals, STOP excluded (0.01:2.00:0.01 is 0.01 ... 1.99)."""
    try:
        start, stop, step = (Decimal(part) for part in spec.split(":"))
    except (ValueError, InvalidOperation):
        raise ValueError(
            f"'prices' must be START:STOP:STEP (decimals); received {spec!r}"
        ) from None
    if not (step > 0 and start > 0 and stop > start):
        raise ValueError(f"'prices' needs 0 < START < STOP and STEP > 0; received {spec!r}")
    count = int((stop - start) / step)
    return [float(p) for p in (start + i * step for i in range(count + 1)) if p < stop]


def read_labels(spec: Any, base: Path | None = None) -> list[Any]:
    """Public labels: a list, a file (one per line, # comments), or 'a,b,c'."""
    if isinstance(spec, (list, tuple)):
        return list(spec)
    text = str(spec)
    path = Path(text) if base is None or Path(text).is_absolute() else base / text
    if path.is_file():
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        return [line for line in lines if line and not line.startswith("#")]
    return [label.strip() for label in text.split(",") if label.strip()]


@dataclass
class StatisticSpec:
    """One statistic to release: its columns, budget request and transform parameters."""

    name: str
    type: str
    params: dict[str, Any]
    columns: list[str]
    mechanism: str
    rounds: int = 1
    epsilon: float | None = None
    weight: float | None = None
    key_selection: dict[str, float] | None = None
    shares: dict[str, BudgetShare] = field(default_factory=dict)

    def request(self, budget: PrivacyBudget) -> None:
        """Ask ``budget`` for this statistic's share(s) (before any data is read)."""
        if self.key_selection is not None:
            self.shares["keys"] = budget.request(
                f"{self.name}_candidates",
                mechanism="partition_selection",
                epsilon=self.key_selection["epsilon"],
                delta=self.key_selection["delta"],
            )
        self.shares["main"] = budget.request(
            self.name,
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            weight=self.weight,
            rounds=self.rounds,
        )

    def transform(
        self, *, unit_column: str | None, relation: str, on_bad_record: str
    ) -> beam.PTransform:
        """The beam_dp transform (call after ``budget.finalize()``)."""
        common: dict[str, Any] = {
            "unit_column": unit_column,
            "epsilon": self.shares["main"],
            "relation": self.params.pop("relation", relation),
            "on_bad_record": on_bad_record,
        }
        params = dict(self.params)
        per_key = "key_column" in params
        if self.type == "top_candidates":
            if "keys" in self.shares:
                params["key_selection"] = KeySelection(
                    epsilon=self.shares["keys"],
                    max_candidates_per_unit=params.get("max_candidates_per_unit") or 1,
                )
            cls: Any = TopCandidates
        elif self.type == "best_price":
            cls = BestPrice
        elif self.type == "election":
            cls = Election
        elif self.type == "quantiles":
            cls = PrivateQuantiles
        elif self.type == "mean":
            cls = PrivateMean
        else:
            cls = _EXTREMES[self.type]
        variant = cls.PerKey if per_key else cls.Globally
        if self.type == "quantiles":
            quantiles = params.pop("quantiles")
            return variant(quantiles, **common, **params)
        return variant(**common, **params)


def _number(config: Mapping[str, Any], key: str, name: str) -> float:
    if key not in config:
        raise ValueError(f"statistic {name!r}: '{key}' is required")
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"statistic {name!r}: '{key}' must be a number")
    return float(value)


def spec_from_config(config: Mapping[str, Any], *, base: Path | None = None) -> StatisticSpec:
    """A statistic from one config entry (see ``pipelines.release`` for the fields)."""
    entry = dict(config)
    name = entry.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("every statistic needs a 'name' (a non-empty string)")
    kind = entry.pop("type", None)
    if kind not in TYPES:
        raise ValueError(
            f"statistic {name!r}: 'type' must be one of {list(TYPES)}; received {kind!r}"
        )
    epsilon = entry.pop("epsilon", None)
    weight = entry.pop("weight", None)
    if epsilon is None and weight is None:
        weight = 1.0
    method = entry.get("method", "permute_and_flip")
    params: dict[str, Any] = {"name": name}
    columns: list[str] = []
    if "key" in entry:
        params["key_column"] = entry.pop("key")
        params["keys"] = read_labels(entry.pop("keys"), base)
        columns.append(params["key_column"])
        if "max_keys_per_unit" in entry:
            params["max_keys_per_unit"] = entry.pop("max_keys_per_unit")
    rounds = 1
    key_selection = None
    mechanism = method
    if kind in ("top_candidates", "election"):
        params["candidate_column"] = entry.pop("candidate")
        columns.append(params["candidate_column"])
        if "candidates" in entry:
            params["candidates"] = read_labels(entry.pop("candidates"), base)
        elif kind == "election":
            raise ValueError(f"statistic {name!r}: an election needs public 'candidates'")
        else:
            params["candidates"] = None
            key_selection = {
                "epsilon": _number(entry, "key_selection_epsilon", name),
                "delta": _number(entry, "key_selection_delta", name),
            }
            entry.pop("key_selection_epsilon")
            entry.pop("key_selection_delta")
        if kind == "top_candidates":
            rounds = int(entry.get("k", 1))
            mechanism = method if rounds == 1 else f"{method}_top_k"
    else:
        params["value_column"] = entry.pop("value")
        columns.append(params["value_column"])
        if kind == "best_price" and isinstance(entry.get("prices"), str):
            entry["prices"] = parse_prices(entry["prices"])
        if kind in ("quantiles", "median", "min", "max"):
            requested = entry.get("quantiles") if kind == "quantiles" else [0.5]
            if kind == "quantiles" and requested is None:
                raise ValueError(f"statistic {name!r}: 'quantiles' is required")
            plan = plan_quantiles(
                parse_quantiles(requested),
                epsilon=1.0,
                num_candidates=2,
                split=entry.get("split", DEFAULT_SPLIT),
            )
            rounds = plan.rounds
    params.update(entry)
    return StatisticSpec(
        name=name,
        type=kind,
        params=params,
        columns=columns,
        mechanism=mechanism,
        rounds=rounds,
        epsilon=None if epsilon is None else float(epsilon),
        weight=None if weight is None else float(weight),
        key_selection=key_selection,
    )
