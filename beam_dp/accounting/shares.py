"""The shares of a privacy budget: what was asked for, what was allocated, what it costs.

A :class:`BudgetShare` is created by :class:`~beam_dp.accounting.budget.PrivacyBudget` and
allocated by its composition rule (:mod:`beam_dp.accounting.composition`); an
:class:`Allocation` is its fixed amounts and a :class:`Cost` what a share or a recorded release
costs, the unit every rule composes. Amounts are compared with totals by :func:`exceeds`, with
the relative slack :data:`TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from beam_dp.accounting.kinds import PrivacyKind

__all__ = ["TOLERANCE", "Allocation", "BudgetShare", "Cost", "describe", "exceeds", "take_shares"]

# Amounts are compared with totals and shares allowing this relative slack. It absorbs float
# rounding (0.1 + 0.2 + 0.3 exceeds 0.6 as binary floats; a mechanism recomputing ρ from its
# per-round ε) and nothing of privacy substance. spent() reports what was recorded.
TOLERANCE = 1e-12


def exceeds(amount: Fraction, allowed: float) -> bool:
    """Whether ``amount`` is over ``allowed`` by more than the relative :data:`TOLERANCE`."""
    return amount > Fraction(allowed) * (1 + Fraction(TOLERANCE))


@dataclass(frozen=True)
class Allocation:
    """The amounts fixed for one share."""

    epsilon: float
    epsilon_per_round: float
    delta: float
    rho: float | None


@dataclass(frozen=True)
class Cost:
    """What one share or release costs, for composition."""

    kind: PrivacyKind
    epsilon: float
    delta: float
    rho: float | None


class BudgetShare:
    """One named part of a :class:`PrivacyBudget`, read-only.

    Created by :meth:`PrivacyBudget.request` (allocated by :meth:`PrivacyBudget.finalize`)
    or :meth:`PrivacyBudget.spend` (allocated at once). ``epsilon``, ``epsilon_per_round``,
    ``delta`` and ``rho`` raise :class:`RuntimeError` until the share is allocated.

    A share is spent once: the first private transform built with it takes it
    (:func:`take_shares`, :attr:`spent_by`), and building another one with it is refused.

    Privacy:
        ``epsilon`` is the total over ``rounds`` equal rounds; a mechanism that composes
        ``rounds`` selections (top-k by peeling, several quantiles) runs each at
        ``epsilon_per_round``. Under ``composition="zcdp"``, ``rho`` is the share's zCDP cost
        and ``epsilon`` the sum of the mechanisms' ε parameters, which may exceed the
        budget's total ε: the guarantee comes from composing ρ. For ``"gaussian"`` under
        zCDP, ``rho`` calibrates the noise (σ = Δ/√(2ρ/rounds) per round) and
        ``(epsilon, delta)`` is what this share alone guarantees at the budget's zCDP δ.
    """

    __slots__ = (
        "_allocation",
        "_delta",
        "_kind",
        "_mechanism",
        "_name",
        "_requested_epsilon",
        "_rounds",
        "_spent_by",
        "_weight",
    )

    def __init__(
        self,
        name: str,
        mechanism: str,
        kind: PrivacyKind,
        requested_epsilon: float | None,
        weight: float | None,
        delta: float,
        rounds: int,
    ) -> None:
        self._name = name
        self._mechanism = mechanism
        self._kind: PrivacyKind = kind
        self._requested_epsilon = requested_epsilon
        self._weight = weight
        self._delta = delta
        self._rounds = rounds
        self._allocation: Allocation | None = None
        self._spent_by: str | None = None

    @property
    def name(self) -> str:
        """The share's unique name; ledger entries refer to it."""
        return self._name

    @property
    def mechanism(self) -> str:
        """The mechanism name (from ``MECHANISMS``) this share pays for."""
        return self._mechanism

    @property
    def kind(self) -> PrivacyKind:
        """The mechanism's privacy kind, which decides how the share composes."""
        return self._kind

    @property
    def rounds(self) -> int:
        """How many composed selections the share covers (k for top-k by peeling)."""
        return self._rounds

    @property
    def weight(self) -> float | None:
        """The weight it was requested with, or None if it was requested by ε."""
        return self._weight

    @property
    def spent_by(self) -> str | None:
        """The transform that took this share (its label), or None while no transform has."""
        return self._spent_by

    @property
    def allocated(self) -> bool:
        """Whether ``epsilon`` and the other amounts are fixed (after finalize or spend)."""
        return self._allocation is not None

    def _allocated(self) -> Allocation:
        if self._allocation is None:
            raise RuntimeError(
                f"budget share {self._name!r} has no epsilon yet: call "
                "PrivacyBudget.finalize() after the last request(), before reading it"
            )
        return self._allocation

    @property
    def epsilon(self) -> float:
        """Total ε of the share over its rounds."""
        return self._allocated().epsilon

    @property
    def epsilon_per_round(self) -> float:
        """ε of each of the ``rounds`` selections."""
        return self._allocated().epsilon_per_round

    @property
    def delta(self) -> float:
        """δ of the share (0 for pure and exponential-mechanism shares)."""
        return self._allocated().delta

    @property
    def rho(self) -> float | None:
        """zCDP cost of the share when the budget uses zCDP, else None."""
        return self._allocated().rho

    @property
    def requested_epsilon(self) -> float | None:
        """The explicit ε it was requested with, or None if it was requested by weight."""
        return self._requested_epsilon

    @property
    def requested_delta(self) -> float:
        """The δ it was requested with."""
        return self._delta

    def _cost(self) -> Cost:
        allocation = self._allocated()
        return Cost(self._kind, allocation.epsilon, allocation.delta, allocation.rho)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON description (amounts are None until allocated)."""
        allocation = self._allocation
        return {
            "name": self._name,
            "mechanism": self._mechanism,
            "rounds": self._rounds,
            "weight": self._weight,
            "epsilon": None if allocation is None else allocation.epsilon,
            "epsilon_per_round": None if allocation is None else allocation.epsilon_per_round,
            "delta": None if allocation is None else allocation.delta,
            "rho": None if allocation is None else allocation.rho,
            "spent_by": self._spent_by,
        }

    def __repr__(self) -> str:
        if self._allocation is None:
            amount = (
                f"weight={self._weight!r}"
                if self._weight is not None
                else f"requested_epsilon={self._requested_epsilon!r}"
            )
        else:
            amount = f"epsilon={self._allocation.epsilon!r}, delta={self._allocation.delta!r}"
            if self._allocation.rho is not None:
                amount += f", rho={self._allocation.rho!r}"
        return (
            f"BudgetShare(name={self._name!r}, mechanism={self._mechanism!r}, "
            f"rounds={self._rounds}, {amount})"
        )


def take_shares(shares: Iterable[BudgetShare], by: str) -> None:
    """Mark ``shares`` as spent by the transform ``by``: all of them, or none.

    Called when a private transform is built (the only moment a Beam graph can be refused
    before data is read), so that one share pays for one release: a second transform built
    with a share already taken is refused, naming the share and the transform that took it.

    Raises:
        ValueError: for a share already taken (nothing is taken then), or not allocated.
    """
    chosen = list(shares)
    for share in chosen:
        if share._spent_by is not None:
            raise ValueError(
                f"budget share {share.name!r} is already spent by {share._spent_by}: a share "
                "pays for one transform; request one share per transform "
                "(PrivacyBudget.request or spend)"
            )
        share._allocated()  # a share without an epsilon cannot be spent
    for share in chosen:
        share._spent_by = by


def describe(shares: Iterable[BudgetShare], attribute: str) -> str:
    """``'a' (epsilon=0.5), 'b' (epsilon=1.0)``: the shares named in an error message."""
    parts = []
    for share in shares:
        value = share._requested_epsilon if attribute == "epsilon" else share._delta
        parts.append(f"{share.name!r} ({attribute}={value!r})")
    return ", ".join(parts)
