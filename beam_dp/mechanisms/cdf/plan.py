"""Planning the KS sampler: blocks of deviation levels and their envelopes (cost only).

The sampler of :mod:`.ks` proposes a *block* ``[start, end)`` of deviation levels with an
envelope ``Ā`` (the exact size of a band that holds every level of the block) and accepts or
rejects; any partition of ``[D_min, ∞)`` gives the exact law, so everything here affects only
how many rounds and band counts a release costs. :func:`plan` starts where
``A(s) e**(-γ s)`` peaks (:func:`find_peak`, exponential search), grows blocks upwards and
downwards while the envelope stays within ``e**max_growth`` of the block's smallest count, and
closes the remainders once their proposal weight is negligible. Floats appear only in these
cost decisions, never in a probability that is sampled from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf.bands import Bands

__all__ = ["Block", "Levels", "PlanOptions", "find_peak", "plan"]


@dataclass(frozen=True)
class PlanOptions:
    """Cost knobs of the planner; they never change the law of a release."""

    max_growth: float = 3.0  # a block's envelope may exceed its smallest count by e**this
    min_growth: float = 1.0  # below this, the next block's stride doubles
    negligible: float = 1e-3  # remainders with less proposal weight than this share close
    max_counts: int = 4000  # band counts per release before the remainders close regardless


@dataclass(frozen=True)
class Block:
    """One block of levels ``[start, end)`` and its envelope (a band count)."""

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
class Levels:
    """The breakpoints from ``D_min`` up, with the band counts computed so far (cached)."""

    bands: Bands
    breakpoints: npt.NDArray[Any]
    gamma: Fraction
    options: PlanOptions
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


def find_peak(levels: Levels) -> int:
    """A breakpoint index near the largest ``A(s) e**(-γ s)`` (exponential search)."""
    gamma = float(levels.gamma)
    best, best_value = 0, -math.inf
    index, step = 0, 1
    while index < levels.last:
        value = _log_int(levels.count(index)) - gamma * (levels.level(index) - levels.level(0))
        if value > best_value:
            best, best_value = index, value
        elif value < best_value - 40 or levels.exhausted():
            break
        index += step
        step *= 2
    return best


def plan(bands: Bands, gamma: Fraction, options: PlanOptions) -> tuple[int, list[Block], int]:
    """Minimum deviation, the blocks partitioning ``[D_min, ∞)`` (see the module doc) and the
    number of band counts the planning took."""
    every = bands.breakpoints()
    minimum = bands.min_deviation(every)
    breakpoints = every[np.searchsorted(every, minimum) :]
    levels = Levels(bands, breakpoints, gamma, options)
    last = levels.last
    peak = find_peak(levels)
    tops = [peak]
    log_total = -math.inf
    growth_cap, growth_floor = options.max_growth, options.min_growth
    log_negligible = math.log(options.negligible)

    # Upwards from the peak: tops peak < u_1 < ... < last.
    upper, stride = peak, 1
    while upper < last:
        tail = levels.log_weight(last, upper + 1)
        if tail <= log_total + log_negligible or levels.exhausted():
            tops.append(last)
            log_total = _log_add(log_total, tail)
            break
        candidate = min(upper + stride, last)
        growth = _log_int(levels.count(candidate)) - _log_int(levels.count(upper))
        if growth > growth_cap and candidate - upper > 1:
            stride = max(1, (candidate - upper) // 2)
            continue
        log_total = _log_add(log_total, levels.log_weight(candidate, upper + 1))
        tops.append(candidate)
        stride = 2 * (candidate - upper) if growth < growth_floor else candidate - upper
        upper = candidate

    # Downwards from the peak: tops ... < d_1 < peak; the lowest block starts at D_min.
    lower, stride = peak, 1
    while lower > 0:
        candidate = lower - stride
        if candidate < 0 or levels.exhausted():
            break
        growth = _log_int(levels.count(lower)) - _log_int(levels.count(candidate))
        if growth > growth_cap and stride > 1:
            stride //= 2
            continue
        log_total = _log_add(log_total, levels.log_weight(lower, candidate + 1))
        tops.append(candidate)
        stride = 2 * stride if growth < growth_floor else stride
        lower = candidate
        if levels.log_weight(candidate, 0) <= log_total + log_negligible:
            break

    tops = sorted(set(tops))
    blocks: list[Block] = []
    previous = -1
    for top in tops:
        start = levels.level(previous + 1)
        end = None if top == last else levels.level(top + 1)
        blocks.append(Block(top, levels.level(top), start, end, levels.count(top), top == last))
        previous = top
    return minimum, blocks, len(levels.counts)
