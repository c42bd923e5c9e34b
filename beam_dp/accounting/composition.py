"""How a budget composes its shares: one small interface, one rule per kind of composition.

A :class:`~beam_dp.accounting.budget.PrivacyBudget` is the planner: it takes requests, checks
the ledger and answers questions. What the shares *cost together* is its
:class:`CompositionRule`, chosen once from the budget's ``composition``:

- ``"basic"``: :class:`~beam_dp.accounting.composition_basic.BasicComposition`, ε and δ add up.
- ``"zcdp"``: :class:`~beam_dp.accounting.composition_zcdp.ZcdpComposition`, ρ adds up and is
  converted to (ε, δ) once; (ε, δ)-DP shares are composed on top by basic composition.

A rule answers five questions (the interface): whether a mechanism's share needs a δ
(:meth:`~CompositionRule.needs_delta`), at which δ a total ρ is converted
(:meth:`~CompositionRule.conversion_delta`), what a list of costs composes to
(:meth:`~CompositionRule.compose`), the amounts of a share given by explicit ε
(:meth:`~CompositionRule.allocate_explicit`) and the amounts of every share of a finished plan
(:meth:`~CompositionRule.plan`). The checks both rules' plans make are methods of the base;
:func:`split_by_weight` is the split of what is left.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar, Literal

from beam_dp.accounting.kinds import PrivacyKind
from beam_dp.accounting.shares import Allocation, BudgetShare, Cost, describe, exceeds

__all__ = ["COMPOSITIONS", "Composition", "CompositionRule", "split_by_weight"]

Composition = Literal["basic", "zcdp"]
COMPOSITIONS: tuple[Composition, ...] = ("basic", "zcdp")


class CompositionRule(ABC):
    """The composition of one budget's shares (totals ``epsilon`` and ``delta``)."""

    name: ClassVar[Composition]

    def __init__(self, epsilon: float, delta: float) -> None:
        self.epsilon = epsilon
        self.delta = delta

    @abstractmethod
    def needs_delta(self, kind: PrivacyKind) -> bool:
        """Whether a share of this kind must carry a δ > 0 (else it must carry δ = 0)."""

    def check_request(self, name: str, mechanism: str, kind: PrivacyKind, explicit: bool) -> None:
        """Refuse a share this rule cannot compose (``explicit``: requested by ε)."""
        return None  # every share composes unless a rule says otherwise

    def conversion_delta(self, shares: Iterable[BudgetShare]) -> float:
        """δ at which a total ρ is converted (0.0 when nothing is composed in zCDP)."""
        return 0.0

    def check_spend(self, name: str, shares: Sequence[BudgetShare], delta_z: float) -> None:
        """Refuse, before anything is allocated, a spend that leaves the rule nothing to use."""
        return None  # nothing to refuse unless a rule says otherwise

    @abstractmethod
    def compose(self, costs: Iterable[Cost], delta_z: float) -> tuple[Fraction, Fraction]:
        """The (ε, δ) of ``costs`` together, exact but for a conversion (rounded up)."""

    @abstractmethod
    def allocate_explicit(self, share: BudgetShare, delta_z: float) -> Allocation:
        """The amounts of a share requested by explicit ε."""

    @abstractmethod
    def plan(self, shares: list[BudgetShare]) -> dict[str, Allocation]:
        """The amounts of every share of a finished plan (ValueError if it does not fit)."""

    def check_explicit_epsilon(self, shares: list[BudgetShare], what: str) -> Fraction:
        """The exact sum of the shares' explicit ε, refused if it exceeds the total ε."""
        asked = sum((Fraction(share.requested_epsilon or 0.0) for share in shares), Fraction(0))
        if exceeds(asked, self.epsilon):
            raise ValueError(
                f"the {what} ask for epsilon={float(asked)!r} in total, more than the budget's "
                f"epsilon={self.epsilon!r}: {describe(shares, 'epsilon')}"
            )
        return asked

    def check_deltas(self, shares: list[BudgetShare]) -> None:
        """Refuse shares whose δ add up to more than the total δ."""
        with_delta = [share for share in shares if share.requested_delta > 0]
        asked = sum((Fraction(share.requested_delta) for share in with_delta), Fraction(0))
        if exceeds(asked, self.delta):
            raise ValueError(
                f"the shares' deltas add up to {float(asked)!r}, more than the budget's "
                f"delta={self.delta!r}: {describe(with_delta, 'delta')}"
            )


def split_by_weight(
    weighted: list[BudgetShare], left: Fraction, unit: str, explicit: list[BudgetShare]
) -> list[tuple[BudgetShare, float]]:
    """Split ``left`` (of ε or ρ) by weight, each part the exact quotient rounded to nearest."""
    if not weighted:
        return []
    if left <= 0:
        raise ValueError(
            f"the explicit shares {[share.name for share in explicit]} use the whole "
            f"budget; nothing is left for the weighted shares "
            f"{[share.name for share in weighted]}"
        )
    total_weight = sum((Fraction(share.weight or 0.0) for share in weighted), Fraction(0))
    parts = []
    for share in weighted:
        part = float(left * Fraction(share.weight or 0.0) / total_weight)
        if part <= 0.0:
            raise ValueError(
                f"share {share.name!r} gets {unit} 0 after rounding: its weight "
                f"{share.weight!r} is too small next to the others"
            )
        parts.append((share, part))
    return parts
