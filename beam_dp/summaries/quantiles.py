"""Private quantiles and means from grid summaries (pure: numpy and the exact samplers; no Beam).

Everything here runs on a merged :class:`~beam_dp.summaries.histogram.GridHistogram` (or an
:class:`~beam_dp.summaries.histogram.ExactSum` for the mean) and the public grid. Selections
use the exact samplers of :mod:`beam_dp.mechanisms` on the exact integer scores of
:class:`~beam_dp.scores.QuantileScore` (and :class:`~beam_dp.scores.MeanScore`); no float score
is ever sampled from.

Single quantile
---------------
The score of grid point ``r`` for quantile ``alpha`` is ``u(r) = -|(1-alpha) L - alpha G|``
with ``L = #(x < r)``, ``G = #(x > r)`` (DESIGN §3), sensitivity ``max(alpha, 1-alpha) k``
under add/remove and ``k`` under replace, for ``k`` values per privacy unit.

Many quantiles
--------------
* ``split="independent"``: ``m`` selections on the whole histogram at ``epsilon / m`` each
  (basic composition); the outputs are sorted (post-processing).
* ``split="auto"`` (the default, see :data:`DEFAULT_SPLIT`): recursive for three quantiles or
  more, independent for one or two.
* ``split="recursive"`` (Kaplan, Schnapp, Stemmer 2022): select the middle requested quantile
  on the whole data; values below the chosen point ``s`` form the left branch, values above
  it the right branch, and each branch recursively selects its quantiles, re-normalised to the
  branch (``alpha' = (alpha - alpha_lo) / (alpha_hi - alpha_lo)``), among the grid points of its
  side (so the outputs come out sorted). Values *equal* to ``s`` count one half in each branch
  (our tie rule: the split stays symmetric and a branch is never emptied by a block of ties).
  Each value has total weight at most 1 across the branches of a level, so one privacy unit's
  change moves the scores of the branches of a level by at most its ``k`` weighted values in
  total: with each branch calibrated to its own add/remove sensitivity
  ``max(alpha', 1-alpha') k``, a whole level costs ``epsilon_level`` (parallel composition),
  and the ``D = ceil(log2(m + 1))`` levels cost ``D * epsilon_level = epsilon``. Under
  *replace*, the root uses the replace sensitivity at ``epsilon / D``; deeper levels see up to
  ``2k`` weighted additions and removals per changed unit, so each of their branches runs at
  ``epsilon / (2D)`` with the add/remove sensitivity. The same accounting holds in zCDP for the
  exponential mechanism (each level is ``epsilon_level``-bounded-range).

The default was decided by measurement (``benchmarks/quantiles.py``, RESULTS.md): see
:data:`DEFAULT_SPLIT`.

Accuracy: from score loss to ranks
----------------------------------
Let ``N`` be the number of values and, for a grid point ``r``, ``E = #(x = r)``; the ranks
``r`` may take form the interval ``[L, L + E]`` (``L + E = N - G``). Its *rank error* is
``e(r) = dist(alpha N, [L, L + E])``. Since ``(1-alpha) L - alpha G = (L - alpha N) + alpha E``:
if ``L > alpha N`` then ``|u| = e + alpha E``; if ``L + E < alpha N`` then
``|u| = e + (1 - alpha) E``; otherwise ``e = 0``. Hence **e(r) <= |u(r)|** (ties only help).

The utility guarantee (Dwork-Roth 3.11, also valid for permute-and-flip) gives, with
probability ``1 - beta``, ``|u(out)| <= OPT + l`` with ``l = 2 Delta (ln d + ln(1/beta)) /
epsilon`` and ``OPT = min_r |u(r)|``, the best the grid allows. If the alpha-quantile lies in
the closed grid cell ``[r_j, r_{j+1}]`` holding ``c`` values (ties at both ends included),
one of its two end points has ``|u| <= max(alpha, 1 - alpha) c``. So::

    e(out) <= l + OPT,    OPT <= max(alpha, 1 - alpha) * c.

``l`` depends only on public parameters and is what releases report as ``rank_error``
(with ``beta = (1 - confidence) / (number of selections)``, a union bound); ``OPT`` is the grid
resolution term, data-dependent and never released: releases report ``cell_width`` (the
wider cell next to each output, the max over outputs) so readers can judge it.

For the recursive split, a branch ``B`` whose ends are earlier outputs ``s_lo, s_hi`` holds
the weighted values between them; ``C_B`` is the weight to its left. For every candidate ``r``
of ``B`` the global rank interval of ``r`` contains ``C_B + [L_B, L_B + E_B]`` (also at the two
end points, where ``B`` holds only part of the tie), so
``e(r) <= e_B(r) + |alpha N - C_B - alpha_B n_B|``. The second term is an affine function of
``alpha`` on ``[alpha_lo, alpha_hi]`` that is bounded at each end by the rank error of that
end's output plus its ties, and is 0 at the global ends. By induction along the path from the
root, the rank error of a quantile at depth ``h`` is at most the sum of ``l + OPT + ties``
over the ``h`` selections on its path; ``rank_error`` reports the sum of the ``l`` terms.

Coarse-to-fine
--------------
A first pass (:func:`select_cells`) chooses, for each quantile, a *cell* of a coarse grid by
its rank distance to the quantile (exact integer scores, the point utility's sensitivity;
see :func:`plan_cells`); :func:`refine_grid` puts a fine grid inside the chosen cells; a
second pass runs the usual plan on it (values outside count in the under/overflow slots, so
scores are still over the whole data). If a quantile's cell holds it, the second pass has the
fine grid's resolution; if not, the cell's nearer end (a fine point) is within the coarse
loss of it. The reported ``rank_error`` is the sum of both passes' ``l`` terms (each pass at
half the failure probability); ``fine_rank_error`` is the second pass's alone.

Mean
----
``replace`` (``n`` public): :class:`~beam_dp.scores.MeanScore`'s exact integer scores of
``-|T(x) - r|`` (seed 004) with ``T`` the centred sum over the public ``n``,
``T = mid + sum_i (x_i - mid) / n`` (``mid`` the middle of ``[lower, upper]``, clamped to it),
which is the mean when ``n`` values are kept and is defined whatever the count (so the release
never fails on the data); sensitivity ``k (upper - lower) / n``. ``add_remove``: the mean
is the root of ``S(r) = sum_i (x_i - r)``; its utility ``-|S(r)| = -|sum(x) - N r|`` needs no
public ``N``: adding or removing one value ``x`` moves ``S(r)`` by ``x - r``, at most
``upper - lower`` since ``r`` and the clamped ``x`` lie in ``[lower, upper]``. So its
sensitivity is ``k (upper - lower)`` under either relation, and its loss ``l`` bounds
``|mean - out| <= (l + OPT) / N``: the same order as the replace mechanism's
``2 k (upper - lower) (ln d + t) / (N epsilon)``. Its integer scores are
``floor(-|S(r)| / unit)`` with ``unit = k (upper - lower) / resolution``, which moves every
score by less than one step and keeps the sensitivity exactly ``resolution`` steps (as
``MeanScore`` does); they are capped at ``-(2**62 - 1)`` (a public, 1-Lipschitz floor) so that
they fit in int64 for any number of values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral, Real
from typing import Literal

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
    to_fraction,
)
from beam_dp.mechanisms import Method, RandomSource, as_random_source, score_loss_bound, select
from beam_dp.scores import MeanScore, QuantileScore
from beam_dp.summaries.histogram import (
    MAX_GRID_POINTS,
    ExactSum,
    Grid,
    GridHistogram,
    less_greater,
)

__all__ = [
    "DEFAULT_REFINE_FRACTION",
    "DEFAULT_SPLIT",
    "SPLITS",
    "CellPlan",
    "CellSelection",
    "MeanPlan",
    "MeanSelection",
    "QuantileNode",
    "QuantilePlan",
    "QuantileSelection",
    "Split",
    "cell_scores",
    "combine_passes",
    "parse_quantiles",
    "plan_cells",
    "plan_mean",
    "plan_quantiles",
    "rank_errors",
    "refine_grid",
    "select_cells",
    "select_mean",
    "select_quantiles",
]

Split = Literal["auto", "recursive", "independent"]
SPLITS: tuple[Split, ...] = ("auto", "recursive", "independent")

#: The many-quantile method used unless one is asked for: ``"auto"`` is the recursive split
#: whenever it composes fewer rounds than independent selections (m >= 3), else independent
#: (m <= 2, where the recursion has as many levels as quantiles and its errors add up). Chosen
#: by measurement on the JointExp protocol (benchmarks/quantiles.py; RESULTS.md, "Quantiles
#: (issue 4)"): over m = 1..29 the recursive split misclassified 4.7x fewer points than
#: independent selections at epsilon/m and won 55 of 58 settings; independent won at m = 2.
DEFAULT_SPLIT: Split = "auto"

#: Fraction of epsilon spent by the coarse pass of the coarse-to-fine option.
DEFAULT_REFINE_FRACTION = 0.1

#: Integer score steps per sensitivity for the mean scores (as MeanScore's default).
MEAN_RESOLUTION = 2**16

IntArray = npt.NDArray[np.int64]


def _check_method(method: str) -> Method:
    if method == "permute_and_flip":
        return "permute_and_flip"
    if method == "exponential":
        return "exponential"
    raise ValueError(f"'method' must be 'permute_and_flip' or 'exponential'; received {method!r}")


def _check_split(split: str) -> Split:
    if split == "auto":
        return "auto"
    if split == "recursive":
        return "recursive"
    if split == "independent":
        return "independent"
    raise ValueError(f"'split' must be one of {list(SPLITS)}; received {split!r}")


#: Quantiles are used as fractions with a denominator of at most this (see parse_quantiles).
MAX_QUANTILE_DENOMINATOR = 1 << 20


def _bounded(alpha: Fraction) -> Fraction:
    """``alpha`` itself, or the nearest fraction with denominator <= 2**20 (within 2**-20).

    Exact integer scores are ``b * u`` for ``alpha = a / b``; a bounded ``b`` keeps them in
    int64 for up to about 10**11 values. The rule is public and data-independent.
    """
    if alpha.denominator <= MAX_QUANTILE_DENOMINATOR:
        return alpha
    near = alpha.limit_denominator(MAX_QUANTILE_DENOMINATOR)
    smallest = Fraction(1, MAX_QUANTILE_DENOMINATOR)
    return min(max(near, smallest), 1 - smallest)


def _quantile_fraction(value: object, name: str) -> Fraction:
    """A quantile as the exact decimal it was written as (``0.9`` is 9/10), then bounded."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"'{name}' must be a real number; received type bool")
    if isinstance(value, Fraction):
        fraction = value
    elif isinstance(value, (float, np.floating)):
        check_probability_open(float(value), name)
        fraction = Fraction(str(float(value)))  # shortest round-trip decimal
    elif isinstance(value, (Integral, Real)):
        fraction = to_fraction(value, name)
    else:
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    if not 0 < fraction < 1:
        raise ValueError(f"'{name}' must be strictly between 0 and 1; received {value!r}")
    return _bounded(fraction)


def parse_quantiles(quantiles: object) -> tuple[Fraction, ...]:
    """Validate the requested quantiles: a non-empty sequence of numbers in (0, 1).

    Floats are read as the decimals they were written as (``0.9`` is ``9/10``), as
    :class:`~beam_dp.scores.QuantileScore` does; a quantile whose denominator exceeds
    ``2**20`` (``0.3333333333333333``, or ``0.123456789``) is replaced by the nearest fraction
    with a denominator of at most ``2**20`` (``1/3``; always within ``2**-20``), a public rule
    that keeps the exact integer scores in int64. Duplicates are allowed.
    """
    items: list[object]
    if isinstance(quantiles, np.ndarray):
        items = list(quantiles.ravel().tolist())
    elif isinstance(quantiles, Sequence) and not isinstance(quantiles, (str, bytes)):
        items = list(quantiles)
    else:
        raise TypeError(
            "'quantiles' must be a sequence of numbers in (0, 1); received type "
            f"{type(quantiles).__name__}"
        )
    if not items:
        raise ValueError("'quantiles' must hold at least one quantile; received none")
    return tuple(_quantile_fraction(q, f"quantiles[{i}]") for i, q in enumerate(items))


def _epsilon_fraction(epsilon: object) -> Fraction:
    check_positive_finite(epsilon, "epsilon")
    return to_fraction(epsilon, "epsilon")


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
        path_loss: the sum of ``loss_bound`` from the root to this node (its rank error).
        left, right: indices of the child nodes in ``QuantilePlan.nodes`` (or None).
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


@dataclass(frozen=True)
class QuantilePlan:
    """Everything about a quantile release that is fixed before any data is read.

    Build with :func:`plan_quantiles`. Holds the selections to run, their epsilons and
    sensitivities, and the public accuracy bounds.
    """

    quantiles: tuple[Fraction, ...]
    distinct: tuple[Fraction, ...]
    split: Split
    relation: Relation
    epsilon: Fraction
    method: Method
    max_contributions: int
    max_partitions: int
    num_candidates: int
    confidence: float
    failure_probability: float
    nodes: tuple[QuantileNode, ...]
    levels: int

    @property
    def rounds(self) -> int:
        """Sequential rounds composed: the levels (recursive) or the selections (independent)."""
        return self.levels if self.split == "recursive" else len(self.nodes)

    @property
    def sensitivity(self) -> Fraction:
        """The largest sensitivity of any selection (the root's for one quantile)."""
        return max(node.sensitivity for node in self.nodes)

    @property
    def score_loss(self) -> float:
        """The largest per-selection score-loss bound ``l``, in value counts."""
        return max(node.loss_bound for node in self.nodes)

    def rank_errors(self) -> tuple[float, ...]:
        """Rank-error bound (the ``l`` part) of each requested quantile, in request order."""
        by_target = {node.target: node.path_loss for node in self.nodes}
        per_distinct = [by_target[i] for i in range(len(self.distinct))]
        if self.split == "independent":
            # Outputs are sorted: each is then within the largest of the bounds.
            per_distinct = [max(per_distinct)] * len(per_distinct)
        position = {q: i for i, q in enumerate(self.distinct)}
        return tuple(per_distinct[position[q]] for q in self.quantiles)

    @property
    def rank_error(self) -> float:
        """The largest rank-error bound over the requested quantiles."""
        return max(self.rank_errors())


def _relative(alpha: Fraction, low: Fraction, high: Fraction) -> Fraction:
    """The quantile relative to a branch, bounded as the requested ones are."""
    return _bounded((alpha - low) / (high - low))


def plan_quantiles(
    quantiles: Sequence[float | Fraction],
    *,
    epsilon: float | Fraction,
    num_candidates: int,
    relation: str = "add_remove",
    max_contributions: int = 1,
    max_partitions: int = 1,
    method: str = "permute_and_flip",
    split: str = DEFAULT_SPLIT,
    confidence: float = 0.95,
    failure_probability: float | None = None,
) -> QuantilePlan:
    """Validate the parameters of a quantile release and lay out its selections.

    Args:
        quantiles: the quantiles, each strictly between 0 and 1.
        epsilon: total epsilon of the release (> 0, finite).
        num_candidates: grid size ``d`` (a public upper bound on every selection's candidates).
        relation: ``"add_remove"`` or ``"replace"``.
        max_contributions: values per privacy unit ``k`` (enforced upstream).
        max_partitions: keys (partitions) one unit may contribute to; sensitivities are
            multiplied by it so that all keys together spend ``epsilon``.
        method: ``"permute_and_flip"`` or ``"exponential"``.
        split: ``"auto"`` (recursive when that composes fewer rounds, i.e. m >= 3; else
            independent), ``"recursive"`` or ``"independent"``. The plan records the split used.
        confidence: the probability with which all the rank-error bounds hold together.
        failure_probability: overrides ``1 - confidence`` (for two-pass plans).

    Raises:
        ValueError / TypeError: naming the bad parameter.
    """
    parsed = parse_quantiles(quantiles)
    eps = _epsilon_fraction(epsilon)
    check_positive_int(num_candidates, "num_candidates")
    rel = check_relation(relation)
    check_positive_int(max_contributions, "max_contributions")
    check_positive_int(max_partitions, "max_partitions")
    chosen_method = _check_method(method)
    chosen_split = _check_split(split)
    check_probability_open(confidence, "confidence")
    beta = 1.0 - float(confidence) if failure_probability is None else float(failure_probability)
    check_probability_open(beta, "failure_probability")
    distinct = tuple(sorted(set(parsed)))
    k = Fraction(int(max_contributions) * int(max_partitions))
    d = int(num_candidates)
    m = len(distinct)
    if chosen_split == "auto":
        chosen_split = "recursive" if math.ceil(math.log2(m + 1)) < m else "independent"
    per_selection_confidence = 1.0 - beta / m

    def sensitivity(alpha: Fraction, node_relation: Relation) -> Fraction:
        if node_relation == "replace":
            return k
        return max(alpha, 1 - alpha) * k

    def loss(node_epsilon: Fraction, delta: Fraction) -> float:
        return score_loss_bound(
            d,
            epsilon=float(node_epsilon),
            sensitivity=float(delta),
            confidence=per_selection_confidence,
        )

    nodes: list[QuantileNode] = []
    if chosen_split == "independent":
        per = eps / m
        for i, alpha in enumerate(distinct):
            delta = sensitivity(alpha, rel)
            bound = loss(per, delta)
            nodes.append(QuantileNode(i, alpha, 1, per, rel, delta, bound, bound))
        levels = 1
    else:
        levels = max(1, math.ceil(math.log2(m + 1)))
        level_epsilon = eps / levels

        def build(
            lo: int, hi: int, a_lo: Fraction, a_hi: Fraction, level: int, above: float
        ) -> int:
            mid = (lo + hi) // 2
            alpha = _relative(distinct[mid], a_lo, a_hi)
            if level == 1:
                node_relation, node_epsilon = rel, level_epsilon
            elif rel == "replace":
                node_relation, node_epsilon = "add_remove", level_epsilon / 2
            else:
                node_relation, node_epsilon = "add_remove", level_epsilon
            delta = sensitivity(alpha, node_relation)
            bound = loss(node_epsilon, delta)
            index = len(nodes)
            nodes.append(
                QuantileNode(
                    mid, alpha, level, node_epsilon, node_relation, delta, bound, above + bound
                )
            )
            left = (
                build(lo, mid - 1, a_lo, distinct[mid], level + 1, above + bound)
                if lo <= mid - 1
                else None
            )
            right = (
                build(mid + 1, hi, distinct[mid], a_hi, level + 1, above + bound)
                if mid + 1 <= hi
                else None
            )
            nodes[index] = QuantileNode(
                mid,
                alpha,
                level,
                node_epsilon,
                node_relation,
                delta,
                bound,
                above + bound,
                left,
                right,
            )
            return index

        build(0, m - 1, Fraction(0), Fraction(1), 1, 0.0)
        if max(node.level for node in nodes) != levels:  # pragma: no cover - by construction
            raise AssertionError("the recursion tree is deeper than its epsilon split assumed")
    return QuantilePlan(
        quantiles=parsed,
        distinct=distinct,
        split=chosen_split,
        relation=rel,
        epsilon=eps,
        method=chosen_method,
        max_contributions=int(max_contributions),
        max_partitions=int(max_partitions),
        num_candidates=d,
        confidence=float(confidence),
        failure_probability=beta,
        nodes=tuple(nodes),
        levels=levels,
    )


def rank_errors(plan: QuantilePlan) -> tuple[float, ...]:
    """Rank-error bounds of ``plan``'s quantiles, in request order (see the module docstring)."""
    return plan.rank_errors()


@dataclass(frozen=True)
class _Branch:
    """The weighted part of the histogram a node selects on: slots ``[first, last]``.

    Interior slots have weight 1; ``first`` and ``last`` have weights ``first_weight`` and
    ``last_weight`` (powers of 1/2: halves of tied values at earlier split points). When
    ``first == last`` the one slot's weight is ``first_weight``.
    """

    first: int
    last: int
    first_weight: Fraction = Fraction(1)
    last_weight: Fraction = Fraction(1)

    def weight(self, slot: int) -> Fraction:
        if slot == self.first:
            return self.first_weight
        if slot == self.last:
            return self.last_weight
        return Fraction(1)

    @property
    def candidates(self) -> tuple[int, int]:
        """The first and last grid index whose point slot (``2j + 1``) is in the branch."""
        return (self.first) // 2, (self.last - 1) // 2

    def split(self, index: int) -> tuple[_Branch, _Branch]:
        slot = 2 * index + 1
        half = self.weight(slot) / 2
        if slot == self.first:
            left = _Branch(slot, slot, half, half)
        else:
            left = _Branch(self.first, slot, self.first_weight, half)
        if slot == self.last:
            right = _Branch(slot, slot, half, half)
        else:
            right = _Branch(slot, self.last, half, self.last_weight)
        return left, right

    def less_greater(self, counts: IntArray) -> tuple[IntArray, IntArray, int]:
        """Weighted ``(L, G)`` of the branch's candidates, as integers times ``scale``."""
        scale = max(self.first_weight.denominator, self.last_weight.denominator)
        segment = counts[self.first : self.last + 1] * scale
        segment[0] = counts[self.first] * int(self.first_weight * scale)
        if self.last != self.first:
            segment[-1] = counts[self.last] * int(self.last_weight * scale)
        cumulative = np.cumsum(segment)
        total = cumulative[-1]
        low, high = self.candidates
        positions = 2 * np.arange(low, high + 1, dtype=np.int64) + 1 - self.first
        less: IntArray = cumulative[positions] - segment[positions]
        greater: IntArray = total - cumulative[positions]
        return less, greater, scale


@dataclass(frozen=True)
class QuantileSelection:
    """The outcome of :func:`select_quantiles`: released grid points and public accuracy.

    Attributes:
        values: the released points, one per requested quantile (in request order).
        indices: their grid indices.
        rank_errors: per-quantile rank-error bounds (``l`` part; see the module docstring).
        rank_error: the largest of them.
        cell_width: the widest grid cell next to any output.
        score_loss: the largest per-selection score-loss bound (value counts).
        sensitivity: the largest selection sensitivity (value counts, times partitions).
        epsilon: epsilon spent in total.
        rounds: sequential rounds composed.
        num_candidates: grid size.
        secure: whether the randomness came from the OS CSPRNG.
    """

    values: tuple[float, ...]
    indices: tuple[int, ...]
    rank_errors: tuple[float, ...]
    cell_width: float
    score_loss: float
    sensitivity: float
    epsilon: float
    rounds: int
    num_candidates: int
    secure: bool
    fine_rank_error: float | None = field(default=None)

    @property
    def rank_error(self) -> float:
        return max(self.rank_errors)


def _dense_counts(histogram: GridHistogram | npt.ArrayLike, grid: Grid) -> IntArray:
    counts = (
        histogram.counts()
        if isinstance(histogram, GridHistogram)
        else np.asarray(histogram, dtype=np.int64).copy()
    )
    if counts.shape != (grid.num_slots,):
        raise ValueError(f"the histogram has {counts.size} slots; the grid needs {grid.num_slots}")
    return counts


@functools.lru_cache(maxsize=2)
def _whole_grid_score(grid: Grid, alpha: Fraction, max_contributions: int) -> QuantileScore:
    """The score over a whole grid, reused across keys and windows (building one for a
    10^6-point grid costs about as much as the selection itself)."""
    return QuantileScore(alpha=alpha, grid=grid.points, max_contributions=max_contributions)


def _select_node(
    counts: IntArray,
    grid: Grid,
    branch: _Branch,
    node: QuantileNode,
    plan: QuantilePlan,
    source: RandomSource,
) -> int:
    low, high = branch.candidates
    less, greater, scale = branch.less_greater(counts)
    if low == 0 and high == grid.num_points - 1:
        score = _whole_grid_score(grid, node.alpha, plan.max_contributions)
    else:
        score = QuantileScore(
            alpha=node.alpha,
            grid=grid.points[low : high + 1],
            max_contributions=plan.max_contributions,
        )
    scores = score.compute_from_counts(less, greater)
    # Integer scores are b * scale * u for alpha = a/b; their sensitivity scales alike.
    sensitivity = score.scaled_sensitivity(node.relation) * scale * plan.max_partitions
    chosen = select(
        scores,
        epsilon=node.epsilon,
        sensitivity=sensitivity,
        monotonic=False,
        method=plan.method,
        rng=source,
    )
    return low + chosen


def select_quantiles(
    histogram: GridHistogram | npt.ArrayLike,
    grid: Grid,
    plan: QuantilePlan,
    *,
    rng: RandomSource | np.random.Generator | None = None,
) -> QuantileSelection:
    """Run ``plan`` on a merged histogram: the private quantile release.

    Args:
        histogram: the merged :class:`GridHistogram` of the (bounded) values over ``grid``, or
            its dense slot counts.
        grid: the grid the histogram was built on (``len(grid) == plan.num_candidates``
            or fewer).
        plan: from :func:`plan_quantiles`.
        rng: ``None`` for the OS CSPRNG (production); a seeded source only in tests.

    Returns:
        The released grid points with their public accuracy bounds.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` for the contribution bounds in the plan,
        as laid out in the module docstring. Only grid points are released.
    """
    if grid.num_points > plan.num_candidates:
        raise ValueError(
            f"the grid has {grid.num_points} points but the plan was made for at most "
            f"{plan.num_candidates}"
        )
    counts = _dense_counts(histogram, grid)
    source = as_random_source(rng)
    chosen: dict[int, int] = {}
    root = _Branch(0, grid.num_slots - 1)
    if plan.split == "independent":
        for node in plan.nodes:
            chosen[node.target] = _select_node(counts, grid, root, node, plan, source)
        ordered = sorted(chosen.values())
        chosen = dict(enumerate(ordered))
    else:
        stack: list[tuple[int, _Branch]] = [(0, root)]
        while stack:
            index, branch = stack.pop()
            node = plan.nodes[index]
            picked = _select_node(counts, grid, branch, node, plan, source)
            chosen[node.target] = picked
            left, right = branch.split(picked)
            if node.left is not None:
                stack.append((node.left, left))
            if node.right is not None:
                stack.append((node.right, right))
    position = {q: i for i, q in enumerate(plan.distinct)}
    indices = tuple(chosen[position[q]] for q in plan.quantiles)
    return QuantileSelection(
        values=tuple(float(grid.points[i]) for i in indices),
        indices=indices,
        rank_errors=plan.rank_errors(),
        cell_width=max(grid.cell_width(i) for i in indices),
        score_loss=plan.score_loss,
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        rounds=plan.rounds,
        num_candidates=grid.num_points,
        secure=source.secure,
    )


# ---------------------------------------------------------------------------- coarse to fine


@dataclass(frozen=True)
class CellPlan:
    """The coarse pass of the coarse-to-fine option: one cell per quantile (public).

    Candidates are the ``d - 1`` cells ``[r_j, r_{j+1}]`` of the coarse grid; each distinct
    quantile gets an independent selection at ``epsilon / m``. See :func:`plan_cells`.
    """

    quantiles: tuple[Fraction, ...]
    distinct: tuple[Fraction, ...]
    relation: Relation
    epsilon: Fraction
    method: Method
    max_contributions: int
    num_cells: int
    sensitivities: tuple[Fraction, ...]
    loss_bounds: tuple[float, ...]

    @property
    def rounds(self) -> int:
        return len(self.distinct)

    def rank_errors(self) -> tuple[float, ...]:
        """Bound on each requested quantile's distance (in ranks) to its chosen cell."""
        position = {q: i for i, q in enumerate(self.distinct)}
        return tuple(self.loss_bounds[position[q]] for q in self.quantiles)


def plan_cells(
    quantiles: Sequence[float | Fraction],
    *,
    epsilon: float | Fraction,
    num_cells: int,
    relation: str = "add_remove",
    max_contributions: int = 1,
    method: str = "permute_and_flip",
    failure_probability: float = 0.025,
) -> CellPlan:
    """Lay out the coarse pass: which cell of a coarse grid holds each quantile.

    The score of cell ``[r_j, r_{j+1}]`` is minus its rank distance to the quantile,
    ``-dist(alpha N, [#(x < r_j), #(x <= r_{j+1})])``: 0 for every cell that holds the
    alpha-quantile, whatever the values inside look like. (The point utility cannot do this:
    when all values fall inside one coarse cell, every grid point has ``|u| = N/2``.) One value
    added or removed moves both ends of that distance by ``alpha`` or ``1 - alpha`` and the
    distance by at most ``max(alpha, 1 - alpha)``; one value replaced (``N`` fixed) by at most 1.
    So the sensitivity is that of the point utility (times ``max_contributions``), and the
    utility guarantee bounds the chosen cell's rank distance by ``l`` directly (``OPT = 0``).
    """
    parsed = parse_quantiles(quantiles)
    eps = _epsilon_fraction(epsilon)
    check_positive_int(num_cells, "num_cells")
    rel = check_relation(relation)
    check_positive_int(max_contributions, "max_contributions")
    chosen_method = _check_method(method)
    check_probability_open(failure_probability, "failure_probability")
    distinct = tuple(sorted(set(parsed)))
    per = eps / len(distinct)
    k = int(max_contributions)
    sensitivities = tuple(
        Fraction(k) if rel == "replace" else max(alpha, 1 - alpha) * k for alpha in distinct
    )
    confidence = 1.0 - float(failure_probability) / len(distinct)
    losses = tuple(
        score_loss_bound(
            int(num_cells), epsilon=float(per), sensitivity=float(delta), confidence=confidence
        )
        for delta in sensitivities
    )
    return CellPlan(
        quantiles=parsed,
        distinct=distinct,
        relation=rel,
        epsilon=eps,
        method=chosen_method,
        max_contributions=k,
        num_cells=int(num_cells),
        sensitivities=sensitivities,
        loss_bounds=losses,
    )


@dataclass(frozen=True)
class CellSelection:
    """The outcome of :func:`select_cells`: a coarse cell per requested quantile (public)."""

    cells: tuple[int, ...]
    rank_errors: tuple[float, ...]
    epsilon: float
    rounds: int
    secure: bool


def cell_scores(counts: npt.ArrayLike, alpha: Fraction) -> tuple[IntArray, Fraction]:
    """Exact integer cell scores ``-b * dist(alpha N, [L_j, C_{j+1}])`` for ``alpha = a/b``.

    ``counts`` are the ``2d + 1`` slot counts; ``L_j = #(x < r_j)``, ``C_j = #(x <= r_j)``.
    Returns the ``d - 1`` scores and the real value of one integer step (``1 / b``).
    """
    array = np.asarray(counts, dtype=np.int64)
    less, greater = less_greater(array)
    total = int(array.sum())
    a, b = alpha.numerator, alpha.denominator
    if b * max(total, 1) >= 2**62:
        raise ValueError("cell scores would exceed the int64 range of exact scores")
    at_most_next = total - greater[1:]
    below = b * less[:-1] - a * total
    above = a * total - b * at_most_next
    distance = np.maximum(0, np.maximum(below, above))
    scores: IntArray = -distance
    return scores, Fraction(1, b)


def select_cells(
    histogram: GridHistogram | npt.ArrayLike,
    grid: Grid,
    plan: CellPlan,
    *,
    rng: RandomSource | np.random.Generator | None = None,
) -> CellSelection:
    """Run the coarse pass: for each quantile, a private choice of coarse cell.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` (``m`` selections at ``epsilon / m``).
    """
    if grid.num_points - 1 != plan.num_cells:
        raise ValueError(
            f"the grid has {grid.num_points - 1} cells; the plan was made for {plan.num_cells}"
        )
    counts = _dense_counts(histogram, grid)
    source = as_random_source(rng)
    per = plan.epsilon / len(plan.distinct)
    chosen = {}
    for alpha, delta in zip(plan.distinct, plan.sensitivities, strict=True):
        scores, unit = cell_scores(counts, alpha)
        chosen[alpha] = select(
            scores,
            epsilon=per,
            sensitivity=delta / unit,
            monotonic=False,
            method=plan.method,
            rng=source,
        )
    return CellSelection(
        cells=tuple(int(chosen[q]) for q in plan.quantiles),
        rank_errors=plan.rank_errors(),
        epsilon=float(plan.epsilon),
        rounds=plan.rounds,
        secure=source.secure,
    )


def refine_grid(grid: Grid, cells: Sequence[int], points_per_cell: int) -> Grid:
    """The fine grid of the coarse-to-fine option: ``points_per_cell`` points in each cell.

    Cell ``j`` is ``[points[j], points[j+1]]``; its points are log-spaced on a log grid and
    evenly spaced otherwise, both ends included. The union is sorted; the clamping bounds stay
    those of ``grid``. Public: a function of public parameters and of the coarse cells (which
    are already private outputs).
    """
    check_positive_int(points_per_cell, "refine_points")
    if points_per_cell < 2:
        raise ValueError(f"'refine_points' must be >= 2; received {points_per_cell}")
    p = grid.points
    pieces = []
    for j in sorted(set(int(i) for i in cells)):
        if not 0 <= j < p.size - 1:
            raise ValueError(f"cell {j} is outside the grid's {p.size - 1} cells")
        a, b = float(p[j]), float(p[j + 1])
        if grid.kind == "log":
            piece = np.geomspace(a, b, points_per_cell)
        else:
            piece = np.linspace(a, b, points_per_cell)
        piece[0], piece[-1] = a, b
        pieces.append(piece)
    points = np.unique(np.concatenate(pieces))
    if points.size > MAX_GRID_POINTS:
        raise ValueError(
            f"the refined grid would have {points.size} points (more than {MAX_GRID_POINTS:,}); "
            "lower 'refine_points'"
        )
    return Grid.explicit(points, grid.lower, grid.upper)


def combine_passes(coarse: CellSelection, fine: QuantileSelection) -> QuantileSelection:
    """The accuracy of a coarse-to-fine release: the fine outputs, both passes' losses.

    If a quantile's coarse cell holds it, the fine pass alone bounds its rank error
    (``fine_rank_error``); otherwise the quantile is within the cell's rank distance of the
    cell's nearer end, a fine grid point, which adds the coarse loss: ``rank_error`` is the sum.
    """
    return QuantileSelection(
        values=fine.values,
        indices=fine.indices,
        rank_errors=tuple(a + b for a, b in zip(coarse.rank_errors, fine.rank_errors, strict=True)),
        cell_width=fine.cell_width,
        score_loss=fine.score_loss,
        sensitivity=fine.sensitivity,
        epsilon=coarse.epsilon + fine.epsilon,
        rounds=fine.rounds,
        num_candidates=fine.num_candidates,
        secure=coarse.secure and fine.secure,
        fine_rank_error=fine.rank_error,
    )


# ----------------------------------------------------------------------------------- mean


@dataclass(frozen=True)
class MeanPlan:
    """Parameters of a private mean (fixed before any data is read). See :func:`plan_mean`."""

    grid: Grid
    epsilon: Fraction
    relation: Relation
    n: int | None
    max_contributions: int
    max_partitions: int
    method: Method
    confidence: float
    sensitivity: Fraction
    score_loss: float


def plan_mean(
    grid: Grid,
    *,
    epsilon: float | Fraction,
    relation: str = "add_remove",
    n: int | None = None,
    max_contributions: int = 1,
    max_partitions: int = 1,
    method: str = "permute_and_flip",
    confidence: float = 0.95,
) -> MeanPlan:
    """Validate the parameters of a private mean over ``grid`` (see the module docstring).

    Args:
        n: the public number of values; required with ``relation="replace"`` and refused
            with ``"add_remove"`` (where the number of values is private).
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"'grid' must be a Grid; received type {type(grid).__name__}")
    eps = _epsilon_fraction(epsilon)
    rel = check_relation(relation)
    check_positive_int(max_contributions, "max_contributions")
    check_positive_int(max_partitions, "max_partitions")
    chosen_method = _check_method(method)
    check_probability_open(confidence, "confidence")
    width = Fraction(grid.upper) - Fraction(grid.lower)
    k = int(max_contributions) * int(max_partitions)
    if rel == "replace":
        if n is None:
            raise ValueError(
                "'n' (the public number of values) is required with relation='replace'"
            )
        check_positive_int(n, "n")
        sensitivity = k * width / int(n)
    else:
        if n is not None:
            raise ValueError(
                "'n' is only used with relation='replace'; under 'add_remove' the number of "
                "values is private and the mean uses the utility -|sum(x) - N r| instead"
            )
        sensitivity = k * width
    loss = score_loss_bound(
        grid.num_points,
        epsilon=float(eps),
        sensitivity=float(sensitivity),
        confidence=float(confidence),
    )
    return MeanPlan(
        grid=grid,
        epsilon=eps,
        relation=rel,
        n=None if n is None else int(n),
        max_contributions=int(max_contributions),
        max_partitions=int(max_partitions),
        method=chosen_method,
        confidence=float(confidence),
        sensitivity=sensitivity,
        score_loss=loss,
    )


@dataclass(frozen=True)
class MeanSelection:
    """The outcome of :func:`select_mean`."""

    value: float
    index: int
    score_loss: float
    cell_width: float
    sensitivity: float
    epsilon: float
    num_candidates: int
    secure: bool


#: Integer mean scores are capped at ``-_STEP_CAP``: a public floor that keeps them in int64
#: whatever the number of values (see :func:`_sum_deviation_scores`).
_STEP_CAP = 2**62 - 1


def _sum_deviation_scores(
    total: Fraction, count: int, grid: Grid, unit: Fraction
) -> npt.NDArray[np.int64]:
    """``max(floor(-|total - count * r| / unit), -_STEP_CAP)`` for every grid point, exactly.

    The cap is public and ``s -> max(s, -cap)`` is 1-Lipschitz, so it keeps the sensitivity of
    the scores; it only matters beyond ``2**46`` values (``2**62`` steps of ``unit``), and it
    makes the scores fit in int64 whatever the data, instead of an error that would depend on
    the (private) number of values.
    """
    points = [Fraction(float(p)) for p in grid.points]
    denominator = max(point.denominator for point in points)  # powers of two
    numerators = np.array(
        [point.numerator * (denominator // point.denominator) for point in points], dtype=object
    )
    # |total - count r| / unit = |t_num D - count t_den r_num| * u_den / (t_den D u_num)
    distance = np.abs(total.numerator * denominator - (count * total.denominator) * numerators)
    numerator = distance * unit.denominator
    divisor = total.denominator * denominator * unit.numerator
    steps = -((-numerator) // divisor)  # ceil
    return np.array([-min(int(step), _STEP_CAP) for step in steps.tolist()], dtype=np.int64)


def select_mean(
    summary: ExactSum,
    plan: MeanPlan,
    *,
    rng: RandomSource | np.random.Generator | None = None,
) -> MeanSelection:
    """The private mean of the summarised values (see :func:`plan_mean`).

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation``: ``replace`` uses
        :class:`~beam_dp.scores.MeanScore` (the centred sum over the public ``n``, which is
        the mean when ``n`` values are kept; sensitivity ``k (upper - lower) / n``),
        ``add_remove`` the utility ``-|sum(x) - N r|`` (sensitivity ``k (upper - lower)``).
        Only a grid point is released. Nothing here depends on the data's count being anything
        in particular: a release never fails because of the data.
    """
    if not isinstance(summary, ExactSum):
        raise TypeError(f"'summary' must be an ExactSum; received {type(summary).__name__}")
    grid = plan.grid
    if (summary.lower, summary.upper) != (grid.lower, grid.upper):
        raise ValueError("the summary's clamping bounds differ from the grid's")
    source = as_random_source(rng)
    if plan.relation == "replace":
        assert plan.n is not None
        score = MeanScore(
            grid=grid.points,
            lower=grid.lower,
            upper=grid.upper,
            n=plan.n,
            max_contributions=plan.max_contributions,
            resolution=MEAN_RESOLUTION,
        )
        scores = score.compute_from_sum(summary.total, summary.count)
        sensitivity: Fraction = score.scaled_sensitivity("replace") * plan.max_partitions
    else:
        width = Fraction(grid.upper) - Fraction(grid.lower)
        unit = plan.max_contributions * width / MEAN_RESOLUTION
        scores = _sum_deviation_scores(summary.total, summary.count, grid, unit)
        sensitivity = Fraction(MEAN_RESOLUTION * plan.max_partitions)
    index = select(
        scores,
        epsilon=plan.epsilon,
        sensitivity=sensitivity,
        monotonic=False,
        method=plan.method,
        rng=source,
    )
    return MeanSelection(
        value=float(grid.points[index]),
        index=int(index),
        score_loss=plan.score_loss,
        cell_width=grid.cell_width(int(index)),
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        num_candidates=grid.num_points,
        secure=source.secure,
    )
