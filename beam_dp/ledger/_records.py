"""What the ledger reads back: periods, runs, owners' events and a dataset's status.

Frozen records built from checked rows (:mod:`beam_dp.ledger._tables`), with the JSON the
budget CLI prints and a job puts into ``release.json``. Times are stored as UTC text with
microseconds (:func:`timestamp`); amounts are exact (:class:`~beam_dp.ledger.plan.Cost`).

Privacy:
    Public facts only: names, totals, amounts, times, jobs, statistics' names, hosts, process
    ids, output locations and the ledger entries of releases. Never a record or a
    data-dependent count.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal

from beam_dp.accounting import Composition
from beam_dp.accounting.zcdp import ceil_float, zcdp_to_approx_dp
from beam_dp.ledger._amounts import show_amount
from beam_dp.ledger.periods import Renewal, renewal_phrase
from beam_dp.ledger.plan import Cost

__all__ = [
    "CHARGED",
    "STATES",
    "DatasetStatus",
    "Event",
    "Period",
    "RunRecord",
    "RunState",
    "amounts_json",
    "dataset_status",
    "parse_timestamp",
    "process_gone",
    "shown_time",
    "timestamp",
]

RunState = Literal["reserved", "committed", "returned", "abandoned", "released"]
STATES: tuple[RunState, ...] = ("reserved", "committed", "returned", "abandoned", "released")
#: The states that count against a dataset (see the state machine in :mod:`._runs`).
CHARGED: tuple[RunState, ...] = ("reserved", "committed", "abandoned")


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: object, what: str) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"{what} is not a timestamp")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"{what} is not a timestamp") from None


def shown_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def process_gone(host: str, pid: int) -> bool | None:
    """True if ``pid`` is gone from this host, False if it runs, None if not on this host."""
    if host != socket.gethostname():
        return None
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    except OSError:
        return None
    return False


@dataclass(frozen=True)
class Period:
    """A renewal period: ``[starts_at, ends_at)`` with its allowance."""

    id: int | None
    starts_at: datetime
    ends_at: datetime | None
    allowance: Cost

    def describe(self) -> str:
        if self.ends_at is None:
            return f"since {shown_time(self.starts_at)}"
        return f"{shown_time(self.starts_at)} to {shown_time(self.ends_at)}"


@dataclass(frozen=True)
class RunRecord:
    """One reservation and what became of it (public facts only)."""

    id: int
    dataset: str
    period_start: datetime
    state: RunState
    reserved_at: datetime
    closed_at: datetime | None
    cost: Cost
    job: str
    config_digest: str
    statistics: tuple[str, ...]
    host: str
    pid: int
    details: Mapping[str, Any]
    output_location: str | None
    overwrite: bool
    overwrites: tuple[int, ...]
    entries: tuple[Mapping[str, Any], ...]
    note: str
    started_at: datetime | None = None

    @property
    def charged(self) -> bool:
        """Whether the run counts against its dataset."""
        return self.state in CHARGED

    @property
    def process_gone(self) -> bool | None:
        """For a ``reserved`` run: whether its process is gone (None: another host)."""
        if self.state != "reserved":
            return None
        return process_gone(self.host, self.pid)

    @property
    def shown_state(self) -> str:
        """The state, saying whether a reserved run started reading data and whether its
        process is gone (a started run stays charged whatever became of it)."""
        if self.state != "reserved":
            return self.state
        started = "started reading data" if self.started_at is not None else "not started"
        if self.process_gone:
            return f"reserved ({started}; abandoned: process gone)"
        return f"reserved ({started})"

    def to_json(self, composition: Composition) -> dict[str, Any]:
        """Plain JSON (amounts as floats, and exact under ``exact``)."""
        amounts = amounts_json(self.cost, composition)
        return {
            "run": self.id,
            "dataset": self.dataset,
            "state": self.state,
            "shown_state": self.shown_state,
            "charged": self.charged,
            "period_start": timestamp(self.period_start),
            "reserved_at": timestamp(self.reserved_at),
            "closed_at": None if self.closed_at is None else timestamp(self.closed_at),
            "started_at": None if self.started_at is None else timestamp(self.started_at),
            **amounts["float"],
            "exact": amounts["exact"],
            "job": self.job,
            "config_digest": self.config_digest,
            "statistics": list(self.statistics),
            "host": self.host,
            "pid": self.pid,
            "details": dict(self.details),
            "output_location": self.output_location,
            "overwrite": self.overwrite,
            "overwrites": list(self.overwrites),
            "entries": [dict(entry) for entry in self.entries],
            "note": self.note,
        }


def amounts_json(cost: Cost, composition: Composition) -> dict[str, dict[str, Any]]:
    if composition == "zcdp":
        return {"float": {"rho": float(cost.rho)}, "exact": {"rho": str(cost.rho)}}
    return {
        "float": {"epsilon": float(cost.epsilon), "delta": float(cost.delta)},
        "exact": {"epsilon": str(cost.epsilon), "delta": str(cost.delta)},
    }


@dataclass(frozen=True)
class Event:
    """An owner's action on a dataset: ``create``, ``renew`` or ``release``."""

    id: int
    dataset: str
    at: datetime
    action: str
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.id,
            "dataset": self.dataset,
            "at": timestamp(self.at),
            "action": self.action,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True)
class DatasetStatus:
    """A dataset's budget in its current period.

    Attributes:
        name, composition, relation, renewal, note, created_at: As created.
        period: The current period and its allowance (``total``).
        conversion_delta: δ of the dataset: the total δ under basic composition; under zCDP
            the δ at which ρ is reported as (ε, δ).
        committed: What committed runs of this period spent.
        reserved: What runs in progress (reserved or abandoned) hold.
        remaining: total − committed − reserved, never below 0.
        committed_all_periods: What committed runs of every period spent (privacy loss
            composes across periods; renewal is a policy).
        periods: How many periods the dataset has had (the current one included).
        open_runs: Runs still reserved or abandoned, in any period.
    """

    name: str
    composition: Composition
    relation: str
    renewal: Renewal
    note: str
    created_at: datetime
    period: Period
    conversion_delta: Fraction
    committed: Cost
    reserved: Cost
    committed_all_periods: Cost
    periods: int
    open_runs: tuple[RunRecord, ...] = field(default=())
    inputs: tuple[str, ...] = ()

    @property
    def total(self) -> Cost:
        return self.period.allowance

    @property
    def remaining(self) -> Cost:
        return (self.total - self.committed - self.reserved).clamp()

    def epsilon_equivalent(self, cost: Cost) -> float | None:
        """Under zCDP, the ε (at ``conversion_delta``) that ``cost.rho`` guarantees."""
        if self.composition != "zcdp":
            return None
        return zcdp_to_approx_dp(ceil_float(cost.rho), float(self.conversion_delta))

    def describe_remaining(self) -> str:
        """One line: remaining of total, with what is committed and reserved."""
        c = self.composition
        text = (
            f"{self.remaining.describe(c)} left of {self.total.describe(c)} in the period "
            f"{self.period.describe()} ({self.committed.describe(c)} committed, "
            f"{self.reserved.describe(c)} reserved by runs in progress or abandoned)"
        )
        if c == "zcdp":
            left = self.epsilon_equivalent(self.total) or 0.0
            used = self.epsilon_equivalent(self.committed + self.reserved) or 0.0
            text += (
                f"; as (epsilon, delta={show_amount(self.conversion_delta)}): {used:.6g} of "
                f"{left:.6g} used"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: amounts as floats per coordinate, exact text under ``exact``."""
        coordinates = ("rho",) if self.composition == "zcdp" else ("epsilon", "delta")
        parts = {
            "total": self.total,
            "committed": self.committed,
            "reserved": self.reserved,
            "remaining": self.remaining,
        }
        amounts: dict[str, Any] = {}
        exact: dict[str, Any] = {}
        for coordinate in coordinates:
            values = {key: getattr(cost, coordinate) for key, cost in parts.items()}
            amounts[coordinate] = {key: float(value) for key, value in values.items()}
            exact[coordinate] = {key: str(value) for key, value in values.items()}
        result: dict[str, Any] = {
            "dataset": self.name,
            "composition": self.composition,
            "relation": self.relation,
            "renewal": self.renewal,
            "renews": renewal_phrase(self.renewal),
            "note": self.note,
            "inputs": list(self.inputs),
            "created_at": timestamp(self.created_at),
            "period": {
                "number": self.periods,
                "start": timestamp(self.period.starts_at),
                "end": None if self.period.ends_at is None else timestamp(self.period.ends_at),
            },
            **amounts,
            "exact": exact,
            "all_periods": {
                "committed": amounts_json(self.committed_all_periods, self.composition)["float"],
                "periods": self.periods,
            },
            "open_runs": [run.to_json(self.composition) for run in self.open_runs],
        }
        if self.composition == "zcdp":
            result["delta"] = float(self.conversion_delta)
            result["epsilon_equivalent"] = {
                "delta": float(self.conversion_delta),
                "total": self.epsilon_equivalent(self.total),
                "committed": self.epsilon_equivalent(self.committed),
                "charged": self.epsilon_equivalent(self.committed + self.reserved),
                "all_periods_committed": self.epsilon_equivalent(self.committed_all_periods),
            }
        return result


def dataset_status(
    name: str,
    data: dict[str, Any],
    period: Period,
    committed: Cost,
    held: Cost,
    *,
    committed_all_periods: Cost | None = None,
    periods: int = 0,
    open_runs: tuple[RunRecord, ...] = (),
) -> DatasetStatus:
    """A dataset's status from its checked row (``Tables.dataset_row``) and its period."""
    return DatasetStatus(
        name=name,
        composition=data["composition"],
        relation=data["relation"],
        renewal=data["renewal"],
        note=data["note"],
        created_at=data["created_at"],
        period=period,
        conversion_delta=data["delta"],
        committed=committed,
        reserved=held,
        committed_all_periods=Cost() if committed_all_periods is None else committed_all_periods,
        periods=periods,
        open_runs=open_runs,
        inputs=tuple(data.get("inputs", ())),
    )
