"""Exact sampling of Wasserman and Zhou's KS synthetic sample on a public grid.

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
   (exactly: :class:`.exact_reals.IndexSampler`, rigorous rational bounds on the
   exponentials);
2. ``s = a + G`` with ``P(G = g) ∝ e**(-γ g)`` on ``[0, b - a)`` (a geometric modulo the
   width, :func:`.exact_reals.truncated_geometric`);
3. count ``A(s)`` and accept with probability ``A(s) / Ā`` (:func:`.exact_reals.bernoulli_ratio`;
   a uniform path of the envelope's band lies in the band of ``s`` with exactly that
   probability).

A round accepts ``(block, s)`` with probability ``∝ Ā e**(-γ s) A(s) / Ā = A(s) e**(-γ s)``:
the ``s``-marginal above, whatever the blocks. The accepted ``s`` gets a uniform path of its
band (one more dynamic program, with tables). Rounds are i.i.d., so the first accepted one
has this law whatever rounds come after it; a round succeeds with probability
``p = sum_s A(s) e**(-γ s) / sum_blocks Ā ... > 0``, so the loop ends with probability 1.
How the blocks are chosen (:func:`.plan.plan`) affects only ``p``.

**Running time fixed by public values** (measured on a reported D and D', one person
apart, the old planner ran 49 and 143 band counts and the job took twice as long). Every
piece of work is a function of public values (``m``, ``k``, ``ε``, ``c``, the relation, the
normaliser ``n̂``, the options), never of the counts:

* the minimum ``D_min``: a binary search of ``bit_length((m - 1)(k + 1))`` feasibility
  tests, each ``O(m)``;
* the plan: exactly ``band_counts`` band counts (:func:`.plan.default_band_counts`, from
  ``k``), at levels ``<= D_min + span`` with the public ``span`` of :func:`.plan.plan_span`;
* every band count (planning, rounds, tables): ``(m - 1) w`` cells with a public padded
  width ``w`` (``k + 1``, or less under a public bound on the levels: ``D_min <= ceil(n̂ / 2)``
  under ``replace``; a bound from the count's noise when :mod:`.release` releases ``n̂``),
  each cell an integer ``OFFSET + P`` whose bit length is public (:mod:`.bands`);
* every draw runs ``rounds`` rounds (``PlanOptions.rounds``, 32 by default): the rounds after
  the first accepted one are run in full and discarded; each round is one block choice, one
  geometric, one band count and one coin whose random bits have a law that depends on public
  values only;
* the block choice has a public number of entries (the blocks, padded with zero weights);
* the path: a descent of ``bit_length(k)`` exact coins per column.

What is left, all of small probability or small size, in ``docs/timing.md``: a draw that
needs more than ``rounds`` rounds (probability ``(1 - p)**rounds``, with ``p`` at least the
plan's ``acceptance_bound``: 0.6 or more on every dataset of the benchmark's panel, so
``1.2e-13`` at most there; no public lower bound on ``p`` is known for this sampler, whose
level law can spread over any range of band sizes; the extra rounds, one band count each,
are what would show), the last block proposed (at most
``2**-40`` per round; its band may be wider than the padding), a released count further from
``n`` than its ``2**-40`` bound (wider bands), the block choice needing a second 64-bit word
(about ``2**-55`` per round), and the arithmetic outside the dynamic programs (one planning
decision per band count, the rational bounds of the block weights, numpy's sort of the
breakpoints), whose cost varies a little with the values.

**Accuracy** (Dwork-Roth Thm 3.11): ``P[D(z) >= D_min + 2Δ (ln|R| + t) / ε] <= e**-t``, and
``D_min <= n̂ / 2`` when every ``N_i <= n̂`` (round ``k N_i / n̂`` to the nearest integer), so
with probability ``>= 1 - e**-t`` the KS distance to ``N / n̂`` is at most
``1 / (2k) + 2c (ln C(m + k - 1, k) + t) / (ε n̂)`` (:func:`.accuracy.ks_accuracy_bound`).

The release a pipeline returns (points, step CDF, quantiles, KS bound, and the noisy count
under ``add_remove``) is :func:`.release.release_ks_cdf`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf.bands import (
    Bands,
    padded_width,
    path_from_points,
    points_from_path,
    uniform_multiset,
)
from beam_dp.mechanisms.cdf.exact_reals import (
    BitStream,
    IndexSampler,
    bernoulli_ratio,
    exp_neg_bounds,
    geometric,
    geometric_many,
    one_minus_exp_neg_bounds,
)
from beam_dp.mechanisms.cdf.params import (
    KSMechanism,
    KSParameters,
    check_cumulative_counts,
    check_size,
    mechanism_from,
)
from beam_dp.mechanisms.cdf.plan import (
    Block,
    PlanOptions,
    default_band_counts,
    plan,
    plan_span,
)
from beam_dp.mechanisms.randomness import RandomSource, as_random_source

__all__ = [
    "Sampler",
    "Work",
    "cumulative_counts_from_slots",
    "ks_deviation",
    "ks_pmf_bruteforce",
    "sample_ks_synthetic",
]

# ---------------------------------------------------------------------------- scores


def ks_deviation(
    cumulative_counts: Sequence[int] | npt.ArrayLike, points: Sequence[int], *, k: int, n_hat: int
) -> int:
    """``D(z) = max_{i < m-1} |k N_i - n̂ C_i|``: the integer score is ``-D``.

    ``D / (k n̂)`` is the KS distance between ``N / n̂`` and the step CDF of ``points``
    (grid indices) over the grid points but the last.
    """
    counts = check_cumulative_counts(cumulative_counts)
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


# ---------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class Work:
    """What one :class:`Sampler` has done so far (an internal statistic: never released or
    logged). On neighbouring datasets with the same public parameters every field is equal,
    except in the event that a draw needs more than ``PlanOptions.rounds`` rounds: each extra
    round adds to ``rounds``, and its band count to ``band_counts`` and ``cells``.

    Attributes:
        feasibility_checks: steps of the search for ``D_min``.
        band_counts: dynamic programs run (planning, one per round, one table per draw).
        cells: cells those programs processed.
        tables: band tables built (one per draw).
        weights: entries of the block-choice distribution (the padded number of blocks).
        draws: draws made.
        rounds: rounds run over all draws.
    """

    feasibility_checks: int
    band_counts: int
    cells: int
    tables: int
    weights: int
    draws: int
    rounds: int


class Sampler:
    """A planned sampler for one dataset and one set of parameters (tests draw many).

    ``options`` change the cost, never the law (tests check several settings); every piece of
    work is fixed by public values (module docstring), which :attr:`work` lets tests check.
    """

    def __init__(
        self,
        counts: Sequence[int],
        mechanism: KSMechanism,
        options: PlanOptions | None = None,
    ):
        options = options or PlanOptions()
        self.num_points = len(counts)
        self.k = mechanism.k
        self.gamma = mechanism.gamma
        self.scale = mechanism.normaliser(counts)
        self.trivial = self.num_points == 1 or self.scale == 0
        self.rounds = options.rounds
        budget = options.band_counts or default_band_counts(self.k)
        self.span = plan_span(self.num_points - 1, self.k, self.gamma, options.tail_bits)
        bound = options.deviation_bound
        if bound is None and mechanism.relation == "replace":
            bound = (self.scale + 1) // 2  # every N_i <= n = n̂: round k N_i / n̂
        scale = max(self.scale, 1)
        width = padded_width(self.k, scale, None if bound is None else bound + self.span)
        self.bands = Bands([self.k * n for n in counts[:-1]], scale, self.k, width=width)
        self.blocks: list[Block] = []
        self.minimum = 0
        self.band_counts = 0
        self.acceptance_bound = 1.0
        self.exact = True
        self._levels: npt.NDArray[Any] = np.zeros(1, dtype=np.int64)
        self._slots = budget + 1  # blocks: one per counted top, and the last
        self._bounds: dict[int, list[tuple[Fraction, Fraction]]] = {}
        self._draws = 0
        self._rounds_run = 0
        if not self.trivial:
            planned = plan(self.bands, self.gamma, replace(options, band_counts=budget), self.span)
            self.minimum, self.blocks = planned.minimum, list(planned.blocks)
            self._levels = planned.levels
            self.band_counts = planned.band_counts
            self.acceptance_bound = planned.acceptance_bound
            self.exact = planned.exact
        self._chooser = IndexSampler(self._weight_bounds)

    @property
    def work(self) -> Work:
        """The work done so far (see :class:`Work`)."""
        counters = self.bands.counters
        return Work(
            feasibility_checks=counters.feasibility_checks,
            band_counts=counters.band_counts,
            cells=counters.cells,
            tables=counters.tables,
            weights=self._slots if not self.trivial else 0,
            draws=self._draws,
            rounds=self._rounds_run,
        )

    def _weight_bounds(self, bits: int) -> list[tuple[Fraction, Fraction]]:
        if bits not in self._bounds:
            out = []
            # Padded to the public number of slots: blocks that were never made (every block
            # was already exact) weigh 0 and cost the same bounds as the last block.
            for slot in range(self._slots):
                block = self.blocks[min(slot, len(self.blocks) - 1)]
                low, high = exp_neg_bounds(self.gamma * (block.start - self.minimum), bits + 4)
                if block.end is not None:
                    f_low, f_high = one_minus_exp_neg_bounds(
                        self.gamma * (block.end - block.start), bits + 4
                    )
                    low, high = low * f_low, high * f_high
                size = block.count if slot < len(self.blocks) else 0
                out.append((size * low, size * high))
            self._bounds[bits] = out
        return self._bounds[bits]

    def draw(self, source: RandomSource) -> list[int]:
        """One exact draw of the path (``C_0..C_{m-1}``), after at least ``rounds`` rounds."""
        self._draws += 1
        if self.trivial:  # every candidate has the same score
            points = uniform_multiset(self.num_points, self.k, source)
            return path_from_points(points, self.num_points)
        bits = BitStream(source)
        accepted: int | None = None
        done = 0
        offsets = geometric_many(self.gamma, self.rounds, source)
        choices = self._chooser.sample_many(self.rounds, source)
        while done < self.rounds or accepted is None:
            chosen = choices[done] if done < len(choices) else self._chooser.sample(source)
            block = self.blocks[chosen]
            # s = start + G, G ∝ e**(-γ g) on the block's width (a geometric modulo the width,
            # see truncated_geometric); the band of s is that of the largest breakpoint <= s
            # (A changes only at breakpoints).
            offset = offsets[done] if done < len(offsets) else geometric(self.gamma, source)
            if block.end is not None:
                offset %= block.end - block.start
            level = block.start + offset
            snapped = int(self._levels[np.searchsorted(self._levels, level, side="right") - 1])
            # Accept with probability A(s) / Ā: a uniform path of the envelope's band lies in
            # the band of s with exactly that probability.
            inside = self.bands.count(snapped)
            if bernoulli_ratio(inside, block.count, bits) and accepted is None:
                accepted = snapped
            done += 1
        self._rounds_run += done
        return self.bands.uniform_path(self.bands.tables(accepted), bits)


# ---------------------------------------------------------------------------- public API


def sample_ks_synthetic(
    cumulative_counts: Sequence[int] | npt.ArrayLike,
    *,
    rng: RandomSource | np.random.Generator | None = None,
    **parameters: Unpack[KSParameters],
) -> tuple[int, ...]:
    """Release ``k`` synthetic points whose step CDF is close to the data's, exactly.

    Args:
        cumulative_counts: ``N_i = #(x <= g_i)`` for every grid point ``g_0 < ... < g_{m-1}``
            after the public input rule (:func:`cumulative_counts_from_slots` builds it from
            a grid histogram); the last entry is the dataset size.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests (it warns).
        **parameters: :class:`~beam_dp.mechanisms.cdf.params.KSParameters`:

            * ``k``: the number of synthetic points (>= 1);
            * ``epsilon``: the privacy parameter spent (> 0, finite);
            * ``relation``: ``"add_remove"`` (default) or ``"replace"``;
            * ``n_public``: the normaliser ``n̂``. Required under ``add_remove`` (a public size
              or one released with its own share of epsilon, as
              :func:`~beam_dp.mechanisms.cdf.release.release_ks_cdf` does); under ``replace``
              the dataset size is public and used;
            * ``max_contributions``: records per privacy unit the pipeline enforces (1).

    Returns:
        The ``k`` grid indices of the synthetic points, sorted (repeats allowed).

    Privacy:
        ε-DP under ``relation`` with at most ``max_contributions`` records per unit: the
        exponential mechanism ``P(z) ∝ exp(-ε D(z) / (2 c k))`` over the ``C(m + k - 1, k)``
        multisets, with ``D`` of :func:`ks_deviation` (sensitivity ``c k``), sampled exactly
        (module docstring). Under ``add_remove`` the normaliser is taken as public: if it is
        a release, its epsilon adds up. Only the points are released; the work done (and so
        the running time) is fixed by public values except on the rare events listed in the
        module docstring.

    Raises:
        ValueError, TypeError: a parameter breaks its rule (named in the message); the
            message never contains a count.
    """
    mechanism = mechanism_from(parameters)
    counts = check_cumulative_counts(cumulative_counts)
    check_size(len(counts), mechanism.k)
    source = as_random_source(rng)
    return points_from_path(Sampler(counts, mechanism).draw(source))


def ks_pmf_bruteforce(
    cumulative_counts: Sequence[int] | npt.ArrayLike, **parameters: Unpack[KSParameters]
) -> dict[tuple[int, ...], float]:
    """The exact law of :func:`sample_ks_synthetic`, by listing every multiset (small only).

    Takes the same keywords as :func:`sample_ks_synthetic` (without ``rng``). The deviation of
    each multiset is computed from the definition, independently of the sampler's dynamic
    program; probabilities are floats (for tests, never for sampling).

    Returns:
        ``{sorted grid indices: probability}`` over all ``C(m + k - 1, k)`` multisets.
    """
    mechanism = mechanism_from(parameters)
    counts = check_cumulative_counts(cumulative_counts)
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
