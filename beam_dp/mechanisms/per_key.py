"""Exact private selection for many keys at once (one independent selection per key).

:func:`select_per_key` draws, for every key, exactly what :func:`~.selection.select` would draw
for that key's scores with the same ``epsilon``, ``sensitivity``, ``monotonic`` and ``method``,
independently across keys. What changes is the cost: the exact rational set-up (scores, the
rate ``c`` with ``gamma_r = c * gap_r``) is done once for all keys, and every key's coins are
flipped in the same vectorised calls, so a key with 2-10 candidates costs a few microseconds
instead of a few hundred.

Why one set-up serves every key. All scores are written as exact ``integers * unit`` with one
``unit`` fixed by their type and the sensitivity (:func:`~.exact_scores.scores_in_public_steps`
of the concatenated scores: integers as they are, other scores floored onto a public grid), and
each key's gaps ``(max_k - score) / unit`` are exact non-negative integers. A candidate's coin
has probability ``exp(-c * gap_r)`` with ``c = epsilon * unit / (2 * sensitivity)``
(``/ sensitivity`` when monotone): the same unit, grid and ``c`` as :func:`~.selection.select`
on the key alone, so the coins, hence the law of the output, are that selection's.

* **Permute-and-flip.** For a key, flip every candidate's coin and return its success of
  smallest rank in a uniformly random permutation. This is permute-and-flip exactly: the coins
  are independent of the visiting order, and the key's best candidate has a coin of
  probability 1, so the first success in a uniform order exists (the argument of
  :func:`~.selection._permute_and_flip`). All keys' coins are one call of
  :func:`~.bernoulli.bernoulli_exp_multiples`; the ranks are one random permutation of all the
  chunk's candidates (:func:`~.selection.random_ranks`), so no draw depends on how many coins
  succeed.
* **Exponential mechanism.** Rejection, as in :func:`~.selection._exponential`: propose a
  uniform candidate of the key, accept it with probability ``exp(-gamma_r) <= 1``, repeat.
  Every key gets :data:`~.selection.EXPONENTIAL_ROUNDS` (32) rounds of ``d_k`` i.i.d.
  proposals, always, and keeps its first accepted proposal in draw order, which is the
  sequential algorithm exactly. A proposal is accepted with probability at least ``1 / d_k``
  (the best candidate is accepted for sure), so a key needs more than the padded rounds with
  probability at most ``e**-32`` (about ``1.3e-14``); only then do open keys draw further
  rounds, until every key is closed (probability 1).

Running time (``docs/timing.md``): the sizes of every read of random bits, inside the coins
too (:func:`~.bernoulli.bernoulli_exp_multiples` draws one geometric per candidate), are
functions of the public numbers of candidates, the rate and bits already read, except past
the padding above.

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
from beam_dp.mechanisms.exact_scores import ExactScores, ScoresLike
from beam_dp.mechanisms.randomness import RandomSource, as_random_source
from beam_dp.mechanisms.selection import (
    _RANK_SENTINEL,
    EXPONENTIAL_ROUNDS,
    Method,
    _in_public_steps,
    _rate,
    _select_exact,
    check_method,
    random_ranks,
)

__all__ = ["select_per_key"]

IntArray = npt.NDArray[np.int64]

# Padded rounds of the exponential mechanism (a test lowers it to exercise the rounds past it).
_ROUNDS = EXPONENTIAL_ROUNDS

# Candidates per chunk of keys (memory only: about 100 MB of temporaries at most).
_CHUNK_CANDIDATES = 1 << 20


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


def _pick_by_rank(
    coins: npt.NDArray[np.bool_], offsets: IntArray, source: RandomSource
) -> IntArray:
    """For each key (a run of ``coins`` from ``offsets``), its success of smallest random rank.

    The ranks are one uniformly random permutation of all the chunk's candidates
    (:func:`~.selection.random_ranks`), so within each key they are a uniform permutation of
    its candidates, independent across keys: the success of smallest rank is the first success
    in a uniform visiting order. The work is a function of the number of candidates only.
    """
    ranks = random_ranks(int(coins.shape[0]), source)
    masked = np.where(coins, ranks, _RANK_SENTINEL)
    smallest = np.minimum.reduceat(masked, offsets)
    sizes = np.diff(np.append(offsets, coins.shape[0]))
    # ranks are distinct and every key has a success: exactly one hit per key, in key order
    hits = np.flatnonzero(masked == np.repeat(smallest, sizes))
    chosen: IntArray = hits - offsets
    return chosen


def _permute_and_flip_chunk(
    gaps: IntArray, offsets: IntArray, rate: Fraction, source: RandomSource
) -> IntArray:
    coins = bernoulli_exp_multiples(rate, gaps, source)
    return _pick_by_rank(coins, offsets, source)


def _exponential_chunk(
    gaps: IntArray,
    offsets: IntArray,
    sizes: IntArray,
    rate: Fraction,
    source: RandomSource,
    rounds: int,
) -> IntArray:
    """Every key's exponential mechanism, with padded, public rounds.

    A round draws ``d_k`` i.i.d. proposals for every key ``k`` (its number of candidates) and
    flips their coins; ``rounds`` rounds are always drawn for every key, in calls of whole
    rounds of at most about :data:`_CHUNK_CANDIDATES` proposals (sizes fixed by ``sizes``).
    A key keeps its first accepted proposal in draw order. A key has no acceptance in all
    ``rounds`` rounds with probability at most ``e**-rounds`` (as in
    :func:`~.selection._exponential`), so some key of the chunk does with probability at most
    ``keys * e**-rounds``; only then are further rounds (one proposal block per open key)
    drawn for the open keys: the residual, data-dependent work.
    """
    keys = sizes.size
    chosen = np.full(keys, -1, dtype=np.int64)
    total = int(sizes.sum())
    per_call = max(1, min(rounds, _CHUNK_CANDIDATES // max(total, 1)))
    owner_round = np.repeat(np.arange(keys), sizes)
    drawn = 0
    while drawn < rounds:
        count = min(per_call, rounds - drawn)
        _close(
            np.tile(owner_round, count), np.arange(keys), gaps, offsets, sizes, rate, source, chosen
        )
        drawn += count
    open_keys = np.flatnonzero(chosen < 0)
    while open_keys.size:  # past the padding (probability <= keys * e**-rounds)
        _close(
            np.repeat(np.arange(open_keys.size), sizes[open_keys]),
            open_keys,
            gaps,
            offsets,
            sizes,
            rate,
            source,
            chosen,
        )
        open_keys = np.flatnonzero(chosen < 0)
    return chosen


def _close(
    owner: IntArray,
    which: IntArray,
    gaps: IntArray,
    offsets: IntArray,
    sizes: IntArray,
    rate: Fraction,
    source: RandomSource,
    chosen: IntArray,
) -> None:
    """One call of proposals: lane ``i`` proposes for key ``which[owner[i]]``; keys not yet
    chosen take their first accepted lane (lanes of a key are in draw order)."""
    key_of_lane = which[owner]
    proposals = source.below_each(sizes[key_of_lane])
    coins = bernoulli_exp_multiples(rate, gaps[offsets[key_of_lane] + proposals], source)
    accepted = np.flatnonzero(coins)
    closing, first = np.unique(key_of_lane[accepted], return_index=True)
    fresh = chosen[closing] < 0
    chosen[closing[fresh]] = proposals[accepted[first[fresh]]]


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
            each key). Ints, floats or Fractions, higher is better; integers are used
            exactly, floats and Fractions floored onto the public grid of
            ``sensitivity / 2**24`` (as :func:`~.selection.select`); NaN and infinity are
            refused.
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
    exact = _in_public_steps(flat, sensitivity)
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
            chosen[first_key:stop_key] = _exponential_chunk(
                gaps, offsets, part_sizes, rate, source, _ROUNDS
            )
    return chosen
