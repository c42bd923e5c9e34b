"""Planning the KS sampler with a public budget: blocks of deviation levels and their envelopes.

The sampler of :mod:`.ks` proposes a *block* ``[start, end)`` of deviation levels with an
envelope ``Ā`` (the exact size of a band that holds every level of the block) and accepts or
rejects; any partition of ``[D_min, ∞)`` gives the exact law, so the plan affects only how
often a round is rejected. The plan must not give the data away through its *work* either
: it runs exactly :attr:`PlanOptions.band_counts` band counts, each over the same
public number of cells, whatever the data.

:func:`plan` (after the minimum ``D_min``, found in a fixed number of steps):

1. counts the band at the *cap*, the largest breakpoint ``<= D_min + span`` with the public
   ``span`` of :func:`plan_span`: the last block starts above it, so it is proposed with
   probability at most ``2**-tail_bits`` (its envelope is all ``|R|`` paths);
2. counts the band at ``D_min`` (the first block is then exact);
3. spends the rest of the budget greedily: the block whose envelope exceeds the lower bound
   of its mass the most (``(Ā - A(previous top)) × its geometric weight``, floats: a cost
   decision only) is split at its middle breakpoint; a block between two consecutive
   breakpoints is exact and never split. When no block can be split the remaining counts
   are run anyway (on the cap) so that their number stays public.

Every count is at a level ``<= cap``; the sampler pads each one to the same cells
(:func:`~beam_dp.mechanisms.cdf.bands.padded_width`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf.bands import Bands

__all__ = [
    "DEFAULT_ROUNDS",
    "Block",
    "Plan",
    "PlanOptions",
    "default_band_counts",
    "plan",
    "plan_span",
]

#: Rounds every draw runs (module docstring of :mod:`.ks`).
DEFAULT_ROUNDS = 32


def default_band_counts(k: int) -> int:
    """The default planning budget, a public function of ``k``: ``32 + 8 ceil(sqrt(k))``.

    The mass of the level law spreads over a range where ``ln A`` grows by tens of nats (a
    few ``sqrt(k)`` where the release is accurate, more where the noise dominates); blocks
    that each grow it by a nat or two keep a round's acceptance high. Chosen on the panel of
    ``benchmarks/cdf_timing.py`` (``--only acceptance``), with :data:`DEFAULT_ROUNDS`.
    """
    return 32 + 8 * (math.isqrt(max(k - 1, 0)) + 1)


@dataclass(frozen=True)
class PlanOptions:
    """Cost knobs of the sampler, all public; they never change the law of a release.

    Attributes:
        band_counts: band counts the plan runs (>= 1); None for :func:`default_band_counts`.
        rounds: rounds every draw runs (>= 1): rounds after the accepted one are run and
            discarded, so only a draw that needs more rounds than this takes longer.
        tail_bits: the last block (above the cap) is proposed with probability at most
            ``2**-tail_bits`` per round (>= 1).
        deviation_bound: a public bound on ``D_min`` that sizes the padded columns; None
            lets the sampler derive it (``ceil(n̂ / 2)`` under ``replace``; the full width
            ``k + 1`` under ``add_remove``). A wrong bound costs time, never exactness.
    """

    band_counts: int | None = None
    rounds: int = DEFAULT_ROUNDS
    tail_bits: int = 40
    deviation_bound: int | None = None

    def __post_init__(self) -> None:
        for name in ("band_counts", "rounds", "tail_bits", "deviation_bound"):
            value = getattr(self, name)
            if value is None and name in ("band_counts", "deviation_bound"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"'{name}' must be an integer")
            if value < (0 if name == "deviation_bound" else 1):
                raise ValueError(f"'{name}' must be >= {0 if name == 'deviation_bound' else 1}")


@dataclass(frozen=True)
class Block:
    """One block of levels ``[start, end)`` and its envelope (a band count)."""

    top: int  # index of the breakpoint whose band gives the envelope
    level: int  # that breakpoint: the band of the envelope
    start: int  # first level of the block
    end: int | None  # one past the last level (None: unbounded)
    count: int  # the envelope: A(breakpoints[top]), or |R| for the last block
    everything: bool  # the envelope is the set of all paths


@dataclass(frozen=True)
class Plan:
    """The blocks of one problem and what planning them cost.

    Attributes:
        minimum: ``D_min``.
        levels: the distinct breakpoints ``>= D_min`` (``levels[0] = D_min``).
        blocks: the blocks, partitioning ``[D_min, ∞)`` in order.
        band_counts: band counts run (the budget).
        acceptance_bound: ``sum_j L_j / sum_j U_j`` over the blocks, a lower bound on the
            probability that a round is accepted (floats; a statistic of the data, kept for
            tests and benchmarks only: never released or logged).
        exact: every block's envelope is its exact count (a round is always accepted).
    """

    minimum: int
    levels: npt.NDArray[Any]
    blocks: tuple[Block, ...]
    band_counts: int
    acceptance_bound: float
    exact: bool


def plan_span(columns: int, k: int, gamma: Fraction, tail_bits: int) -> int:
    """Public ``span``: levels above ``D_min + span`` carry at most ``2**-tail_bits`` of the
    proposal.

    ``ceil((ln|R| + ln(1 / (1 - e**-γ)) + tail_bits ln 2) / γ)`` with ``|R| = C(columns + k,
    k)``: a block starting above ``D_min + span`` has proposal weight at most
    ``|R| e**(-γ span)``, against a total of at least ``1 - e**-γ`` (the level ``D_min`` has
    ``A >= 1``).
    """
    g = float(gamma)
    log_paths = math.lgamma(columns + k + 1) - math.lgamma(k + 1) - math.lgamma(columns + 1)
    slack = -math.log(-math.expm1(-g))
    return math.ceil((log_paths + slack + tail_bits * math.log(2.0)) / g)


def _log_int(value: int) -> float:
    if value <= 0:
        return -math.inf
    bits = value.bit_length()
    if bits <= 1000:
        return math.log(value)
    return math.log(value >> (bits - 64)) + (bits - 64) * math.log(2)


def _log_add(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high))


def plan(bands: Bands, gamma: Fraction, options: PlanOptions, span: int) -> Plan:
    """The blocks of the module docstring, with exactly ``options.band_counts`` band counts
    (``band_counts`` must be set) and every counted level ``<= D_min + span``."""
    assert options.band_counts is not None  # the sampler resolves the default
    budget = options.band_counts
    every = bands.breakpoints()
    minimum = bands.min_deviation(every)
    levels = every[np.searchsorted(every, minimum) :]
    last = len(levels) - 1
    capped = int(np.searchsorted(levels, minimum + span, side="right")) - 1
    g = float(gamma)
    counts: dict[int, int] = {last: bands.total()}
    tops = [last]
    spent = 0

    def level(index: int) -> int:
        return int(levels[index])

    def count(index: int) -> None:
        nonlocal spent
        counts[index] = bands.count(level(index))
        bisect.insort(tops, index)
        spent += 1

    def log_weight(previous: int, top: int) -> float:
        """ln of the geometric weight of the levels of block (previous, top]."""
        start = level(previous + 1)
        head = -g * (start - minimum)
        if top == last:
            return head
        return head + math.log(-math.expm1(-g * (level(top + 1) - start)))

    def low(previous: int) -> int:
        return counts[previous] if previous >= 0 else 1

    for first in (capped, 0):
        if spent < budget and first not in counts:
            count(first)
    while spent < budget:
        best: tuple[float, int, int] | None = None
        previous = -1
        for top in tops:
            if top - previous >= 2 and top <= capped and counts[top] > low(previous):
                excess = log_weight(previous, top) + _log_int(counts[top] - low(previous))
                if best is None or excess > best[0]:
                    best = (excess, previous, top)
            previous = top
        if best is None:  # every block is exact: the rest of the budget is run anyway
            bands.count(level(capped))
            spent += 1
            continue
        _, previous, top = best
        count((previous + 1 + top) // 2)

    blocks: list[Block] = []
    log_upper = log_lower = -math.inf
    every_exact = True
    previous = -1
    for top in tops:
        end = None if top == last else level(top + 1)
        blocks.append(Block(top, level(top), level(previous + 1), end, counts[top], top == last))
        weight = log_weight(previous, top)
        log_upper = _log_add(log_upper, weight + _log_int(counts[top]))
        exact = top == previous + 1 or counts[top] == low(previous)
        every_exact = every_exact and exact
        log_lower = _log_add(log_lower, weight + _log_int(counts[top] if exact else low(previous)))
        previous = top
    acceptance = 1.0 if every_exact else math.exp(log_lower - log_upper)
    return Plan(minimum, levels, tuple(blocks), spent, acceptance, every_exact)
