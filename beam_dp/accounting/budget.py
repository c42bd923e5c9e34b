"""A privacy budget that is planned before any data is read, and a ledger of what was spent.

Two ways to use a :class:`PrivacyBudget`, never both on one budget:

- **Planner** (PipelineDP style): :meth:`~PrivacyBudget.request` every share up front, by
  explicit ε or by weight, then :meth:`~PrivacyBudget.finalize` once: it checks the whole
  plan against the total and fixes every share's ε (and ρ). Only then does the pipeline run.
- **Direct**: :meth:`~PrivacyBudget.spend` fixes one explicit share at a time and refuses,
  before anything runs, a share that does not fit in what is left.

After each release the pipeline calls :meth:`~PrivacyBudget.record` with the release's
:class:`~beam_dp.accounting.ledger.LedgerEntry`; :meth:`~PrivacyBudget.spent` composes what
is spent and :meth:`~PrivacyBudget.to_json` gives the ``budget`` object of ``release.json``.

**A share is spent once, when a transform is built.** Giving one share to three transforms
would release three times at its ε while the budget counted it once. How others make a budget
impossible to reuse: OpenDP's ``Context`` (a compositor over a list of per-query losses)
deducts a query's loss when the query is *released*: the interactive compositor answers each
query with the next loss of its list and refuses queries past the end; Tumult Analytics'
``Session`` deducts from its accountant when a query is *evaluated* (``evaluate``), and a
session split by ``partition_and_create`` spends the parent's budget at the split. Both
charge at the moment the data is touched, which in their interactive model is the moment
the query is submitted. A Beam graph is built first and runs later, on workers the library
does not control; once ``pipeline.run()`` starts, nothing can refuse one of its releases.
So the last moment a release can be refused before any data is read is the construction of
its transform, and that is where this library charges, in OpenDP's compositor model (a
fixed list of shares, planned up front, each consumed once, in any order): building a
private transform with a :class:`BudgetShare` takes it
(:func:`~beam_dp.accounting.shares.take_shares`; the transform's keyword checks run first,
so a transform refused for a bad parameter takes nothing), a second transform with the same
share is refused naming the share and its taker, and a built transform applied to a second
input is refused as well. :meth:`~PrivacyBudget.spent` counts a share taken by a transform in
full (its releases may spend all of it as soon as the pipeline runs, and nothing after
construction can stop them), and a share no transform took by the releases recorded against
it. A job builds each transform once more without shares (with its own ε, to check its
parameters before the budget is planned); that build takes nothing.

Composition is the budget's :class:`~beam_dp.accounting.composition.CompositionRule`, one
per kind, each with its privacy argument:

- ``"basic"``: ε and δ add up (sequential composition, Dwork and Roth 2014, Theorem 3.16;
  :mod:`beam_dp.accounting.composition_basic`).
- ``"zcdp"``: (ε, δ)-DP shares (partition selection) are composed by basic composition on
  top; everything else is composed in zCDP, where costs add as ρ, and the total ρ is
  converted to (ε, δ) once, at the δ left over (:mod:`beam_dp.accounting.composition_zcdp`).

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
from fractions import Fraction
from typing import Any, Literal

from beam_dp._rational import float_at_most
from beam_dp._validation import check_positive_finite, check_positive_int
from beam_dp.accounting._checks import check_delta, check_name
from beam_dp.accounting.composition import COMPOSITIONS, Composition, CompositionRule
from beam_dp.accounting.composition_basic import BasicComposition
from beam_dp.accounting.composition_zcdp import ZcdpComposition
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.ledger import LedgerEntry
from beam_dp.accounting.shares import TOLERANCE, BudgetShare, Cost, exceeds
from beam_dp.accounting.zcdp import ZCDP_DELTA_HINT

__all__ = ["COMPOSITIONS", "TOLERANCE", "BudgetShare", "Composition", "PrivacyBudget"]

_RULES: dict[Composition, type[CompositionRule]] = {
    "basic": BasicComposition,
    "zcdp": ZcdpComposition,
}


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
        self._rule: CompositionRule = _RULES[composition](self._epsilon, self._delta)
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
        allocations = self._rule.plan(shares)
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
        self._rule.check_spend(name, shares, delta_z)
        allocation = self._rule.allocate_explicit(share, delta_z)
        costs = [existing._cost() for existing in self._shares.values()]
        costs.append(Cost(share.kind, allocation.epsilon, allocation.delta, allocation.rho))
        total_epsilon, total_delta = self._rule.compose(costs, delta_z)
        if exceeds(total_epsilon, self._epsilon) or exceeds(total_delta, self._delta):
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
        # a share for a mechanism pays for its top-k form (same kind: kinds.MECHANISMS)
        if entry.mechanism not in (share.mechanism, f"{share.mechanism}_top_k"):
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
            if exceeds(used, allowed):
                raise ValueError(
                    f"ledger entry {entry.name!r} brings the share's {attribute} to "
                    f"{float(used)!r}, more than the share's {attribute}={allowed!r}"
                )
        self._ledger.append(entry)

    def spent(self) -> tuple[float, float]:
        """(ε, δ) spent, composed (sums exact, then rounded to nearest).

        A share taken by a built transform (:attr:`BudgetShare.spent_by`) counts in full;
        another share counts what was recorded against it (see the module docstring).
        """
        costs: list[Cost] = []
        for share in self._shares.values():
            if share.spent_by is not None:
                costs.append(share._cost())
                continue
            costs += [
                Cost(privacy_kind(entry.mechanism), entry.epsilon, entry.delta, entry.rho)
                for entry in self._ledger
                if entry.name == share.name
            ]
        epsilon, delta = self._rule.compose(costs, self._zcdp_delta(self._shares.values()))
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
        used_epsilon, used_delta = self._rule.compose(
            costs, self._zcdp_delta(self._shares.values())
        )
        return (
            max(0.0, float_at_most(Fraction(self._epsilon) - used_epsilon)),
            max(0.0, float_at_most(Fraction(self._delta) - used_delta)),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``budget`` object of ``release.json``, in plain JSON types.

        Keys: ``epsilon_total``, ``epsilon_spent`` and ``delta_spent`` (:meth:`spent`),
        ``delta_total``, ``composition``, and ``shares`` (each share's amounts, the
        transform that took it, ``spent_by``, and what it spent: all of it when a transform
        took it, else what was recorded against it); under ``"zcdp"`` also ``rho_spent`` and
        ``zcdp_delta``.
        """
        epsilon_spent, delta_spent = self.spent()
        shares = []
        rho_spent: list[float] = []
        for share in self._shares.values():
            described = share.to_json()
            if share.spent_by is not None:  # taken by a transform: spent in full
                spent = [(share.epsilon, share.delta, share.rho or 0.0)]
            else:
                spent = [
                    (entry.epsilon, entry.delta, entry.rho or 0.0)
                    for entry in self._ledger
                    if entry.name == share.name
                ]
            described["epsilon_spent"] = math.fsum(epsilon for epsilon, _, _ in spent)
            described["delta_spent"] = math.fsum(delta for _, delta, _ in spent)
            if self._composition == "zcdp":
                described["rho_spent"] = math.fsum(rho for _, _, rho in spent)
                rho_spent.append(described["rho_spent"])
            shares.append(described)
        result: dict[str, Any] = {
            "epsilon_total": self._epsilon,
            "epsilon_spent": epsilon_spent,
            "delta_total": self._delta,
            "delta_spent": delta_spent,
            "composition": self._composition,
        }
        if self._composition == "zcdp":
            result["rho_spent"] = math.fsum(rho_spent)
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
        needs_delta = self._rule.needs_delta(kind)
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
        self._rule.check_request(name, mechanism, kind, explicit=epsilon is not None)
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
        return self._rule.conversion_delta(shares)
