"""A privacy budget that is planned before any data is read, and a ledger of what was spent.

Two ways to use a :class:`PrivacyBudget`, never both on one budget:

- **Planner** (PipelineDP style): :meth:`~PrivacyBudget.request` every share up front, by
  explicit ε or by weight, then :meth:`~PrivacyBudget.finalize` once: it checks the whole
  plan against the total and fixes every share's ε (and ρ). Only then does the pipeline run.
- **Direct**: :meth:`~PrivacyBudget.spend` fixes one explicit share at a time and refuses,
  before anything runs, a share that does not fit in what is left.

After each release the pipeline calls :meth:`~PrivacyBudget.record` with the release's
:class:`~beam_dp.accounting.ledger.LedgerEntry`; :meth:`~PrivacyBudget.spent` composes the
ledger and :meth:`~PrivacyBudget.to_json` gives the ``budget`` object of ``release.json``.

Composition:

- ``"basic"``: ε and δ add up (sequential composition; seed 003's theorem).
- ``"zcdp"``: (ε, δ)-DP shares (partition selection) are composed by basic composition on
  top; everything else is composed in zCDP, where costs add as ρ, and the total ρ is
  converted to (ε, δ) once, at the δ left over, with the tight conversion of
  Canonne–Kamath–Steinke 2020 (:func:`~beam_dp.accounting.zcdp.zcdp_to_approx_dp`). An
  exponential-mechanism round at ε costs ε²/8; any other pure ε-DP round (permute-and-flip,
  Laplace) costs ε²/2; the Gaussian mechanism costs its own ρ. zCDP pays off when many
  exponential-mechanism selections are composed (at 100 selections, about 4.4× more ε per
  selection than basic composition for ε = 1, δ = 1e-6); for a few pure-DP releases basic
  composition is tighter.

Arithmetic: sums, weight splits and per-round amounts are exact quotients
(:class:`fractions.Fraction` on the floats given) rounded to the nearest float, and amounts
are compared with totals allowing a relative slack of :data:`TOLERANCE` (1e-12). The slack
absorbs float rounding (0.1 + 0.2 + 0.3 exceeds 0.6 as binary floats) and nothing of privacy
substance; :meth:`~PrivacyBudget.spent` reports what was recorded, and the ρ → (ε, δ)
conversion is always rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from beam_dp._validation import (
    check_positive_finite,
    check_positive_int,
)
from beam_dp.accounting._checks import check_delta, check_name
from beam_dp.accounting.kinds import ZCDP_RATE, PrivacyKind, privacy_kind
from beam_dp.accounting.ledger import LedgerEntry
from beam_dp.accounting.zcdp import (
    ZCDP_DELTA_HINT,
    approx_dp_to_zcdp,
    ceil_float,
    epsilon_per_round_for_rho,
    floor_float,
    rho_for_epsilon,
    zcdp_to_approx_dp,
)

Composition = Literal["basic", "zcdp"]
COMPOSITIONS: tuple[Composition, ...] = ("basic", "zcdp")

# Amounts are compared with totals and shares allowing this relative slack. It absorbs float
# rounding (0.1 + 0.2 + 0.3 exceeds 0.6 as binary floats; a mechanism recomputing ρ from its
# per-round ε) and nothing of privacy substance. spent() reports what was recorded.
TOLERANCE = 1e-12


def _exceeds(amount: Fraction, allowed: float) -> bool:
    return amount > Fraction(allowed) * (1 + Fraction(TOLERANCE))


@dataclass(frozen=True)
class _Allocation:
    epsilon: float
    epsilon_per_round: float
    delta: float
    rho: float | None


@dataclass(frozen=True)
class _Cost:
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
        self._allocation: _Allocation | None = None

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
    def allocated(self) -> bool:
        """Whether ``epsilon`` and the other amounts are fixed (after finalize or spend)."""
        return self._allocation is not None

    def _allocated(self) -> _Allocation:
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

    def _cost(self) -> _Cost:
        allocation = self._allocated()
        return _Cost(self._kind, allocation.epsilon, allocation.delta, allocation.rho)

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


def _describe(shares: Iterable[BudgetShare], attribute: str) -> str:
    parts = []
    for share in shares:
        value = share._requested_epsilon if attribute == "epsilon" else share._delta
        parts.append(f"{share.name!r} ({attribute}={value!r})")
    return ", ".join(parts)


class PrivacyBudget:
    """A total (ε, δ) split into named shares before a pipeline runs.

    Args:
        epsilon: Total ε, > 0 and finite.
        delta: Total δ in [0, 1); must be > 0 with ``composition="zcdp"``.
        composition: ``"basic"`` (ε and δ add) or ``"zcdp"`` (see the module docstring).

    Raises:
        ValueError: for a bad total or composition; ``TypeError`` for a non-number.

    Privacy:
        The budget bounds the composition of every release recorded against it, under the
        neighbouring relation the releases declare (:meth:`record` refuses a release whose
        relation differs from the earlier ones: totals under different relations do not
        add). With ``"basic"``, the releases together are (Σε, Σδ)-DP. With ``"zcdp"``, they
        are (Σε_a + ε(Σρ, δ_z), Σδ_a + δ_z)-DP, where the sums marked a run over (ε, δ)-DP
        shares, ρ over the others, and δ_z = δ − Σδ_a is the δ at which Σρ is converted.

    Example:
        >>> budget = PrivacyBudget(1.0, delta=1e-6, composition="zcdp")
        >>> top = budget.request("top_10", mechanism="exponential_top_k", rounds=10)
        >>> median = budget.request("median", mechanism="exponential", weight=0.5)
        >>> budget.finalize()
        >>> round(top.epsilon_per_round, 4)
        0.114
    """

    def __init__(
        self, epsilon: float, delta: float = 0.0, composition: Composition = "basic"
    ) -> None:
        check_positive_finite(epsilon, "epsilon")
        check_delta(delta)
        if composition not in COMPOSITIONS:
            raise ValueError(
                f"'composition' must be one of {list(COMPOSITIONS)}; received {composition!r}"
            )
        if composition == "zcdp" and float(delta) == 0.0:
            raise ValueError(f"'delta' must be > 0 with composition='zcdp': {ZCDP_DELTA_HINT}")
        self._epsilon = float(epsilon)
        self._delta = float(delta)
        self._composition: Composition = composition
        self._shares: dict[str, BudgetShare] = {}
        self._mode: Literal["planner", "direct"] | None = None
        self._finalized = False
        self._ledger: list[LedgerEntry] = []

    # ----------------------------------------------------------------------- properties

    @property
    def epsilon(self) -> float:
        """Total ε."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """Total δ."""
        return self._delta

    @property
    def composition(self) -> Composition:
        """``"basic"`` or ``"zcdp"``."""
        return self._composition

    @property
    def finalized(self) -> bool:
        """Whether :meth:`finalize` has run."""
        return self._finalized

    @property
    def shares(self) -> tuple[BudgetShare, ...]:
        """Every share, in request order."""
        return tuple(self._shares.values())

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every recorded release, in order."""
        return tuple(self._ledger)

    # -------------------------------------------------------------------- planning

    def request(
        self,
        name: str,
        *,
        mechanism: str,
        epsilon: float | None = None,
        weight: float | None = None,
        delta: float = 0.0,
        rounds: int = 1,
    ) -> BudgetShare:
        """Ask for a share; its amounts are fixed by :meth:`finalize`.

        Args:
            name: Unique name of the share (and of the releases recorded against it).
            mechanism: A name from ``MECHANISMS``.
            epsilon: Explicit total ε of the share, or None.
            weight: Weight in the split of what the explicit shares leave (of ε under
                ``"basic"``, of ρ under ``"zcdp"``). Defaults to 1 when ``epsilon`` is None.
            delta: δ of the share: 0 for pure and exponential-mechanism shares, > 0 for
                ``"partition_selection"`` and, under ``"basic"``, ``"gaussian"``.
            rounds: Number of composed selections the share covers (>= 1).

        Returns:
            The share, which reads its amounts after :meth:`finalize`.

        Raises:
            ValueError: for a bad or duplicate parameter, or one the mechanism cannot use.
            RuntimeError: after :meth:`finalize`, or on a budget used through :meth:`spend`.
        """
        if self._mode == "direct":
            raise RuntimeError(
                "this budget is used through spend(); request() and finalize() plan a "
                "whole budget up front and cannot be mixed with spend()"
            )
        if self._finalized:
            raise RuntimeError(
                f"cannot request {name!r}: finalize() was already called and fixed the plan"
            )
        share = self._new_share(name, mechanism, epsilon, weight, delta, rounds)
        self._mode = "planner"
        self._shares[share.name] = share
        return share

    def finalize(self) -> None:
        """Check the plan against the total and fix every share's amounts.

        Explicit shares keep their ε; weighted shares split what is left (ε under
        ``"basic"``; under ``"zcdp"``, the largest ρ whose conversion fits, minus what the
        explicit shares cost). Nothing can be requested afterwards.

        Raises:
            ValueError: naming the shares and totals if the explicit shares exceed the
                total ε, the deltas exceed the total δ, or nothing is left for the weighted
                shares.
            RuntimeError: if called twice, or on a budget used through :meth:`spend`.
        """
        if self._mode == "direct":
            raise RuntimeError("this budget is used through spend(); there is no plan to finalize")
        if self._finalized:
            raise RuntimeError("finalize() was already called on this budget")
        shares = list(self._shares.values())
        if self._composition == "basic":
            allocations = self._plan_basic(shares)
        else:
            allocations = self._plan_zcdp(shares)
        for share in shares:
            share._allocation = allocations[share.name]
        self._mode = "planner"
        self._finalized = True

    def spend(
        self,
        name: str,
        *,
        mechanism: str,
        epsilon: float,
        delta: float = 0.0,
        rounds: int = 1,
    ) -> BudgetShare:
        """Request and fix one explicit share at once (a budget without a plan).

        Args:
            name: Unique name of the share.
            mechanism: A name from ``MECHANISMS``.
            epsilon: Total ε of the share.
            delta: δ of the share (see :meth:`request`).
            rounds: Number of composed selections the share covers.

        Returns:
            The allocated share.

        Raises:
            ValueError: if the share, composed with every share spent before, would exceed
                the total; nothing is changed then. Also for bad parameters.
            RuntimeError: on a budget used through :meth:`request` / :meth:`finalize`.
        """
        if self._mode == "planner":
            raise RuntimeError(
                "this budget is planned with request() and finalize(); spend() cannot be "
                "mixed with a plan"
            )
        share = self._new_share(name, mechanism, epsilon, None, delta, rounds)
        shares = [*self._shares.values(), share]
        delta_z = self._zcdp_delta(shares)
        if (
            self._composition == "zcdp"
            and delta_z <= 0.0
            and any(existing.kind != "approximate" for existing in shares)
        ):
            raise ValueError(
                f"spending {name!r} would leave no delta for the zCDP conversion: the "
                f"(ε, δ)-DP shares would use all of delta={self._delta!r}"
            )
        allocation = self._allocate_explicit(share, delta_z)
        costs = [existing._cost() for existing in self._shares.values()]
        costs.append(_Cost(share.kind, allocation.epsilon, allocation.delta, allocation.rho))
        total_epsilon, total_delta = self._compose(costs, delta_z)
        if _exceeds(total_epsilon, self._epsilon) or _exceeds(total_delta, self._delta):
            left_epsilon, left_delta = self.remaining()
            raise ValueError(
                f"spending {name!r} (epsilon={epsilon!r}, delta={delta!r}, rounds={rounds}) "
                f"would bring the budget to epsilon={float(total_epsilon)!r}, "
                f"delta={float(total_delta)!r} under composition={self._composition!r}, over the "
                f"total epsilon={self._epsilon!r}, delta={self._delta!r}; remaining "
                f"epsilon={left_epsilon!r}, delta={left_delta!r}"
            )
        share._allocation = allocation
        self._mode = "direct"
        self._shares[share.name] = share
        return share

    # ------------------------------------------------------------------- recording

    def record(self, entry: LedgerEntry) -> None:
        """Append a release to the ledger after checking it against its share.

        Several entries may be recorded against one share (e.g. one per round); together
        they may spend at most the share's ε and δ, or under zCDP accounting its ρ (with a
        relative slack of :data:`TOLERANCE` for float rounding).

        Raises:
            ValueError: if no allocated share has the entry's name, the mechanism differs
                from the share's, the relation from earlier entries',
                ``rho`` is missing under zCDP accounting (or present without it), ``rho`` is
                less than the entry's ε costs at its mechanism's rate (ε²/8 per round only for
                the exponential mechanism, ε²/2 for any other pure ε-DP mechanism), or the
                share's amounts would be exceeded.
            RuntimeError: on a planned budget before :meth:`finalize`.
        """
        if not isinstance(entry, LedgerEntry):
            raise TypeError(f"'entry' must be a LedgerEntry; received {type(entry).__name__}")
        if self._mode == "planner" and not self._finalized:
            raise RuntimeError("call finalize() before recording releases")
        share = self._shares.get(entry.name)
        if share is None:
            raise ValueError(
                f"ledger entry {entry.name!r} matches no share; known shares: {list(self._shares)}"
            )
        if entry.mechanism != share.mechanism:
            raise ValueError(
                f"ledger entry {entry.name!r} used mechanism {entry.mechanism!r} but its share "
                f"was for {share.mechanism!r}"
            )
        zcdp_share = share.rho is not None
        if zcdp_share and entry.rho is None:
            raise ValueError(
                f"ledger entry {entry.name!r} must carry 'rho': its share is accounted by "
                f"zCDP (share rho={share.rho!r})"
            )
        if not zcdp_share and entry.rho is not None:
            raise ValueError(
                f"ledger entry {entry.name!r} carries rho={entry.rho!r} but its share is not "
                "accounted by zCDP; leave 'rho' as None"
            )
        if entry.rho is not None and share.kind in ZCDP_RATE:
            # The least ρ this ε can cost: split over as many rounds as the share has.
            least = ZCDP_RATE[share.kind] * Fraction(entry.epsilon) ** 2 / share.rounds
            if Fraction(entry.rho) < least * (1 - Fraction(TOLERANCE)):
                raise ValueError(
                    f"ledger entry {entry.name!r} claims rho={entry.rho!r}, but mechanism "
                    f"{share.mechanism!r} ({share.kind.replace('_', ' ')}) at "
                    f"epsilon={entry.epsilon!r} over at most {share.rounds} round(s) costs at "
                    f"least rho={float(least)!r} (ε² × {ZCDP_RATE[share.kind]} per round)"
                )
        if self._ledger and entry.neighbouring != self._ledger[0].neighbouring:
            raise ValueError(
                f"ledger entry {entry.name!r} is private under neighbouring="
                f"{entry.neighbouring!r}, but earlier releases of this budget used "
                f"{self._ledger[0].neighbouring!r}; one budget composes one relation"
            )
        earlier = [recorded for recorded in self._ledger if recorded.name == entry.name]
        # A zCDP share's cost is its ρ (the entries' ε and δ need not add up: a Gaussian's
        # per-round (ε, δ) is a conversion of its per-round ρ); other shares cost (ε, δ).
        amounts = (
            [("rho", share.rho)]
            if share.rho is not None
            else [("epsilon", share.epsilon), ("delta", share.delta)]
        )
        for attribute, allowed in amounts:
            used = sum(
                (Fraction(getattr(recorded, attribute)) for recorded in [*earlier, entry]),
                Fraction(0),
            )
            if _exceeds(used, allowed):
                raise ValueError(
                    f"ledger entry {entry.name!r} brings the share's {attribute} to "
                    f"{float(used)!r}, more than the share's {attribute}={allowed!r}"
                )
        self._ledger.append(entry)

    def spent(self) -> tuple[float, float]:
        """(ε, δ) of the recorded releases, composed (sums exact, then rounded to nearest)."""
        costs = [
            _Cost(privacy_kind(entry.mechanism), entry.epsilon, entry.delta, entry.rho)
            for entry in self._ledger
        ]
        epsilon, delta = self._compose(costs, self._zcdp_delta(self._shares.values()))
        return float(epsilon), float(delta)

    def remaining(self) -> tuple[float, float]:
        """(ε, δ) not yet committed to a share: the total minus the composed allocations.

        Under ``"zcdp"`` this is the slack at the current split: once any zCDP share is
        allocated, the δ left over is used by the conversion, so remaining δ is 0 (a later
        (ε, δ) share passed to :meth:`spend` moves δ out of the conversion and is checked
        by recomposing everything).

        Raises:
            RuntimeError: on a planned budget before :meth:`finalize`.
        """
        if self._mode == "planner" and not self._finalized:
            raise RuntimeError("remaining() is known after finalize()")
        costs = [share._cost() for share in self._shares.values()]
        used_epsilon, used_delta = self._compose(costs, self._zcdp_delta(self._shares.values()))
        return (
            max(0.0, floor_float(Fraction(self._epsilon) - used_epsilon)),
            max(0.0, floor_float(Fraction(self._delta) - used_delta)),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``budget`` object of ``release.json``, in plain JSON types.

        Keys: ``epsilon_total``, ``epsilon_spent``, ``delta_total``, ``delta_spent``,
        ``composition``, and ``shares`` (each share's amounts and what its recorded
        releases spent); under ``"zcdp"`` also ``rho_spent`` and ``zcdp_delta``.
        """
        epsilon_spent, delta_spent = self.spent()
        shares = []
        for share in self._shares.values():
            described = share.to_json()
            entries = [entry for entry in self._ledger if entry.name == share.name]
            described["epsilon_spent"] = math.fsum(entry.epsilon for entry in entries)
            described["delta_spent"] = math.fsum(entry.delta for entry in entries)
            if self._composition == "zcdp":
                described["rho_spent"] = math.fsum(entry.rho or 0.0 for entry in entries)
            shares.append(described)
        result: dict[str, Any] = {
            "epsilon_total": self._epsilon,
            "epsilon_spent": epsilon_spent,
            "delta_total": self._delta,
            "delta_spent": delta_spent,
            "composition": self._composition,
        }
        if self._composition == "zcdp":
            result["rho_spent"] = math.fsum(entry.rho or 0.0 for entry in self._ledger)
            result["zcdp_delta"] = self._zcdp_delta(self._shares.values())
        result["shares"] = shares
        return result

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self._epsilon!r}, delta={self._delta!r}, "
            f"composition={self._composition!r}, shares={list(self._shares)})"
        )

    # -------------------------------------------------------------------- internals

    def _new_share(
        self,
        name: str,
        mechanism: str,
        epsilon: float | None,
        weight: float | None,
        delta: float,
        rounds: int,
    ) -> BudgetShare:
        check_name(name, "name")
        if name in self._shares:
            raise ValueError(f"a share named {name!r} was already requested; names must be unique")
        kind = privacy_kind(mechanism)
        if epsilon is not None and weight is not None:
            raise ValueError(f"share {name!r}: give either 'epsilon' or 'weight', not both")
        if epsilon is not None:
            check_positive_finite(epsilon, "epsilon")
        elif weight is not None:
            check_positive_finite(weight, "weight")
        else:
            weight = 1.0
        check_delta(delta)
        check_positive_int(rounds, "rounds")
        needs_delta = kind == "approximate" or (kind == "gaussian" and self._composition == "basic")
        if needs_delta and float(delta) == 0.0:
            raise ValueError(
                f"'delta' must be > 0 for mechanism {mechanism!r}, an (ε, δ)-DP mechanism "
                f"under composition={self._composition!r}; received {delta!r}"
            )
        if not needs_delta and float(delta) != 0.0:
            reason = (
                "its δ is the budget's zCDP conversion δ"
                if kind == "gaussian"
                else "it is pure ε-DP"
            )
            raise ValueError(
                f"'delta' must be 0 for mechanism {mechanism!r} under "
                f"composition={self._composition!r} ({reason}); received {delta!r}"
            )
        if kind == "approximate" and self._composition == "zcdp" and epsilon is None:
            raise ValueError(
                f"share {name!r}: give 'epsilon' for mechanism {mechanism!r} under "
                "composition='zcdp': (ε, δ)-DP shares are composed on top by basic "
                "composition, and weights split only the zCDP part"
            )
        if float(delta) > self._delta:
            raise ValueError(
                f"share {name!r}: 'delta'={delta!r} exceeds the budget's delta={self._delta!r}"
            )
        return BudgetShare(
            name=name,
            mechanism=mechanism,
            kind=kind,
            requested_epsilon=None if epsilon is None else float(epsilon),
            weight=None if weight is None else float(weight),
            delta=float(delta),
            rounds=int(rounds),
        )

    def _zcdp_delta(self, shares: Iterable[BudgetShare]) -> float:
        """δ left for the zCDP conversion after the (ε, δ)-DP shares (0.0 under basic)."""
        if self._composition == "basic":
            return 0.0
        approximate = sum(
            (Fraction(share._delta) for share in shares if share.kind == "approximate"),
            Fraction(0),
        )
        return max(0.0, floor_float(Fraction(self._delta) - approximate))

    def _compose(self, costs: Iterable[_Cost], delta_z: float) -> tuple[Fraction, Fraction]:
        """Compose costs into (ε, δ), exactly but for the zCDP conversion (rounded up)."""
        epsilon = Fraction(0)
        delta = Fraction(0)
        rho = Fraction(0)
        for cost in costs:
            if self._composition == "basic" or cost.kind == "approximate":
                epsilon += Fraction(cost.epsilon)
                delta += Fraction(cost.delta)
            else:
                assert cost.rho is not None
                rho += Fraction(cost.rho)
        if rho > 0:
            epsilon += Fraction(zcdp_to_approx_dp(ceil_float(rho), delta_z))
            delta += Fraction(delta_z)
        return epsilon, delta

    def _allocate_explicit(self, share: BudgetShare, delta_z: float) -> _Allocation:
        """Amounts of a share requested by explicit ε (δ_z is used by gaussian under zCDP)."""
        epsilon = share._requested_epsilon
        assert epsilon is not None
        per_round = float(Fraction(epsilon) / share.rounds)
        if self._composition == "basic" or share.kind == "approximate":
            return _Allocation(epsilon, per_round, share._delta, None)
        if share.kind == "gaussian":
            rho = approx_dp_to_zcdp(epsilon, delta_z)
            return self._allocate_rho(share, rho, delta_z)
        rho = rho_for_epsilon(epsilon, ZCDP_RATE[share.kind], share.rounds)
        return _Allocation(epsilon, per_round, 0.0, rho)

    def _allocate_rho(self, share: BudgetShare, rho: float, delta_z: float) -> _Allocation:
        """Amounts of a zCDP share that was given ``rho``."""
        if share.kind == "gaussian":
            per_round_rho = float(Fraction(rho) / share.rounds)
            per_round = zcdp_to_approx_dp(per_round_rho, delta_z)
            if per_round == 0.0:
                raise ValueError(
                    f"share {share.name!r}: rho={per_round_rho!r} per round is below what "
                    f"delta={delta_z!r} already covers ((0, δ)-DP), so its noise would swamp "
                    "any signal; give it a larger share or fewer rounds"
                )
            return _Allocation(zcdp_to_approx_dp(rho, delta_z), per_round, delta_z, rho)
        per_round = epsilon_per_round_for_rho(rho, ZCDP_RATE[share.kind], share.rounds)
        return _Allocation(float(Fraction(per_round) * share.rounds), per_round, 0.0, rho)

    def _check_deltas(self, shares: list[BudgetShare]) -> None:
        with_delta = [share for share in shares if share._delta > 0]
        total = sum((Fraction(share._delta) for share in with_delta), Fraction(0))
        if _exceeds(total, self._delta):
            raise ValueError(
                f"the shares' deltas add up to {float(total)!r}, more than the budget's "
                f"delta={self._delta!r}: {_describe(with_delta, 'delta')}"
            )

    def _plan_basic(self, shares: list[BudgetShare]) -> dict[str, _Allocation]:
        explicit = [share for share in shares if share._weight is None]
        weighted = [share for share in shares if share._weight is not None]
        explicit_total = sum(
            (Fraction(share._requested_epsilon or 0.0) for share in explicit), Fraction(0)
        )
        if _exceeds(explicit_total, self._epsilon):
            raise ValueError(
                f"the explicit shares ask for epsilon={float(explicit_total)!r} in total, more "
                f"than the budget's epsilon={self._epsilon!r}: {_describe(explicit, 'epsilon')}"
            )
        self._check_deltas(shares)
        allocations = {share.name: self._allocate_explicit(share, 0.0) for share in explicit}
        left = Fraction(self._epsilon) - explicit_total
        for share, epsilon in self._split(weighted, left, "epsilon", explicit):
            per_round = float(Fraction(epsilon) / share.rounds)
            allocations[share.name] = _Allocation(epsilon, per_round, share._delta, None)
        return allocations

    def _plan_zcdp(self, shares: list[BudgetShare]) -> dict[str, _Allocation]:
        approximate = [share for share in shares if share.kind == "approximate"]
        zcdp_shares = [share for share in shares if share.kind != "approximate"]
        approximate_epsilon = sum(
            (Fraction(share._requested_epsilon or 0.0) for share in approximate), Fraction(0)
        )
        if _exceeds(approximate_epsilon, self._epsilon):
            raise ValueError(
                f"the (ε, δ)-DP shares ask for epsilon={float(approximate_epsilon)!r} in "
                f"total, more than the budget's epsilon={self._epsilon!r}: "
                f"{_describe(approximate, 'epsilon')}"
            )
        self._check_deltas(shares)
        allocations = {share.name: self._allocate_explicit(share, 0.0) for share in approximate}
        if not zcdp_shares:
            return allocations
        delta_z = self._zcdp_delta(shares)
        epsilon_z = floor_float(Fraction(self._epsilon) - approximate_epsilon)
        if delta_z <= 0.0 or epsilon_z <= 0.0:
            raise ValueError(
                f"the (ε, δ)-DP shares {_describe(approximate, 'epsilon')} use the whole "
                f"budget (epsilon={self._epsilon!r}, delta={self._delta!r}); the zCDP shares "
                f"{[share.name for share in zcdp_shares]} need epsilon > 0 and delta > 0 left "
                "for the zCDP conversion"
            )
        rho_total = approx_dp_to_zcdp(epsilon_z, delta_z)
        explicit = [share for share in zcdp_shares if share._weight is None]
        weighted = [share for share in zcdp_shares if share._weight is not None]
        for share in explicit:
            allocations[share.name] = self._allocate_explicit(share, delta_z)
        explicit_rho = sum(
            (Fraction(allocations[share.name].rho or 0.0) for share in explicit), Fraction(0)
        )
        if _exceeds(explicit_rho, rho_total):
            costs = ", ".join(
                f"{share.name!r} (epsilon={share._requested_epsilon!r}, "
                f"rho={allocations[share.name].rho!r})"
                for share in explicit
            )
            raise ValueError(
                f"the explicit zCDP shares cost rho={float(explicit_rho)!r} in total, more "
                f"than rho={rho_total!r}, the most that converts to epsilon={epsilon_z!r} at "
                f"delta={delta_z!r} (budget epsilon={self._epsilon!r}, "
                f"delta={self._delta!r}): {costs}"
            )
        left = Fraction(rho_total) - explicit_rho
        for share, rho in self._split(weighted, left, "rho", explicit):
            allocations[share.name] = self._allocate_rho(share, rho, delta_z)
        return allocations

    def _split(
        self,
        weighted: list[BudgetShare],
        left: Fraction,
        unit: str,
        explicit: list[BudgetShare],
    ) -> list[tuple[BudgetShare, float]]:
        """Split ``left`` by weight, each part the exact quotient rounded to nearest."""
        if not weighted:
            return []
        if left <= 0:
            raise ValueError(
                f"the explicit shares {[share.name for share in explicit]} use the whole "
                f"budget; nothing is left for the weighted shares "
                f"{[share.name for share in weighted]}"
            )
        total_weight = sum((Fraction(share._weight or 0.0) for share in weighted), Fraction(0))
        parts = []
        for share in weighted:
            part = float(left * Fraction(share._weight or 0.0) / total_weight)
            if part <= 0.0:
                raise ValueError(
                    f"share {share.name!r} gets {unit} 0 after rounding: its weight "
                    f"{share._weight!r} is too small next to the others"
                )
            parts.append((share, part))
        return parts
