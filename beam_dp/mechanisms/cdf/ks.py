"""Exact sampling of Wasserman and Zhou's KS synthetic sample on a public grid (seed 004).

**The mechanism.** A public grid ``g_0 < ... < g_{m-1}``; the data enter only through
``N_i = #(x <= g_i)`` after the public input rule (clamped to the bounds, a value strictly
between two grid points counted at the upper one, so ``N_{m-1} = n``). A release is a multiset
``z`` of ``k`` grid points, written as its path ``C_i = #(z <= g_i)``,
``0 <= C_0 <= ... <= C_{m-1} = k``. With a normaliser ``n̂`` (the public ``n`` under
``replace``; a public or separately released count under ``add_remove``) the utility is

    ``u(x, z) = -max_i |N_i / n̂ - C_i / k|``  (``i < m - 1``),

the KS distance between the two step CDFs (both jump only at grid points, so the supremum
over the real line is the maximum over grid points; the last point is always ``1 = 1``
under ``replace`` and is left out under ``add_remove``, where it would only add the same
constant ``|n - n̂| / n̂`` floor to every candidate). Scaled by ``k n̂`` it is an integer:

    ``score(z) = -D(z)``, ``D(z) = max_i |k N_i - n̂ C_i|``.

**Sensitivity.** A privacy unit with at most ``c`` records (``max_contributions``) changes
every ``N_i`` by at most ``c``, under ``replace`` (its records move, ``n`` stays) and under
``add_remove`` (its records appear or vanish; ``n̂`` is fixed). So every ``|k N_i - n̂ C_i|``,
and their maximum, moves by at most ``Δ = c k``; in KS units that is ``c / n̂`` (``1/n`` for
``c = 1``, the seed's ``Δ_u = 1/n``). The score is not monotone (one candidate gains where
another loses), so the exponential mechanism uses ``exp(-ε D / (2Δ))``, ``γ = ε / (2 c k)``:

    ``P(z) ∝ exp(-γ D(z))``,  ε-DP for the relation ``Δ`` was derived for.

Under ``add_remove`` the pair (``n̂``, ``z``) is ``(ε_count + ε)``-DP by composition when ``n̂``
is itself a release; that is the caller's share of the budget.

**Base measure: multisets.** Each multiset (path) is one candidate, so the base measure is
uniform on the ``|R| = C(m + k - 1, k)`` paths. Ordered vectors would weight a multiset by
``k! / prod_i (multiplicity_i)!``, a data-independent but strong bias against ties (a point
mass of ``k`` points is ``k!`` times less likely than ``k`` distinct points at the same score),
and ``|R|`` would grow to ``m**k``, loosening the guarantee. The order of the synthetic points
carries no information, so nothing is lost.

**Exact sampling.** Let ``A(s)`` be the number of paths with ``D <= s`` (a dynamic program,
:mod:`.bands`). Since ``exp(-γ D) = (1 - e**-γ) sum_{s >= D} e**(-γ s)``, the law of the path
is the marginal of the joint law ``P(path, s) ∝ e**(-γ s) [D(path) <= s]`` over integers ``s``,
whose ``s``-marginal is ``∝ A(s) e**(-γ s)`` and whose path given ``s`` is uniform in the band
``D <= s``. The sampler partitions ``[D_min, ∞)`` into blocks ``[a, b)`` of levels, each with
an *envelope* ``Ā >= A(s)`` on the block: the exact count of a band ``ℓ >= b - 1`` (the last
block, ``b = ∞``, uses all ``|R|`` paths). One round:

1. choose a block with probability ``∝ Ā e**(-γ (a - D_min)) (1 - e**(-γ (b - a)))``
   (exactly: :func:`.exact_reals.choose_index`, rigorous rational bounds on the exponentials);
2. a uniform path of the band ``ℓ`` (``Ā`` paths);
3. ``s = a + G`` with ``P(G = g) ∝ e**(-γ g)`` on ``[0, b - a)`` (exact coins; not drawn when
   ``D(path) <= a``, since then every ``s`` qualifies);
4. return the path if ``D(path) <= s``, else start a new round.

A round returns (path, s) with probability ``∝ Ā e**(-γ s) / Ā [D(path) <= s]`` for every
``s >= D_min``, the joint law above, so the result is exact whatever the blocks. A round
succeeds with probability ``sum_s A(s) e**(-γ s) / sum_blocks Ā ...`` > 0 (the first block
contains ``s = D_min`` with ``A >= 1``), so the loop ends with probability 1 after a geometric
number of rounds. How the blocks are chosen (:func:`_plan`) affects only the cost: starting
where ``A(s) e**(-γ s)`` peaks, blocks grow while the envelope stays within ``e**3`` of the
smallest count inside the block (so a round succeeds with probability about 1/4 or more), and
the remainders below and above become single blocks once their total proposal weight is below
1/1000 of the rest (an exact bound for the top: ``|R|``). A block between two consecutive
breakpoints has ``Ā = A(s)`` exactly.

**Accuracy** (Dwork-Roth Thm 3.11): ``P[D(z) >= D_min + 2Δ (ln|R| + t) / ε] <= e**-t``, and
``D_min <= n̂ / 2`` when every ``N_i <= n̂`` (round ``k N_i / n̂`` to the nearest integer), so
with probability ``>= 1 - e**-t`` the KS distance to ``N / n̂`` is at most
``1 / (2k) + 2c (ln C(m + k - 1, k) + t) / (ε n̂)`` (:func:`ks_accuracy_bound`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral
from typing import Any

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
from beam_dp.mechanisms.cdf.bands import (
    Bands,
    Tables,
    path_from_points,
    points_from_path,
    uniform_multiset,
)
from beam_dp.mechanisms.cdf.exact_reals import (
    IndexSampler,
    exp_neg_bounds,
    one_minus_exp_neg_bounds,
    truncated_geometric,
)
from beam_dp.mechanisms.randomness import RandomSource, as_random_source

#: The largest ``m * (k + 1)`` accepted: the number of (grid point, count) cells.
MAX_CELLS = 1 << 24


# ---------------------------------------------------------------------------- parameters


def _check_counts(cumulative_counts: Sequence[int] | npt.ArrayLike) -> tuple[int, ...]:
    if isinstance(cumulative_counts, (str, bytes)):
        raise TypeError("'cumulative_counts' must be a sequence of integers")
    if isinstance(cumulative_counts, (list, tuple)) and any(
        isinstance(v, (bool, np.bool_)) for v in cumulative_counts
    ):
        raise TypeError("'cumulative_counts' must hold integers (not booleans)")
    array = np.asarray(cumulative_counts)
    if array.ndim != 1 or array.size < 1:
        raise ValueError("'cumulative_counts' must be one-dimensional with at least one entry")
    if array.dtype == object:
        values = array.tolist()
        if any(isinstance(v, bool) or not isinstance(v, Integral) for v in values):
            raise TypeError("'cumulative_counts' must hold integers")
        counts = tuple(int(v) for v in values)
    elif np.issubdtype(array.dtype, np.integer):
        counts = tuple(int(v) for v in array.tolist())
    else:
        raise TypeError("'cumulative_counts' must hold integers")
    if counts[0] < 0 or any(b < a for a, b in itertools.pairwise(counts)):
        raise ValueError("'cumulative_counts' must be non-negative and non-decreasing")
    return counts


def _check_count_parameter(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"'{name}' must be an integer; received type {type(value).__name__}")
    if int(value) < 0:
        raise ValueError(f"'{name}' must be an integer >= 0; received {value!r}")
    return int(value)


@dataclass(frozen=True)
class KSMechanism:
    """The validated public parameters of one KS synthetic-sample release.

    Construction validates every field (the error names the parameter and the rule) and
    stores ``epsilon`` as the exact rational its float denotes.

    Attributes:
        k: the number of synthetic points (>= 1).
        epsilon: the privacy parameter, as the exact rational its float denotes.
        relation: ``"add_remove"`` or ``"replace"``.
        n_public: the public normaliser ``n̂`` (required under ``add_remove``; under
            ``replace`` the dataset size is public and this is None or equal to it).
        max_contributions: the bound ``c`` on records per privacy unit that the pipeline
            enforces.
    """

    k: int
    epsilon: Fraction
    relation: Relation = "add_remove"
    n_public: int | None = None
    max_contributions: int = 1

    def __post_init__(self) -> None:
        check_positive_int(self.k, "k")
        check_positive_finite(self.epsilon, "epsilon")
        chosen = check_relation(self.relation)
        check_positive_int(self.max_contributions, "max_contributions")
        normaliser = self.n_public
        if normaliser is not None:
            normaliser = _check_count_parameter(normaliser, "n_public")
        if chosen == "add_remove" and normaliser is None:
            raise ValueError(
                "'n_public' is required under relation 'add_remove' (the dataset size is "
                "private): pass a public count or one released with its own share of epsilon"
            )
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "epsilon", to_fraction(self.epsilon, "epsilon"))
        object.__setattr__(self, "relation", chosen)
        object.__setattr__(self, "n_public", normaliser)
        object.__setattr__(self, "max_contributions", int(self.max_contributions))

    @property
    def sensitivity(self) -> int:
        """``Δ = c k`` in the integer units of :func:`ks_deviation`."""
        return self.max_contributions * self.k

    @property
    def gamma(self) -> Fraction:
        """``γ = ε / (2Δ)``: ``P(z) ∝ exp(-γ D(z))``."""
        return self.epsilon / (2 * self.sensitivity)

    def normaliser(self, counts: Sequence[int]) -> int:
        """``n̂``: the dataset size under ``replace``, ``n_public`` under ``add_remove``."""
        if self.relation == "replace":
            if self.n_public is not None and self.n_public != counts[-1]:
                raise ValueError(
                    "'n_public' must be None or the dataset size under relation 'replace' "
                    "(the last cumulative count)"
                )
            return counts[-1]
        assert self.n_public is not None  # create() guarantees it
        return self.n_public


def _mechanism(
    k: int,
    epsilon: float | Fraction,
    relation: str,
    n_public: int | None,
    max_contributions: int,
) -> KSMechanism:
    return KSMechanism(
        k=k,
        epsilon=epsilon,  # type: ignore[arg-type]  # converted to a Fraction on validation
        relation=relation,  # type: ignore[arg-type]  # checked on validation
        n_public=n_public,
        max_contributions=max_contributions,
    )


def _check_size(num_points: int, k: int) -> None:
    if num_points * (k + 1) > MAX_CELLS:
        raise ValueError(
            f"the grid size times (k + 1) must be at most {MAX_CELLS:,}; received "
            f"{num_points:,} points and k = {k:,} (use a coarser grid or fewer points)"
        )


# ---------------------------------------------------------------------------- scores


def ks_deviation(
    cumulative_counts: Sequence[int] | npt.ArrayLike, points: Sequence[int], *, k: int, n_hat: int
) -> int:
    """``D(z) = max_{i < m-1} |k N_i - n̂ C_i|``: the integer score is ``-D``.

    ``D / (k n̂)`` is the KS distance between ``N / n̂`` and the step CDF of ``points``
    (grid indices) over the grid points but the last.
    """
    counts = _check_counts(cumulative_counts)
    path = path_from_points(points, len(counts))
    pairs = zip(counts[:-1], path[:-1], strict=True)
    return max((abs(k * n - n_hat * c) for n, c in pairs), default=0)


def cumulative_counts_from_slots(slot_counts: npt.ArrayLike) -> tuple[int, ...]:
    """``N_i = #(x <= g_i)`` from a grid histogram's ``2d + 1`` slot counts.

    Values below the first grid point count at it, values strictly inside cell ``i`` count at
    grid point ``i + 1`` and values above the last grid point at the last (the public rule
    that snaps a value up to the grid), so ``N_{d-1}`` is the total.
    """
    array = np.asarray(slot_counts, dtype=np.int64)
    if array.ndim != 1 or array.size % 2 != 1 or array.size < 3:
        raise ValueError("'slot_counts' must be one-dimensional with an odd length 2d + 1 >= 3")
    if np.any(array < 0):
        raise ValueError("'slot_counts' must be non-negative")
    cumulative = [int(v) for v in np.cumsum(array).tolist()]
    out = cumulative[1:-2:2]  # cumulative[2i + 1] for i < d - 1
    out.append(cumulative[-1])
    return tuple(out)


# ---------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class _PlanOptions:
    """Cost knobs of the planner; they never change the law of a release."""

    max_growth: float = 3.0  # a block's envelope may exceed its smallest count by e**this
    min_growth: float = 1.0  # below this, the next block's stride doubles
    negligible: float = 1e-3  # remainders with less proposal weight than this share close
    max_counts: int = 4000  # band counts per release before the remainders close regardless


@dataclass(frozen=True)
class _Block:
    top: int  # index of the breakpoint whose band gives the envelope
    level: int  # that breakpoint: the band of the envelope
    start: int  # first level of the block
    end: int | None  # one past the last level (None: unbounded)
    count: int  # the envelope: A(breakpoints[top]), or |R| for the last block
    everything: bool  # the envelope is the set of all paths


def _log_int(value: int) -> float:
    if value <= 0:
        return -math.inf
    bits = value.bit_length()
    if bits <= 1000:
        return math.log(value)
    return math.log(value >> (bits - 64)) + (bits - 64) * math.log(2)


@dataclass
class _Plan:
    bands: Bands
    breakpoints: npt.NDArray[Any]
    gamma: Fraction
    options: _PlanOptions
    counts: dict[int, int] = field(default_factory=dict)

    @property
    def last(self) -> int:
        return len(self.breakpoints) - 1

    def level(self, index: int) -> int:
        return int(self.breakpoints[index])

    def count(self, index: int) -> int:
        if index == self.last:
            return self.bands.total()
        if index not in self.counts:
            self.counts[index] = self.bands.count(self.level(index))
        return self.counts[index]

    def exhausted(self) -> bool:
        return len(self.counts) >= self.options.max_counts

    def log_weight(self, top: int, start_index: int) -> float:
        """ln of the proposal weight of the block (start_index - 1, top] (floats: planning)."""
        gamma = float(self.gamma)
        start = self.level(start_index)
        head = _log_int(self.count(top)) - gamma * (start - self.level(0))
        if top == self.last:
            return head
        width = self.level(top + 1) - start
        return head + math.log(-math.expm1(-gamma * width))


def _log_add(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high))


def _find_peak(plan: _Plan) -> int:
    """A breakpoint index near the largest ``A(s) e**(-γ s)`` (exponential search)."""
    gamma = float(plan.gamma)
    best, best_value = 0, -math.inf
    index, step = 0, 1
    while index < plan.last:
        value = _log_int(plan.count(index)) - gamma * (plan.level(index) - plan.level(0))
        if value > best_value:
            best, best_value = index, value
        elif value < best_value - 40 or plan.exhausted():
            break
        index += step
        step *= 2
    return best


def _plan(bands: Bands, gamma: Fraction, options: _PlanOptions) -> tuple[int, list[_Block], int]:
    """Minimum deviation, the blocks partitioning ``[D_min, ∞)`` (see the module doc) and the
    number of band counts the planning took."""
    every = bands.breakpoints()
    minimum = bands.min_deviation(every)
    breakpoints = every[np.searchsorted(every, minimum) :]
    plan = _Plan(bands, breakpoints, gamma, options)
    last = plan.last
    peak = _find_peak(plan)
    tops = [peak]
    log_total = -math.inf
    growth_cap, growth_floor = options.max_growth, options.min_growth
    log_negligible = math.log(options.negligible)

    # Upwards from the peak: tops peak < u_1 < ... < last.
    upper, stride = peak, 1
    while upper < last:
        tail = plan.log_weight(last, upper + 1)
        if tail <= log_total + log_negligible or plan.exhausted():
            tops.append(last)
            log_total = _log_add(log_total, tail)
            break
        candidate = min(upper + stride, last)
        growth = _log_int(plan.count(candidate)) - _log_int(plan.count(upper))
        if growth > growth_cap and candidate - upper > 1:
            stride = max(1, (candidate - upper) // 2)
            continue
        log_total = _log_add(log_total, plan.log_weight(candidate, upper + 1))
        tops.append(candidate)
        stride = 2 * (candidate - upper) if growth < growth_floor else candidate - upper
        upper = candidate

    # Downwards from the peak: tops ... < d_1 < peak; the lowest block starts at D_min.
    lower, stride = peak, 1
    while lower > 0:
        candidate = lower - stride
        if candidate < 0 or plan.exhausted():
            break
        growth = _log_int(plan.count(lower)) - _log_int(plan.count(candidate))
        if growth > growth_cap and stride > 1:
            stride //= 2
            continue
        log_total = _log_add(log_total, plan.log_weight(lower, candidate + 1))
        tops.append(candidate)
        stride = 2 * stride if growth < growth_floor else stride
        lower = candidate
        if plan.log_weight(candidate, 0) <= log_total + log_negligible:
            break

    tops = sorted(set(tops))
    blocks: list[_Block] = []
    previous = -1
    for top in tops:
        start = plan.level(previous + 1)
        end = None if top == last else plan.level(top + 1)
        blocks.append(_Block(top, plan.level(top), start, end, plan.count(top), top == last))
        previous = top
    return minimum, blocks, len(plan.counts)


# ---------------------------------------------------------------------------- sampling


class _Sampler:
    """A planned sampler for one dataset and one set of parameters (tests draw many)."""

    def __init__(
        self,
        counts: Sequence[int],
        mechanism: KSMechanism,
        options: _PlanOptions | None = None,
    ):
        self.num_points = len(counts)
        self.k = mechanism.k
        self.gamma = mechanism.gamma
        self.scale = mechanism.normaliser(counts)
        self.trivial = self.num_points == 1 or self.scale == 0
        self.bands = Bands([self.k * n for n in counts[:-1]], max(self.scale, 1), self.k)
        self.blocks: list[_Block] = []
        self.minimum = 0
        self.band_counts = 0
        self._tables: dict[int, Tables] = {}
        self._bounds: dict[int, list[tuple[Fraction, Fraction]]] = {}
        if not self.trivial:
            self.minimum, self.blocks, self.band_counts = _plan(
                self.bands, self.gamma, options or _PlanOptions()
            )
        self._chooser = IndexSampler(self._weight_bounds)

    def _weight_bounds(self, bits: int) -> list[tuple[Fraction, Fraction]]:
        if bits not in self._bounds:
            out = []
            for block in self.blocks:
                low, high = exp_neg_bounds(self.gamma * (block.start - self.minimum), bits + 4)
                if block.end is not None:
                    f_low, f_high = one_minus_exp_neg_bounds(
                        self.gamma * (block.end - block.start), bits + 4
                    )
                    low, high = low * f_low, high * f_high
                out.append((block.count * low, block.count * high))
            self._bounds[bits] = out
        return self._bounds[bits]

    def _uniform_path(self, block: _Block, source: RandomSource) -> list[int]:
        if block.everything:
            points = uniform_multiset(self.num_points, self.k, source)
            return path_from_points(points, self.num_points)
        if block.level not in self._tables:
            if len(self._tables) >= _CACHED_TABLES:
                self._tables.clear()
            self._tables[block.level] = self.bands.tables(block.level)
        return self.bands.uniform_path(self._tables[block.level], source)

    def draw(self, source: RandomSource) -> list[int]:
        """One exact draw of the path (``C_0..C_{m-1}``)."""
        if self.trivial:  # every candidate has the same score
            points = uniform_multiset(self.num_points, self.k, source)
            return path_from_points(points, self.num_points)
        while True:
            block = self.blocks[self._chooser.sample(source)]
            path = self._uniform_path(block, source)
            # Accept iff s >= D(path), s = start + G, G the truncated geometric offset. When
            # D <= start every s qualifies; only otherwise is G drawn (it is independent of the
            # path, so drawing it after the path, or not at all, leaves the law unchanged).
            excess = self.bands.deviation(path) - block.start
            if excess <= 0:
                return path
            width = None if block.end is None else block.end - block.start
            if truncated_geometric(self.gamma, width, source) >= excess:
                return path


_CACHED_TABLES = 4


# ---------------------------------------------------------------------------- public API


def sample_ks_synthetic(
    cumulative_counts: Sequence[int] | npt.ArrayLike,
    *,
    k: int,
    epsilon: float | Fraction,
    relation: str = "add_remove",
    n_public: int | None = None,
    max_contributions: int = 1,
    rng: RandomSource | np.random.Generator | None = None,
) -> tuple[int, ...]:
    """Release ``k`` synthetic points whose step CDF is close to the data's, exactly.

    Args:
        cumulative_counts: ``N_i = #(x <= g_i)`` for every grid point ``g_0 < ... < g_{m-1}``
            after the public input rule (:func:`cumulative_counts_from_slots` builds it from
            a grid histogram); the last entry is the dataset size.
        k: the number of synthetic points (>= 1).
        epsilon: the privacy parameter spent (> 0, finite).
        relation: ``"add_remove"`` (default) or ``"replace"``.
        n_public: the normaliser ``n̂``. Required under ``add_remove`` (a public size or one
            released with its own share of epsilon, e.g. an exact discrete Laplace count
            clamped at 0); under ``replace`` the dataset size is public and used.
        max_contributions: the number of records per privacy unit the pipeline enforces.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests (it warns).

    Returns:
        The ``k`` grid indices of the synthetic points, sorted (repeats allowed).

    Privacy:
        ε-DP under ``relation`` with at most ``max_contributions`` records per unit: the
        exponential mechanism ``P(z) ∝ exp(-ε D(z) / (2 c k))`` over the ``C(m + k - 1, k)``
        multisets, with ``D`` of :func:`ks_deviation` (sensitivity ``c k``), sampled exactly
        (module docstring). Under ``add_remove`` the normaliser is taken as public: if it is
        a release, its epsilon adds up. Only the points are released.

    Raises:
        ValueError, TypeError: a parameter breaks its rule (named in the message); the
            message never contains a count.
    """
    mechanism = _mechanism(k, epsilon, relation, n_public, max_contributions)
    counts = _check_counts(cumulative_counts)
    _check_size(len(counts), mechanism.k)
    source = as_random_source(rng)
    return points_from_path(_Sampler(counts, mechanism).draw(source))


def ks_pmf_bruteforce(
    cumulative_counts: Sequence[int] | npt.ArrayLike,
    *,
    k: int,
    epsilon: float | Fraction,
    relation: str = "add_remove",
    n_public: int | None = None,
    max_contributions: int = 1,
) -> dict[tuple[int, ...], float]:
    """The exact law of :func:`sample_ks_synthetic`, by listing every multiset (small only).

    The deviation of each multiset is computed from the definition, independently of the
    sampler's dynamic program; probabilities are floats (for tests, never for sampling).

    Returns:
        ``{sorted grid indices: probability}`` over all ``C(m + k - 1, k)`` multisets.
    """
    mechanism = _mechanism(k, epsilon, relation, n_public, max_contributions)
    counts = _check_counts(cumulative_counts)
    m = len(counts)
    if math.comb(m + mechanism.k - 1, mechanism.k) > 200_000:
        raise ValueError("'ks_pmf_bruteforce' lists every multiset: keep C(m + k - 1, k) small")
    scale = mechanism.normaliser(counts)
    gamma = float(mechanism.gamma)
    deviations: dict[tuple[int, ...], int] = {}
    for points in itertools.combinations_with_replacement(range(m), mechanism.k):
        worst = 0
        for i in range(m - 1):
            below = sum(1 for p in points if p <= i)
            worst = max(worst, abs(mechanism.k * counts[i] - scale * below))
        deviations[points] = worst
    low = min(deviations.values())
    weights = {z: math.exp(-gamma * (d - low)) for z, d in deviations.items()}
    total = math.fsum(weights.values())
    return {z: w / total for z, w in weights.items()}


def ks_accuracy_bound(
    num_points: int,
    k: int,
    *,
    epsilon: float,
    n: int,
    confidence: float = 0.95,
    max_contributions: int = 1,
    count_error: int = 0,
) -> float:
    """A bound on the KS distance of a release to the data's empirical CDF, at ``confidence``.

    ``1/(2k) + 2 e / n + 2c (ln C(m + k - 1, k) + t) / (ε n)`` with ``t = -ln(1 - confidence)``,
    capped at 1. ``n`` is the normaliser ``n̂`` the release used, ``e`` a bound on
    ``|n - n̂|`` (0 under ``replace``; under ``add_remove`` with a released count, the count's
    own error bound, whose failure probability the caller adds to ``1 - confidence``).

    Derivation: the best path rounds ``k N_i / n̂`` to the nearest integer (clamped to
    ``[0, k]``), so it is within ``1/(2k) + e/n̂`` of ``N / n̂``; the exponential mechanism
    loses at most ``2Δ(ln|R| + t)/ε`` (``Δ = c k`` in units of ``1/(k n̂)``) with probability
    ``>= 1 - e**-t``; and ``|N_i/n - N_i/n̂| <= e/n̂``. The distance is over grid points, which
    for step CDFs on the grid is the supremum over the real line (the grid's own resolution
    is public and not included).
    """
    check_positive_int(num_points, "num_points")
    check_positive_int(k, "k")
    check_positive_finite(epsilon, "epsilon")
    check_probability_open(confidence, "confidence")
    check_positive_int(max_contributions, "max_contributions")
    size = _check_count_parameter(n, "n")
    error = _check_count_parameter(count_error, "count_error")
    if size == 0:
        return 1.0
    log_candidates = math.lgamma(num_points + k) - math.lgamma(k + 1) - math.lgamma(num_points)
    t = -math.log1p(-float(confidence))
    loss = 2 * max_contributions * (log_candidates + t) / (float(epsilon) * size)
    return min(1.0, 1 / (2 * k) + 2 * error / size + loss)


def ks_suggested_k(
    num_points: int,
    *,
    epsilon: float,
    n: int,
    confidence: float = 0.95,
    max_contributions: int = 1,
    count_error: int = 0,
    max_k: int | None = None,
) -> int:
    """The ``k`` that minimises :func:`ks_accuracy_bound` (from public quantities only).

    A larger ``k`` shrinks the rounding term ``1/(2k)`` and grows the privacy term through
    ``ln C(m + k - 1, k)``; for ``k << m`` the best ``k`` is about
    ``sqrt(ε n / (4 c ln(e m / k)))``. ``n`` must be public: the dataset size under
    ``replace``, the released count under ``add_remove``. ``max_k`` defaults to the largest
    ``k`` with ``m (k + 1) <= MAX_CELLS``.

    Returns:
        The smallest minimiser in ``[1, max_k]`` (1 when ``n`` is 0).
    """
    check_positive_int(num_points, "num_points")
    cap = MAX_CELLS // num_points - 1 if max_k is None else max_k
    check_positive_int(cap, "max_k")
    _check_size(num_points, cap)
    best_k, best = 1, math.inf
    for k in range(1, cap + 1):
        bound = ks_accuracy_bound(
            num_points,
            k,
            epsilon=epsilon,
            n=n,
            confidence=confidence,
            max_contributions=max_contributions,
            count_error=count_error,
        )
        if bound < best:
            best_k, best = k, bound
        elif bound - 1 / (2 * k) >= best:
            break  # the rest grows with k (ln C(m + k - 1, k) does): no larger k can win
    return best_k
