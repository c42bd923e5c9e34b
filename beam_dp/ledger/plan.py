"""What a run asks of a dataset (:class:`Plan`) and who is asking (:class:`RunInfo`).

A plan is built from a job's :class:`~beam_dp.accounting.PrivacyBudget` once the budget is
final (:meth:`Plan.from_budget`), before any data is read: its cost is the composed amount
of every share the job may spend.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from beam_dp._validation import check_relation
from beam_dp.accounting import COMPOSITIONS, Composition, LedgerEntry, PrivacyBudget
from beam_dp.accounting.kinds import privacy_kind
from beam_dp.ledger._amounts import exact_amount, show_amount
from beam_dp.ledger.errors import LedgerError

__all__ = ["Cost", "Plan", "RunInfo", "check_composition", "config_digest", "cost_of_entries"]


def check_composition(value: object, name: str = "composition") -> Composition:
    """Return ``value`` if it is ``"basic"`` or ``"zcdp"``, else raise ValueError."""
    for composition in COMPOSITIONS:
        if value == composition:
            return composition
    raise ValueError(f"'{name}' must be one of {list(COMPOSITIONS)}; received {value!r}")


@dataclass(frozen=True)
class Cost:
    """Exact amounts charged to a dataset: (ε, δ) under basic composition, ρ under zCDP.

    The coordinates a dataset does not compose stay 0.
    """

    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.epsilon - other.epsilon, self.delta - other.delta, self.rho - other.rho)

    def covers(self, other: Cost) -> bool:
        """Whether every coordinate of ``other`` is at most this one's (exact comparison)."""
        return other.epsilon <= self.epsilon and other.delta <= self.delta and other.rho <= self.rho

    def at_least(self, other: Cost) -> Cost:
        """The coordinate-wise maximum of this cost and ``other``."""
        return Cost(
            max(self.epsilon, other.epsilon), max(self.delta, other.delta), max(self.rho, other.rho)
        )

    def clamp(self) -> Cost:
        """Negative coordinates (an over-spent dataset's remaining) set to 0."""
        zero = Fraction(0)
        return Cost(max(self.epsilon, zero), max(self.delta, zero), max(self.rho, zero))

    def describe(self, composition: Composition) -> str:
        """``"epsilon=0.3, delta=0"`` (basic) or ``"rho=0.01"`` (zCDP), exact where short."""
        if composition == "zcdp":
            return f"rho={show_amount(self.rho)}"
        return f"epsilon={show_amount(self.epsilon)}, delta={show_amount(self.delta)}"


@dataclass(frozen=True)
class Plan:
    """A run's whole planned spend, reserved in one transaction before any data is read.

    Attributes:
        composition: ``"basic"`` (ε and δ add) or ``"zcdp"`` (ρ adds). Must match the
            dataset's.
        relation: The neighbouring relation of every release (must match the dataset's).
        cost: The exact amounts to reserve.
        statistics: Names of the shares (statistics) the run will release, for the record.

    Privacy:
        Only public parameters: no data value, no data-dependent count.
    """

    composition: Composition
    relation: str
    cost: Cost
    statistics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_composition(self.composition)
        check_relation(self.relation)
        positive = self.cost.rho > 0 if self.composition == "zcdp" else self.cost.epsilon > 0
        if not positive:
            unit = "rho" if self.composition == "zcdp" else "epsilon"
            raise ValueError(f"a plan must spend {unit} > 0; received {self.cost!r}")
        if self.composition == "zcdp" and (self.cost.epsilon or self.cost.delta):
            raise ValueError("a zCDP plan spends rho only; its epsilon and delta must be 0")
        if self.composition == "basic" and self.cost.rho:
            raise ValueError("a basic-composition plan spends epsilon and delta; rho must be 0")
        for name in self.statistics:
            if not isinstance(name, str) or not name:
                raise ValueError("'statistics' must be non-empty names")

    @classmethod
    def basic(
        cls,
        epsilon: object,
        delta: object = 0,
        *,
        relation: str = "add_remove",
        statistics: Sequence[str] = (),
    ) -> Plan:
        """A plan that spends (ε, δ) under basic composition."""
        cost = Cost(
            epsilon=exact_amount(epsilon, "epsilon", allow_zero=False),
            delta=_delta(delta),
        )
        return cls("basic", relation, cost, tuple(statistics))

    @classmethod
    def zcdp(
        cls, rho: object, *, relation: str = "add_remove", statistics: Sequence[str] = ()
    ) -> Plan:
        """A plan that spends ρ under zCDP composition."""
        cost = Cost(rho=exact_amount(rho, "rho", allow_zero=False))
        return cls("zcdp", relation, cost, tuple(statistics))

    @classmethod
    def from_budget(cls, budget: PrivacyBudget, *, relation: str = "add_remove") -> Plan:
        """The composed spend of every share of a final budget.

        Under ``"basic"`` the cost is the exact sum of the shares' ε and δ; under ``"zcdp"``
        the exact sum of their ρ.

        Raises:
            LedgerError: if the budget has no shares, is not final (call ``finalize()``
                first), or, under zCDP, has an (ε, δ)-DP share (partition selection), which
                has no zCDP bound and cannot be charged in ρ.
        """
        shares = budget.shares
        if not shares:
            raise LedgerError("the budget has no shares: there is nothing to reserve")
        if not all(share.allocated for share in shares):
            raise LedgerError("finalize() the budget before reserving it in a ledger")
        names = tuple(share.name for share in shares)
        if budget.composition == "basic":
            epsilon = sum((exact_amount(s.epsilon, "epsilon") for s in shares), Fraction(0))
            delta = sum((exact_amount(s.delta, "delta") for s in shares), Fraction(0))
            return cls("basic", relation, Cost(epsilon=epsilon, delta=delta), names)
        approximate = [share.name for share in shares if share.kind == "approximate"]
        if approximate:
            raise LedgerError(
                f"shares {approximate} use an (epsilon, delta)-DP mechanism with no zCDP bound "
                "and cannot be charged to a zCDP dataset in rho; give them public candidates "
                "or use a dataset with basic composition"
            )
        rho = sum((exact_amount(share.rho, "rho") for share in shares), Fraction(0))
        return cls("zcdp", relation, Cost(rho=rho), names)


def _delta(value: object) -> Fraction:
    delta = exact_amount(value, "delta")
    if not delta < 1:
        raise ValueError(f"'delta' must be in [0, 1); received {value!r}")
    return delta


def cost_of_entries(entries: Iterable[LedgerEntry], composition: Composition) -> Cost:
    """What recorded releases spent, composed as a dataset of ``composition`` composes.

    Under ``"zcdp"`` an entry without ρ is charged as pure ε-DP (ε²/2, Bun–Steinke 2016), an
    upper bound for any ε-DP release.
    """
    total = Cost()
    for entry in entries:
        if composition == "basic":
            total += Cost(epsilon=exact_amount(entry.epsilon, "epsilon"), delta=_delta(entry.delta))
        elif entry.rho is not None:
            total += Cost(rho=exact_amount(entry.rho, "rho"))
        else:
            privacy_kind(entry.mechanism)  # a known mechanism
            total += Cost(rho=exact_amount(entry.epsilon, "epsilon") ** 2 / 2)
    return total


@dataclass(frozen=True)
class RunInfo:
    """Who reserves: public facts about the run, stored with its reservation.

    Attributes:
        job: The job's name (``"pipelines.release"``).
        config_digest: A digest of the job's config (``"sha256:..."``), or ``""``.
        host: The machine the run started on.
        pid: Its process id (``show`` reports a reservation whose process is gone from this
            host as abandoned).
        details: Further public facts (flags), shown in the history.
        inputs: Every file the run reads (names are public). The reservation checks them
            against what the datasets protect (:mod:`beam_dp.ledger.inputs`): required.
        output_location: Where the run will write its outputs, recorded at reservation so that
            a run that dies after writing is found by its location.
    """

    job: str
    config_digest: str = ""
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)
    inputs: tuple[str, ...] = ()
    output_location: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise ValueError("'job' must be a non-empty string")
        if isinstance(self.inputs, str) or not all(isinstance(f, str) for f in self.inputs):
            raise ValueError("'inputs' must be a sequence of file names")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if self.output_location is not None and not isinstance(self.output_location, str):
            raise ValueError("'output_location' must be a path or URL, or None")
        if isinstance(self.pid, bool) or not isinstance(self.pid, int) or self.pid < 0:
            raise ValueError(f"'pid' must be an integer >= 0; received {self.pid!r}")


def config_digest(path: str | Path) -> str:
    """``"sha256:<hex>"`` of a config file's bytes (public: it identifies the run's config)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        raise LedgerError(f"cannot read the config {path} to digest it") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()
