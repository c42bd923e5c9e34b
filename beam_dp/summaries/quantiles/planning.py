"""Planning a quantile release: every selection, epsilon and bound fixed before any data.

:func:`plan_quantiles` validates the parameters and lays out the selections of a release of
``m`` quantiles as a :class:`QuantilePlan`:

* ``split="independent"``: ``m`` selections on the whole histogram at ``epsilon / m`` each.
* ``split="recursive"``: the tree of :mod:`.recursive`, ``D = ceil(log2(m + 1))`` levels at
  ``epsilon / D`` each, every node's relation and epsilon from
  :func:`level_budget` (the proof is in :mod:`.recursive`, Privacy).
* ``split="joint"``: the same tree with some nodes choosing two quantiles at once
  (:mod:`.joint`), ``D = ceil(log3(m + 1))`` levels.
* ``split="auto"`` (the default, :data:`~.parameters.DEFAULT_SPLIT`): joint for ``m >= 2``,
  else one selection.

Each node carries its sensitivity (:func:`~.utility.point_sensitivity`, times the partitions a
unit may reach) and its score-loss bound ``l`` at the per-selection confidence
``1 - beta / m`` (a union bound over the at most ``m`` selections). A node with children
chooses among the ``d (Q + 1)`` cuts of the grid (:mod:`.recursive`; ``Q`` is
:func:`tie_parts`), a node without among the ``d`` grid points; its ``l`` counts them. A
quantile's rank-error bound is its node's own bound plus ``1 - alpha_B`` and ``alpha_B`` times
the bounds of the cuts at its branch's ends (:mod:`.recursive`, "Accuracy"). A node's own bound
has two parts: ``l`` (ranks) and, for a node with children, the tie cut's term, at most
``1 / (2Q)`` of the values tied at its point for one cut and ``1 / Q`` for a pair (whose two
distances can add up), hence at most ``N / (2Q)`` (``N / Q``) with ``N`` the values kept. So a
quantile's bound is ``rank_errors()[i] + rank_error_shares()[i] * N``: the first part public
ranks, the second a public share of the (unreleased) ``N``; both hold together with
probability ``confidence`` when the values are grid points (values strictly between grid points
add the best grid point's own distance). Everything in a plan is a function of public
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

from beam_dp._validation import Relation, check_positive_int, check_probability_open
from beam_dp.summaries.quantiles.joint import pair_loss, pair_sensitivity
from beam_dp.summaries.quantiles.parameters import (
    DEFAULT_SPLIT,
    PlanBase,
    PlanOptions,
    Split,
    base_fields,
    bounded,
    check_quantile_plan,
    check_split,
    parse_quantiles,
    selection_loss,
)
from beam_dp.summaries.quantiles.utility import point_sensitivity

__all__ = [
    "CUT_WORK",
    "MAX_CUTS",
    "MAX_TIE_PARTS",
    "TIE_PARTS",
    "QuantileNode",
    "QuantilePlan",
    "level_budget",
    "plan_quantiles",
    "quantile_rounds",
    "rank_errors",
    "recursion_levels",
    "tie_parts",
]

#: A block of tied values at a split point is cut at one of ``Q + 1`` evenly spaced places:
#: a cut's best position is within ``1 / (2Q)`` of the block of its target, and a node with
#: children pays ``ln(Q + 1)`` in its score-loss bound for the choice. ``Q`` is at least
#: ``TIE_PARTS`` wherever :data:`MAX_CUTS` allows it (grids of up to 32 263 points).
TIE_PARTS = 64

#: ``Q`` grows on small grids until a node with children has about this many cuts
#: (``d (Q + 1) <= CUT_WORK``, ``Q`` a power of two, so every place of a smaller ``Q`` stays a
#: place): 1 024 parts on a 101-point grid (1/2 048 of a block per cut, where 64 parts left
#: 1/128), 128 on a 1 001-point grid. The work of a selection stays
#: bounded by public parameters; ``ln(Q + 1)`` in the bound grows by at most ``ln(CUT_WORK / 65
#: d)``. Chosen by measurement (benchmarks/multiq.py; RESULTS.md, "Tie blocks in the
#: many-quantile release").
CUT_WORK = 1 << 17

#: ``Q`` never exceeds this (grids of fewer than 32 points): it keeps the exact scores of a
#: quantile with a large denominator in int64 for up to about 10**9 values.
MAX_TIE_PARTS = 1 << 12

#: At most this many cuts (``d (Q + 1)``) per selection: ``Q`` is smaller than
#: :data:`TIE_PARTS` on grids of more than 32 263 points (one cut at each end of a block on a
#: grid of a million), which bounds the memory and time of a node with children by public
#: parameters.
MAX_CUTS = 1 << 21


def tie_parts(num_candidates: int) -> int:
    """``Q`` for a grid of ``num_candidates`` points (public): the largest power of two with
    ``d (Q + 1) <= CUT_WORK``, within ``[TIE_PARTS, MAX_TIE_PARTS]``, then fewer so that
    ``d (Q + 1) <= max(MAX_CUTS, 2 d)``."""
    d = int(num_candidates)
    affordable = max(1, CUT_WORK // d - 1)
    wanted = min(MAX_TIE_PARTS, max(TIE_PARTS, 1 << (affordable.bit_length() - 1)))
    return max(1, min(wanted, MAX_CUTS // d - 1))


def recursion_levels(num_quantiles: int, branching: int = 2) -> int:
    """The smallest ``D >= 1`` with ``branching**D - 1 >= m``."""
    levels = 1
    while branching**levels - 1 < num_quantiles:
        levels += 1
    return levels


def level_budget(
    level: int, relation: Relation, level_epsilon: Fraction
) -> tuple[Relation, Fraction]:
    """The relation whose sensitivity calibrates a node at ``level``, and the node's epsilon.

    Privacy:
        The root (level 1) sees the data as the release does: ``relation`` at
        ``level_epsilon``. Deeper nodes are calibrated to the add/remove sensitivity of their
        branch (a changed unit adds and removes weighted values across the branches of a
        level): at ``level_epsilon`` under add/remove, and at ``level_epsilon / 2`` under
        replace, where one changed unit is up to ``k`` removals plus ``k`` additions (the
        halving). See :mod:`.recursive` (Privacy) for the parallel composition over a level.
    """
    if level == 1:
        return relation, level_epsilon
    if relation == "replace":
        return "add_remove", level_epsilon / 2
    return "add_remove", level_epsilon


@dataclass(frozen=True)
class QuantileNode:
    """One selection of a quantile plan (public: depends on parameters only).

    Attributes:
        target: position of the quantile in the plan's sorted distinct quantiles.
        alpha: the quantile relative to the node's branch.
        level: depth of the node (the root is 1).
        epsilon: epsilon of this selection.
        relation: the relation whose sensitivity calibrates it.
        sensitivity: that sensitivity, in (weighted) value counts.
        loss_bound: the score-loss bound ``l`` at the plan's per-selection confidence.
        path_loss: the rank-error bound (``l`` part) of ``target``: ``loss_bound`` plus the
            errors of the cuts at its branch's ends, weighted (module docstring).
        left, right: indices of the child nodes in ``QuantilePlan.nodes`` (or None).
        second_target, second_alpha: the second quantile of a pair node (or None).
        middle: the child between a pair node's two quantiles (or None).
        second_path_loss: ``path_loss`` of ``second_target`` (or None).
        path_share: the rank-error bound's share of ``N`` for ``target``: the tie cuts' terms
            (``1 / (2Q)`` for a node with children, ``1 / Q`` for a pair with children, 0
            without) weighted along the path as ``path_loss`` is (module docstring).
        second_path_share: ``path_share`` of ``second_target`` (or None).
    """

    target: int
    alpha: Fraction
    level: int
    epsilon: Fraction
    relation: Relation
    sensitivity: Fraction
    loss_bound: float
    path_loss: float
    left: int | None = None
    right: int | None = None
    second_target: int | None = None
    second_alpha: Fraction | None = None
    middle: int | None = None
    second_path_loss: float | None = None
    path_share: float = 0.0
    second_path_share: float | None = None

    @property
    def targets(self) -> tuple[int, ...]:
        if self.second_target is None:
            return (self.target,)
        return (self.target, self.second_target)

    @property
    def path_losses(self) -> tuple[float, ...]:
        """``path_loss`` of each of :attr:`targets`."""
        if self.second_path_loss is None:
            return (self.path_loss,)
        return (self.path_loss, self.second_path_loss)

    @property
    def path_shares(self) -> tuple[float, ...]:
        """``path_share`` of each of :attr:`targets`."""
        if self.second_path_share is None:
            return (self.path_share,)
        return (self.path_share, self.second_path_share)

    @property
    def cuts(self) -> bool:
        """Whether the node has children, hence chooses cuts (see :mod:`.recursive`)."""
        return any(child is not None for child in (self.left, self.middle, self.right))


@dataclass(frozen=True)
class QuantilePlan(PlanBase):
    """Everything about a quantile release that is fixed before any data is read.

    Build with :func:`plan_quantiles`. Holds the selections to run, their epsilons and
    sensitivities, and the public accuracy bounds (the shared fields: :class:`PlanBase`).
    ``tie_parts`` is ``Q``: a node with children cuts the values tied at its point at one of
    ``Q + 1`` places (:mod:`.recursive`).
    """

    split: Split
    max_partitions: int
    num_candidates: int
    confidence: float
    failure_probability: float
    nodes: tuple[QuantileNode, ...]
    levels: int
    tie_parts: int

    @property
    def rounds(self) -> int:
        """Sequential rounds composed: the levels (recursive) or the selections (independent)."""
        return len(self.nodes) if self.split == "independent" else self.levels

    @property
    def sensitivity(self) -> Fraction:
        """The largest sensitivity of any selection (the root's for one quantile)."""
        return max(node.sensitivity for node in self.nodes)

    @property
    def score_loss(self) -> float:
        """The largest per-selection score-loss bound ``l``, in value counts."""
        return max(node.loss_bound for node in self.nodes)

    def rank_errors(self) -> tuple[float, ...]:
        """Rank-error bound (the ``l`` part, ranks) of each requested quantile, in request
        order; :meth:`rank_error_shares` holds the rest of it."""
        return self._per_quantile([node.path_losses for node in self.nodes])

    def rank_error_shares(self) -> tuple[float, ...]:
        """The tie cuts' part of each requested quantile's rank-error bound, as a share of
        ``N`` (the values kept; module docstring): the bound is
        ``rank_errors()[i] + rank_error_shares()[i] * N``."""
        return self._per_quantile([node.path_shares for node in self.nodes])

    def _per_quantile(self, per_node: list[tuple[float, ...]]) -> tuple[float, ...]:
        by_target = {
            target: value
            for node, values in zip(self.nodes, per_node, strict=True)
            for target, value in zip(node.targets, values, strict=True)
        }
        per_distinct = [by_target[i] for i in range(len(self.distinct))]
        if self.split == "independent":
            # Outputs are sorted: each is then within the largest of the bounds.
            per_distinct = [max(per_distinct)] * len(per_distinct)
        position = {q: i for i, q in enumerate(self.distinct)}
        return tuple(per_distinct[position[q]] for q in self.quantiles)

    @property
    def rank_error(self) -> float:
        """The largest rank-error bound (``l`` part) over the requested quantiles."""
        return max(self.rank_errors())

    @property
    def rank_error_share(self) -> float:
        """The largest share of ``N`` in a requested quantile's rank-error bound."""
        return max(self.rank_error_shares())


class _Layout:
    """Builds the nodes of one plan (the parameters every node shares, validated)."""

    def __init__(
        self,
        distinct: tuple[Fraction, ...],
        relation: Relation,
        k: Fraction,
        num_candidates: int,
        confidence: float,
    ) -> None:
        self.distinct = distinct
        self.relation = relation
        self.k = k
        self.num_candidates = num_candidates
        self.parts = tie_parts(num_candidates)
        self.confidence = confidence
        self.nodes: list[QuantileNode] = []

    def node(
        self, target: int, alpha: Fraction, level: int, epsilon: Fraction, relation: Relation
    ) -> QuantileNode:
        delta = point_sensitivity(alpha, relation, self.k)
        bound = selection_loss(self.num_candidates, epsilon, delta, self.confidence)
        return QuantileNode(target, alpha, level, epsilon, relation, delta, bound, bound)

    def independent(self, epsilon: Fraction) -> None:
        per = epsilon / len(self.distinct)
        for i, alpha in enumerate(self.distinct):
            self.nodes.append(self.node(i, alpha, 1, per, self.relation))

    def tree(
        self,
        span: tuple[int, int],
        branch: tuple[Fraction, Fraction],
        level: int,
        depth: int,
        ends: tuple[float, float],
        eps: Fraction,
        end_shares: tuple[float, float] = (0.0, 0.0),
    ) -> int:
        """A single node at the middle quantile whenever its sides fit the levels left, else a
        joint node of two quantiles with three near-equal branches.

        ``ends`` are the rank-error bounds of the cuts at the branch's ends (0 at the global
        ends), ``end_shares`` their shares of ``N``; a target's bound is the node's own (``l``,
        and the tie cut's share when the node has children) plus ``1 - alpha`` and ``alpha``
        times them (:mod:`.recursive`, "Accuracy").
        """
        lo, hi = span
        size = hi - lo + 1
        single_fits = size <= 2**depth - 1 or size - 1 <= 2 * (3 ** (depth - 1) - 1)
        if single_fits or size < 2:
            picks: tuple[int, ...] = ((lo + hi) // 2,)
        else:
            sides, extra = divmod(size - 2, 3)
            first = lo + sides + (1 if extra == 2 else 0)
            picks = (first, first + 1 + sides + (1 if extra == 1 else 0))
        a_lo, a_hi = branch
        alphas = [bounded((self.distinct[p] - a_lo) / (a_hi - a_lo)) for p in picks]
        node_relation, node_epsilon = level_budget(level, self.relation, eps)
        edges = [lo - 1, *picks, hi + 1]
        has_children = any(edges[i + 1] - edges[i] > 1 for i in range(len(picks) + 1))
        candidates = self.num_candidates * ((self.parts + 1) if has_children else 1)
        if len(picks) == 1:
            delta = point_sensitivity(alphas[0], node_relation, self.k)
            bound = selection_loss(candidates, node_epsilon, delta, self.confidence)
        else:
            delta = pair_sensitivity((alphas[0], alphas[1]), node_relation, self.k)
            bound = pair_loss(candidates, node_epsilon, delta, self.confidence)
        paths = [bound + float(1 - alpha) * ends[0] + float(alpha) * ends[1] for alpha in alphas]
        # The best cut is within 1/(2Q) of the block tied at its point (<= N values); a pair's
        # best two distances can add up (module docstring).
        own_share = len(picks) / (2 * self.parts) if has_children else 0.0
        shares = [
            own_share + float(1 - alpha) * end_shares[0] + float(alpha) * end_shares[1]
            for alpha in alphas
        ]
        index = len(self.nodes)
        self.nodes.append(
            QuantileNode(
                picks[0], alphas[0], level, node_epsilon, node_relation, delta, bound, paths[0]
            )
        )
        end_share_list = [end_shares[0], *shares, end_shares[1]]
        limits = [a_lo, *(self.distinct[p] for p in picks), a_hi]
        errors = [ends[0], *paths, ends[1]]
        children = [
            self.tree(
                (edges[i] + 1, edges[i + 1] - 1),
                (limits[i], limits[i + 1]),
                level + 1,
                depth - 1,
                (errors[i], errors[i + 1]),
                eps,
                (end_share_list[i], end_share_list[i + 1]),
            )
            if edges[i + 1] - edges[i] > 1
            else None
            for i in range(len(picks) + 1)
        ]
        pair = len(picks) == 2
        self.nodes[index] = QuantileNode(
            picks[0],
            alphas[0],
            level,
            node_epsilon,
            node_relation,
            delta,
            bound,
            paths[0],
            left=children[0],
            right=children[-1],
            second_target=picks[1] if pair else None,
            second_alpha=alphas[1] if pair else None,
            middle=children[1] if pair else None,
            second_path_loss=paths[1] if pair else None,
            path_share=shares[0],
            second_path_share=shares[1] if pair else None,
        )
        return index


def plan_quantiles(
    quantiles: Sequence[float | Fraction],
    *,
    epsilon: float | Fraction,
    num_candidates: int,
    max_partitions: int = 1,
    split: str = DEFAULT_SPLIT,
    confidence: float = 0.95,
    failure_probability: float | None = None,
    **options: Unpack[PlanOptions],
) -> QuantilePlan:
    """Validate the parameters of a quantile release and lay out its selections.

    Args:
        quantiles: the quantiles, each strictly between 0 and 1.
        epsilon: total epsilon of the release (> 0, finite).
        num_candidates: grid size ``d`` (a public upper bound on every selection's candidates).
        max_partitions: keys (partitions) one unit may contribute to; sensitivities are
            multiplied by it so that all keys together spend ``epsilon``.
        split: ``"auto"`` (the joint split for m >= 2, else one selection), ``"joint"``,
            ``"recursive"`` or ``"independent"``. The plan records the split used.
        confidence: the probability with which all the rank-error bounds hold together.
        failure_probability: overrides ``1 - confidence`` (for two-pass plans).
        **options: ``relation``, ``max_contributions`` (``k``) and ``method``
            (:class:`~.parameters.PlanOptions`).

    Raises:
        ValueError / TypeError: naming the bad parameter.
    """
    base = check_quantile_plan(quantiles, epsilon, options, max_partitions)
    check_positive_int(num_candidates, "num_candidates")
    chosen_split = check_split(split)
    check_probability_open(confidence, "confidence")
    beta = 1.0 - float(confidence) if failure_probability is None else float(failure_probability)
    check_probability_open(beta, "failure_probability")
    distinct = base.distinct
    m = len(distinct)
    chosen_split = _resolved(chosen_split, m)
    k = Fraction(base.max_contributions * int(max_partitions))
    layout = _Layout(distinct, base.relation, k, int(num_candidates), 1.0 - beta / m)
    if chosen_split == "independent":
        layout.independent(base.epsilon)
        levels = 1
    else:
        levels = recursion_levels(m, 3 if chosen_split == "joint" else 2)
        eps = base.epsilon / levels
        layout.tree((0, m - 1), (Fraction(0), Fraction(1)), 1, levels, (0.0, 0.0), eps)
        if max(node.level for node in layout.nodes) != levels:  # pragma: no cover
            raise AssertionError("the recursion tree is deeper than its epsilon split assumed")
    return QuantilePlan(
        **base_fields(base),
        split=chosen_split,
        max_partitions=int(max_partitions),
        num_candidates=int(num_candidates),
        confidence=float(confidence),
        failure_probability=beta,
        nodes=tuple(layout.nodes),
        levels=levels,
        tie_parts=layout.parts,
    )


def _resolved(split: Split, num_distinct: int) -> Split:
    """``"auto"`` made concrete: the joint split for two quantiles or more, else one selection.

    Chosen by measurement against the original JointExp code on its own protocol
    (benchmarks/jointexp.py; RESULTS.md, "Against the original JointExp, per range of m"):
    the joint split misclassified 0.90x, 0.92x and 0.89x JointExp's points for m = 1-2, 3-12
    and 13-29, where the recursive split measured 1.21x, 1.10x and 0.93x.
    """
    if split != "auto":
        return split
    return "joint" if num_distinct >= 2 else "independent"


def quantile_rounds(
    quantiles: Sequence[float | Fraction], split: str = DEFAULT_SPLIT, *, interval: bool = False
) -> int:
    """The sequential rounds a release of ``quantiles`` composes, from public parameters only.

    What a budget needs before planning (e.g. to split a share over rounds): the levels of the
    recursive split, or one round per distinct quantile for independent selections. Equal to
    :attr:`QuantilePlan.rounds` of the plan :func:`plan_quantiles` makes for them. With
    ``interval=True`` (what the quantile transforms do by default), plus the two selections of
    each distinct quantile's interval (:attr:`~.intervals.IntervalPlan.rounds`): the rounds a
    budget share for such a transform must cover.
    """
    m = len(set(parse_quantiles(quantiles)))
    chosen = _resolved(check_split(split), m)
    ends = 2 * m if interval else 0
    if chosen == "independent":
        return m + ends
    return recursion_levels(m, 3 if chosen == "joint" else 2) + ends


def rank_errors(plan: QuantilePlan) -> tuple[float, ...]:
    """Rank-error bounds of ``plan``'s quantiles, in request order (see :mod:`.utility`)."""
    return plan.rank_errors()
