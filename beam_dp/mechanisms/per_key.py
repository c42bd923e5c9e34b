"""Exact private selection for many keys at once (one independent selection per key).

:func:`select_per_key` draws, for every key, exactly what :func:`~.selection.select` would draw
for that key's scores with the same ``epsilon``, ``sensitivity``, ``monotonic`` and ``method``,
independently across keys. What changes is the cost: the exact rational set-up (scores, the
rate ``c`` with ``gamma_r = c * gap_r``) is done once for all keys, and every key's coins are
flipped in the same vectorised calls, so a key with 2-10 candidates costs a few microseconds
instead of a few hundred.

Why one set-up serves every key. All scores are written exactly as ``integers * unit`` with
one ``unit`` (:func:`~.exact_scores.exact_scores` of the concatenated scores), and each key's
gaps ``(max_k - score) / unit`` are exact non-negative integers. A candidate's coin has
probability ``exp(-gamma_r)`` with ``gamma_r = epsilon * (q_max,k - q_r) / (2 * sensitivity)``
(``/ sensitivity`` when monotone), and ``gamma_r = c * gap_r`` with
``c = epsilon * unit / (2 * sensitivity)`` exactly, whatever the unit: the coins, hence the
law of the output, are those of :func:`~.selection.select` on the key alone (which may use a
coarser unit and a correspondingly larger ``c``; the product is the same rational).

* **Permute-and-flip.** For a key, flip every candidate's coin and return a uniformly random
  success. This is permute-and-flip exactly: the coins are independent of the visiting order,
  and the key's best candidate has a coin of probability 1, so the first success in a uniform
  order is a uniform member of the set of successes (the argument of
  :func:`~.selection._permute_and_flip`). All keys' coins are one call of
  :func:`~.bernoulli.bernoulli_exp_multiples`; the uniform pick is one exact uniform integer
  per key (:meth:`~.randomness.RandomSource.below_each`).
* **Exponential mechanism.** Rejection, as in :func:`~.selection._exponential`: propose a
  uniform candidate of the key, accept it with probability ``exp(-gamma_r) <= 1``, repeat.
  Each round draws a block of i.i.d. proposals for every key still open (the block size is a
  floating-point guess of what the key needs; it changes only the cost) and a key closes at
  its first accepted proposal in draw order, which is the sequential algorithm exactly. A round
  closes each open key with probability at least ``1 / d_k`` (its best candidate is accepted
  for sure when proposed), so the loop ends with probability 1, after about
  ``log(keys) * d_k / sum_r exp(-gamma_r)`` rounds at worst.

Keys are processed in chunks of about a million candidates (memory only; keys are
independent). Scores too large for int64 after the exact conversion fall back to one exact
selection per key (same law, slower).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples
from beam_dp.mechanisms.exact_scores import ExactScores, ScoresLike, exact_scores
from beam_dp.mechanisms.randomness import RandomSource, as_random_source
from beam_dp.mechanisms.selection import Method, _rate, _select_exact, check_method

__all__ = ["select_per_key"]

IntArray = npt.NDArray[np.int64]

# Candidates per chunk of keys (memory only: about 100 MB of temporaries at most).
_CHUNK_CANDIDATES = 1 << 20
# Largest block of proposals per key and round for the exponential mechanism (cost only).
_MAX_BLOCK = 1 << 12


def _as_rows(scores: Any) -> Any:
    """``scores`` as an array; numpy's message (which may quote a score) is not passed on."""
    try:
        return np.asarray(scores)
    except (TypeError, ValueError):
        raise ValueError(
            "'scores' must be rectangular (the same number of candidates in every row) when "
            "'counts' is not given; give concatenated scores and 'counts' for mixed sizes"
        ) from None


def _flat_scores(scores: Any, counts: Any) -> tuple[Any, IntArray]:
    """The concatenated scores and the number of candidates of each key, validated."""
    if counts is None:
        array = scores if isinstance(scores, np.ndarray) else _as_rows(scores)
        if array.ndim != 2:
            raise ValueError(
                "'scores' must be two-dimensional (one row per key) when 'counts' is not "
                f"given; received {array.ndim} dimension(s)"
            )
        keys, width = array.shape
        if keys and width == 0:
            raise ValueError("'scores' must hold at least one candidate per key; received 0")
        return array.reshape(-1), np.full(keys, width, dtype=np.int64)
    sizes = np.asarray(counts)
    if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
        raise ValueError("'counts' must be a one-dimensional sequence of integers")
    sizes = sizes.astype(np.int64)
    if sizes.size and int(sizes.min()) < 1:
        raise ValueError("'counts' must be >= 1 for every key (each key needs a candidate)")
    if isinstance(scores, np.ndarray):
        flat: Any = scores
        if flat.ndim != 1:
            raise ValueError(
                "'scores' must be one-dimensional (all keys' scores, concatenated) when "
                f"'counts' is given; received {flat.ndim} dimensions"
            )
        length = int(flat.shape[0])
    else:
        flat = list(scores)
        length = len(flat)
    if int(sizes.sum()) != length:
        raise ValueError(
            f"'counts' must add up to the number of scores ({length}); they add up to "
            f"{int(sizes.sum())}"
        )
    return flat, sizes


def _pick_uniform_successes(
    coins: npt.NDArray[np.bool_], offsets: IntArray, source: RandomSource
) -> IntArray:
    """For each key (a run of ``coins`` from ``offsets``), a uniformly random success."""
    successes = np.add.reduceat(coins.astype(np.int64), offsets)
    positions = np.flatnonzero(coins)
    first = np.cumsum(successes) - successes
    picks = source.below_each(successes)
    chosen: IntArray = positions[first + picks] - offsets
    return chosen


def _permute_and_flip_chunk(
    gaps: IntArray, offsets: IntArray, rate: Fraction, source: RandomSource
) -> IntArray:
    coins = bernoulli_exp_multiples(rate, gaps, source)
    return _pick_uniform_successes(coins, offsets, source)


def _blocks(gaps: IntArray, offsets: IntArray, sizes: IntArray, rate: Fraction) -> IntArray:
    """Proposals per key and round: a power of two near twice the expected need (cost only)."""
    weights = np.exp(-float(rate) * gaps.astype(np.float64))
    totals = np.maximum(np.add.reduceat(weights, offsets), 1.0)
    expected = sizes / totals
    exponents = np.ceil(np.log2(np.maximum(2.0 * expected, 1.0)))
    blocks = np.minimum(np.exp2(exponents), _MAX_BLOCK).astype(np.int64)
    return blocks


def _exponential_chunk(
    gaps: IntArray, offsets: IntArray, sizes: IntArray, rate: Fraction, source: RandomSource
) -> IntArray:
    keys = sizes.size
    chosen = np.empty(keys, dtype=np.int64)
    blocks = _blocks(gaps, offsets, sizes, rate)
    open_keys = np.arange(keys)
    while open_keys.size:
        per_key = blocks[open_keys]
        owner = np.repeat(np.arange(open_keys.size), per_key)  # lanes in draw order per key
        proposals = source.below_each(np.repeat(sizes[open_keys], per_key))
        coins = bernoulli_exp_multiples(
            rate, gaps[np.repeat(offsets[open_keys], per_key) + proposals], source
        )
        accepted = np.flatnonzero(coins)
        # the first accepted lane of each key: lanes are grouped by key, in draw order
        closing, first = np.unique(owner[accepted], return_index=True)
        chosen[open_keys[closing]] = proposals[accepted[first]]
        still_open = np.ones(open_keys.size, dtype=bool)
        still_open[closing] = False
        open_keys = open_keys[still_open]
    return chosen


def _chunks(sizes: IntArray) -> list[tuple[int, int]]:
    """Consecutive key ranges of about :data:`_CHUNK_CANDIDATES` candidates each."""
    ends = np.cumsum(sizes)
    cuts = [0]
    while cuts[-1] < sizes.size:
        base = int(ends[cuts[-1] - 1]) if cuts[-1] else 0
        stop = int(np.searchsorted(ends, base + _CHUNK_CANDIDATES, side="right"))
        cuts.append(max(stop, cuts[-1] + 1))
    return list(itertools.pairwise(cuts))


def select_per_key(
    scores: ScoresLike,
    counts: npt.ArrayLike | None = None,
    *,
    epsilon: float | Fraction,
    sensitivity: float | Fraction,
    monotonic: bool = False,
    method: Method = "permute_and_flip",
    rng: RandomSource | np.random.Generator | None = None,
) -> IntArray:
    """Choose one candidate privately for every key; return each key's chosen index.

    Equivalent in law to ``[select(scores_k, ...) for each key k]`` with the same keyword
    arguments, the selections independent across keys, and much cheaper when keys are many.

    Args:
        scores: either a two-dimensional array with one row of scores per key (``counts``
            omitted; every key has the same number of candidates), or all keys' scores
            concatenated in key order (one-dimensional; ``counts`` gives how many belong to
            each key). Ints, floats or Fractions, higher is better; converted to exact
            rationals; NaN and infinity are refused.
        counts: the number of candidates of each key (each >= 1), adding up to
            ``len(scores)``; None for a two-dimensional ``scores``.
        epsilon: the privacy parameter spent by each key's selection (> 0, finite).
        sensitivity: the largest change of any one candidate's score of any one key between
            neighbouring datasets (> 0, finite), in the units of ``scores``.
        monotonic: True when, between any two neighbours, all scores of a key move in the same
            direction; then ``epsilon / sensitivity`` is used instead of half of it.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests (it warns).

    Returns:
        An int64 array with one entry per key: the index of the chosen candidate among that
        key's own candidates (its column for two-dimensional ``scores``).

    Privacy:
        Each key's selection is epsilon-DP (``method="exponential"``: also epsilon**2/8-zCDP)
        with respect to the relation ``sensitivity`` and ``monotonic`` were derived for, for
        that key's scores. How the keys compose (parallel composition when a privacy unit
        touches one key, or ``max_keys_per_unit`` times epsilon) is the caller's accounting.
        Only the indices are released.

    Raises:
        ValueError: scores that are not finite numbers, a key without candidates, ``counts``
            that do not add up to the number of scores, epsilon or sensitivity not > 0 and
            finite, or an unknown method.
    """
    chosen_method = check_method(method)
    flat, sizes = _flat_scores(scores, counts)
    source = as_random_source(rng)
    if sizes.size == 0:
        _rate(epsilon, sensitivity, monotonic, Fraction(1))  # validate even with no keys
        return np.zeros(0, dtype=np.int64)
    exact = exact_scores(flat)
    rate = _rate(epsilon, sensitivity, monotonic, exact.unit)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    if exact.integers.dtype == object:  # beyond int64: one exact selection per key
        return np.array(
            [
                _select_exact(
                    ExactScores(exact.integers[start : start + size], exact.unit),
                    None,
                    rate,
                    chosen_method,
                    source,
                )
                for start, size in zip(starts.tolist(), sizes.tolist(), strict=True)
            ],
            dtype=np.int64,
        )
    integers: IntArray = exact.integers
    chosen = np.empty(sizes.size, dtype=np.int64)
    for first_key, stop_key in _chunks(sizes):
        base = int(starts[first_key])
        end = int(starts[stop_key - 1] + sizes[stop_key - 1])
        part = integers[base:end]
        offsets = starts[first_key:stop_key] - base
        part_sizes = sizes[first_key:stop_key]
        gaps = np.repeat(np.maximum.reduceat(part, offsets), part_sizes) - part
        if chosen_method == "permute_and_flip":
            chosen[first_key:stop_key] = _permute_and_flip_chunk(gaps, offsets, rate, source)
        else:
            chosen[first_key:stop_key] = _exponential_chunk(gaps, offsets, part_sizes, rate, source)
    return chosen
