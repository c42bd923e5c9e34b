"""The selection samplers' work is fixed by public values (``docs/timing.md``, "fixed").

A recording source logs every request the samplers make of the random source (which method,
its bound and its size) and every batch of coins handed to ``bernoulli_exp_multiples`` (how
many). On neighbouring inputs with the same public parameters the logs must be equal.

The work inside the coins is checked by a stronger log: a seeded source records the size of
every read of random bytes, at every depth (inside the coins, the uniform draws' rejections,
the geometric draws). Given the same seed, a sampler whose every request is a function of
public values and of bits already drawn reads the same stream on both neighbours, so the two
logs must be equal byte for byte. The coins by bits (``bernoulli_exp_multiples_walk``, the
selections' coins before this test) fail it on the first pair: a gap of 0 drew nothing.

The old code failed these: ``select``'s exponential mechanism chose its batch from the scores
(438 proposals on 5 votes, 1 163 on 6), permute-and-flip chose between a lazy walk and
flipping every coin from the scores (7 votes: walk, 8 votes: flip all), and both drew the pick
among successes, or the per-key blocks, with bounds computed from the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from draw_helpers import ReadLog
from hypothesis import example, given, settings
from hypothesis import strategies as st

from beam_dp.mechanisms import SecureRandom, per_key, selection
from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples_walk
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.mechanisms.selection import select, top_k

Request = tuple[Any, ...]


class RecordingSource(SecureRandom):
    """The OS CSPRNG, logging the requests made of it (not those made inside a request)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._depth = 0

    @contextmanager
    def request(self, *what: Any) -> Iterator[None]:
        if not self._depth:
            self.requests.append(what)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def below(self, bound: int, n: int) -> npt.NDArray[np.int64]:
        with self.request("below", bound, n):
            return super().below(bound, n)

    def below_each(self, bounds: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        with self.request("below_each", tuple(np.asarray(bounds).tolist())):
            return super().below_each(bounds)

    def randbelow(self, bound: int) -> int:
        with self.request("randbelow", bound):
            return super().randbelow(bound)

    def words64(self, n: int) -> npt.NDArray[np.uint64]:
        with self.request("words64", n):
            return super().words64(n)

    def words16(self, n: int) -> npt.NDArray[np.uint16]:
        with self.request("words16", n):
            return super().words16(n)


@pytest.fixture(autouse=True)
def _log_coin_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Log each batch of coins (its size) where the selections flip them; hide its inside."""
    original = selection.bernoulli_exp_multiples

    def logged(c: Fraction, multiples: npt.NDArray[Any], source: Any) -> npt.NDArray[np.bool_]:
        if isinstance(source, RecordingSource):
            with source.request("coins", int(multiples.shape[0])):
                return original(c, multiples, source)
        return original(c, multiples, source)

    monkeypatch.setattr(selection, "bernoulli_exp_multiples", logged)
    monkeypatch.setattr(per_key, "bernoulli_exp_multiples", logged)


def _work(draw: Callable[[RecordingSource], object]) -> list[Request]:
    source = RecordingSource()
    draw(source)
    return source.requests


def _works_on(
    sampler: Callable[..., object], inputs: tuple[object, ...], *args: object, **options: object
) -> list[list[Request]]:
    """The logs of ``sampler(scores, *args, rng=source, **options)`` on each of ``inputs``."""
    return [
        _work(lambda source, scores=scores: sampler(scores, *args, rng=source, **options))
        for scores in inputs
    ]


METHODS = ["permute_and_flip", "exponential"]
D = 10_000


def _votes(where: int, votes: int) -> npt.NDArray[np.int64]:
    counts = np.zeros(D, dtype=np.int64)
    counts[where] = votes
    return counts


# docs/timing.md's D (no votes) and D' (one vote on one candidate), and pairs one vote apart
# where the old code's float estimates crossed a threshold (exponential batch, P&F procedure).
PAIRS = {
    "no votes / one vote": (0, 1),
    "5 / 6 votes": (5, 6),
    "7 / 8 votes": (7, 8),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pair", list(PAIRS))
def test_select_does_the_same_work_on_the_reported_neighbours(method: str, pair: str) -> None:
    first, second = (_votes(7, votes) for votes in PAIRS[pair])
    for _ in range(3):
        works = _works_on(
            select, (first, second), epsilon=1.0, sensitivity=1, monotonic=True, method=method
        )
        assert works[0] == works[1]
        assert works[0]  # the log is not empty: the recording works


NEIGHBOURS = st.integers(2, 300).flatmap(
    lambda d: st.tuples(
        st.lists(st.integers(0, 30), min_size=d, max_size=d),
        st.integers(0, d - 1),
        st.sampled_from([-1, 1]),
        st.sampled_from(METHODS),
        st.sampled_from([0.1, 1.0, 5.0]),
    )
)


@settings(deadline=None, max_examples=60)
@given(case=NEIGHBOURS)
def test_select_does_the_same_work_on_random_neighbours(
    case: tuple[list[int], int, int, str, float],
) -> None:
    counts, where, step, method, epsilon = case
    neighbour = list(counts)
    neighbour[where] = max(0, neighbour[where] + step)
    works = _works_on(
        select, (counts, neighbour), epsilon=epsilon, sensitivity=1, monotonic=True, method=method
    )
    assert works[0] == works[1]


@pytest.mark.parametrize("method", METHODS)
def test_top_k_does_the_same_work_on_neighbours(method: str) -> None:
    first = np.arange(400, dtype=np.int64) % 7
    second = first.copy()
    second[3] += 1
    works = _works_on(top_k, (first, second), 5, epsilon=1.0, sensitivity=1, method=method)
    assert works[0] == works[1]


def test_the_exponential_mechanism_pads_to_its_rounds() -> None:
    # Every candidate's coin is 1: the first proposal is accepted, and still 32 rounds of d
    # proposals are drawn and flipped.
    work = _work(
        lambda source: select(
            np.zeros(50, dtype=np.int64),
            epsilon=1.0,
            sensitivity=1,
            method="exponential",
            rng=source,
        )
    )
    assert work == [("below", 50, 50 * selection.EXPONENTIAL_ROUNDS), ("coins", 1_600)]


def test_permute_and_flip_flips_every_coin_and_draws_ranks() -> None:
    work = _work(lambda source: select(_votes(7, 1), epsilon=1.0, sensitivity=1, rng=source))
    assert work == [("coins", D), ("words64", D)]


PER_KEY_SHAPE = (2_000, 50)


@pytest.mark.parametrize("method", METHODS)
def test_select_per_key_does_the_same_work_on_the_reported_neighbours(method: str) -> None:
    # docs/timing.md: 2 000 keys x 50 candidates, no votes / one vote on one candidate.
    first = np.zeros(PER_KEY_SHAPE, dtype=np.int64)
    second = first.copy()
    second[0, 3] = 1
    for _ in range(2):
        works = _works_on(
            select_per_key,
            (first, second),
            epsilon=1.0,
            sensitivity=1,
            monotonic=True,
            method=method,
        )
        assert works[0] == works[1]


KEYED_NEIGHBOURS = st.lists(
    st.lists(st.integers(0, 12), min_size=1, max_size=12), min_size=1, max_size=40
).flatmap(
    lambda keys: st.tuples(
        st.just(keys),
        st.integers(0, len(keys) - 1),
        st.integers(0, 11),
        st.sampled_from(METHODS),
    )
)


@settings(deadline=None, max_examples=60)
@given(case=KEYED_NEIGHBOURS)
def test_select_per_key_does_the_same_work_on_random_neighbours(
    case: tuple[list[list[int]], int, int, str],
) -> None:
    keys, key, candidate, method = case
    neighbour = [list(row) for row in keys]
    neighbour[key][candidate % len(neighbour[key])] += 1
    sizes = [len(row) for row in keys]
    works = [
        _work(
            lambda source, rows=rows: select_per_key(
                [score for row in rows for score in row],
                sizes,
                epsilon=1.0,
                sensitivity=1,
                monotonic=True,
                method=method,  # type: ignore[arg-type]
                rng=source,
            )
        )
        for rows in (keys, neighbour)
    ]
    assert works[0] == works[1]


def test_select_per_key_pads_every_key_to_its_rounds() -> None:
    # Two keys of 3 and 2 candidates whose coins are all 1: still 32 rounds of d_k proposals.
    rounds = selection.EXPONENTIAL_ROUNDS
    work = _work(
        lambda source: select_per_key(
            [0, 0, 0, 5, 5], [3, 2], epsilon=1.0, sensitivity=1, method="exponential", rng=source
        )
    )
    assert work == [("below_each", (3, 3, 3, 2, 2) * rounds), ("coins", 5 * rounds)]


def _streams(
    sampler: Callable[..., object], inputs: tuple[object, ...], seed: int, **options: object
) -> list[tuple[list[int], object]]:
    """(every read's size, the output) of ``sampler`` on each input, from the same seed."""
    out = []
    for scores in inputs:
        source = ReadLog(seed)
        result = sampler(scores, rng=source, **options)
        out.append((source.reads, result))
    return out


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pair", list(PAIRS))
def test_select_reads_the_same_stream_on_the_reported_neighbours(method: str, pair: str) -> None:
    first, second = (_votes(7, votes) for votes in PAIRS[pair])
    for seed in range(3):
        (reads, _), (neighbour_reads, _) = _streams(
            select, (first, second), seed, epsilon=1.0, sensitivity=1, monotonic=True, method=method
        )
        assert reads == neighbour_reads
        assert len(reads) > 3  # the coins' own reads are in the log


@settings(deadline=None, max_examples=40)
@given(case=NEIGHBOURS, seed=st.integers(0, 2**32 - 1))
# Found by a random run: the scores' unit was their gcd of differences (1 against 2 here), so
# the coins' rate c = epsilon * unit / sensitivity, which sets every coin's reads, was private.
@example(case=([0, 1], 1, 1, "permute_and_flip", 0.1), seed=0)
def test_select_reads_the_same_stream_on_random_neighbours(
    case: tuple[list[int], int, int, str, float], seed: int
) -> None:
    counts, where, step, method, epsilon = case
    neighbour = list(counts)
    neighbour[where] = max(0, neighbour[where] + step)
    (reads, _), (neighbour_reads, _) = _streams(
        select,
        (np.array(counts), np.array(neighbour)),
        seed,
        epsilon=epsilon,
        sensitivity=1,
        monotonic=True,
        method=method,
    )
    assert reads == neighbour_reads


FRACTIONAL_NEIGHBOURS = {
    # floats whose exact unit (the smallest power of two they need) differs: 2**-2 vs 2**-7
    "floats": (np.array([0.0, 0.5, 0.75, 3.0]), np.array([0.0, 0.5, 0.7578125, 3.0])),
    # Fractions whose common denominator differs: 3 vs 21
    "fractions": (
        [Fraction(1, 3), Fraction(0), Fraction(2)],
        [Fraction(1, 7), Fraction(0), Fraction(2)],
    ),
    # integers whose differences' gcd differs: 1000 vs 1 (the unit was that gcd before)
    "integers": (np.array([0, 1000, 2000]), np.array([0, 1001, 2000])),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", list(FRACTIONAL_NEIGHBOURS))
def test_select_reads_the_same_stream_whatever_the_scores_denominators(
    method: str, kind: str
) -> None:
    # The unit the coins' rate is computed in is a function of the scores' type and the
    # sensitivity, never of their values (exact_scores.scores_in_public_steps).
    first, second = FRACTIONAL_NEIGHBOURS[kind]
    for seed in range(3):
        (reads, _), (neighbour_reads, _) = _streams(
            select, (first, second), seed, epsilon=0.5, sensitivity=1, method=method
        )
        assert reads == neighbour_reads


@pytest.mark.parametrize("method", METHODS)
def test_top_k_and_select_per_key_read_the_same_stream_on_neighbours(method: str) -> None:
    first = np.arange(400, dtype=np.int64) % 7
    second = first.copy()
    second[3] += 1
    (reads, _), (neighbour_reads, _) = _streams(
        top_k, (first, second), 5, k=5, epsilon=1.0, sensitivity=1, method=method
    )
    assert reads == neighbour_reads
    keys = np.zeros((200, 20), dtype=np.int64)
    one_more = keys.copy()
    one_more[0, 3] = 1
    (reads, _), (neighbour_reads, _) = _streams(
        select_per_key, (keys, one_more), 7, epsilon=1.0, sensitivity=1, method=method
    )
    assert reads == neighbour_reads


def test_coins_by_bits_read_a_different_stream_on_the_reported_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The test above can fail: with the coins flipped bit by bit (the selections' coins before
    # it), D (no votes: every gap 0, no coin drawn) and D' read different streams.
    monkeypatch.setattr(selection, "bernoulli_exp_multiples", bernoulli_exp_multiples_walk)
    (reads, _), (neighbour_reads, _) = _streams(
        select,
        (_votes(7, 0), _votes(7, 1)),
        0,
        epsilon=1.0,
        sensitivity=1,
        monotonic=True,
        method="permute_and_flip",
    )
    assert reads != neighbour_reads
