"""Basic (sequential) composition: ε and δ add up (Dwork and Roth 2014, Theorem 3.16).

Privacy:
    If release ``i`` is (ε_i, δ_i)-DP under a relation, all of them together are
    (Σε_i, Σδ_i)-DP under that relation, whatever the order and adaptivity. Every kind of
    mechanism is composed this way here; the Gaussian mechanism is then an (ε, δ)-DP share and
    must carry its δ.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import ClassVar

from beam_dp.accounting.composition import Composition, CompositionRule, split_by_weight
from beam_dp.accounting.kinds import PrivacyKind
from beam_dp.accounting.shares import Allocation, BudgetShare, Cost

__all__ = ["BasicComposition"]


class BasicComposition(CompositionRule):
    """ε and δ add up; weights split the ε the explicit shares leave."""

    name: ClassVar[Composition] = "basic"

    def needs_delta(self, kind: PrivacyKind) -> bool:
        return kind in ("approximate", "gaussian")

    def compose(self, costs: Iterable[Cost], delta_z: float) -> tuple[Fraction, Fraction]:
        epsilon = Fraction(0)
        delta = Fraction(0)
        for cost in costs:
            epsilon += Fraction(cost.epsilon)
            delta += Fraction(cost.delta)
        return epsilon, delta

    def allocate_explicit(self, share: BudgetShare, delta_z: float) -> Allocation:
        epsilon = share.requested_epsilon
        assert epsilon is not None
        return _allocation(share, epsilon)

    def plan(self, shares: list[BudgetShare]) -> dict[str, Allocation]:
        explicit = [share for share in shares if share.weight is None]
        weighted = [share for share in shares if share.weight is not None]
        explicit_total = self.check_explicit_epsilon(explicit, "explicit shares")
        self.check_deltas(shares)
        allocations = {share.name: self.allocate_explicit(share, 0.0) for share in explicit}
        left = Fraction(self.epsilon) - explicit_total
        for share, epsilon in split_by_weight(weighted, left, "epsilon", explicit):
            allocations[share.name] = _allocation(share, epsilon)
        return allocations


def _allocation(share: BudgetShare, epsilon: float) -> Allocation:
    """A share's amounts under basic composition: ``epsilon`` over its rounds, its own δ."""
    per_round = float(Fraction(epsilon) / share.rounds)
    return Allocation(epsilon, per_round, share.requested_delta, None)
