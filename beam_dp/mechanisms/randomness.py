"""Sources of random bits for the exact samplers.

Every sampler in :mod:`beam_dp.mechanisms` takes an ``rng`` argument. ``None`` (the default)
means :class:`SecureRandom`, which reads the operating system's CSPRNG (``os.urandom``). A
seeded source exists only so that tests can reproduce a run: it is a plain pseudo-random
generator, it warns with :class:`InsecureRandomWarning` when it is created, and release records
made with it say so (``RandomSource.secure`` is False).

All the samplers need from a source is uniform random *bits*; everything else (Bernoulli coins,
uniform integers) is built from bits exactly, so the distribution of a release does not depend
on any floating-point arithmetic.
"""

from __future__ import annotations

import os
import warnings
from abc import ABC, abstractmethod

import numpy as np
import numpy.typing as npt

__all__ = [
    "InsecureRandomWarning",
    "InsecureSeededRandom",
    "RandomSource",
    "SecureRandom",
    "as_random_source",
]

_TWO_64 = 1 << 64


class InsecureRandomWarning(UserWarning):
    """A release is being sampled from a seeded, non-cryptographic generator."""


class RandomSource(ABC):
    """Uniform random bits, and exact uniform integers built from them."""

    #: True only for the OS CSPRNG. Releases record this flag.
    secure: bool = False

    @abstractmethod
    def random_bytes(self, n: int) -> bytes:
        """Return ``n`` independent uniform random bytes."""

    def words16(self, n: int) -> npt.NDArray[np.uint16]:
        """Return ``n`` independent uniform 16-bit words."""
        return np.frombuffer(self.random_bytes(2 * n), dtype=np.uint16)

    def words32(self, n: int) -> npt.NDArray[np.uint32]:
        """Return ``n`` independent uniform 32-bit words."""
        return np.frombuffer(self.random_bytes(4 * n), dtype=np.uint32)

    def words64(self, n: int) -> npt.NDArray[np.uint64]:
        """Return ``n`` independent uniform 64-bit words."""
        return np.frombuffer(self.random_bytes(8 * n), dtype=np.uint64)

    def below(self, bound: int, n: int) -> npt.NDArray[np.int64]:
        """Return ``n`` independent integers uniform on ``[0, bound)``, exactly.

        Rejection sampling on 64-bit words: a word is kept only if it falls below the largest
        multiple of ``bound`` that fits in 2**64, so every residue is equally likely.
        """
        if not 1 <= bound <= (1 << 63):
            raise ValueError(f"'bound' must be in [1, 2**63]; received {bound}")
        limit = np.uint64(_TWO_64 - (_TWO_64 % bound) - 1)  # largest accepted word
        out = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            words = self.words64(todo.size)
            ok = words <= limit
            out[todo[ok]] = (words[ok] % np.uint64(bound)).astype(np.int64)
            todo = todo[~ok]
        return out

    def below_each(self, bounds: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Return one integer uniform on ``[0, bounds[i])`` per entry, independently and exactly.

        The same rejection as :meth:`below`, with one acceptance limit per lane: a 64-bit word
        ``w`` is kept for lane ``i`` only if ``w`` is below the largest multiple of
        ``bounds[i]`` that fits in 2**64 (``2**64 mod b`` is ``(2**64 - b) mod b``, computed in
        uint64), so every residue is equally likely. Each pass keeps a lane with probability
        above 1/2, so the loop ends with probability 1 (after about one pass).

        Raises:
            ValueError: if any bound is not in [1, 2**63].
        """
        bounds = np.asarray(bounds)
        if bounds.ndim != 1 or (bounds.size and bounds.dtype.kind not in "iu"):
            raise ValueError("'bounds' must be a one-dimensional array of integers")
        if bounds.size and (int(bounds.min()) < 1 or int(bounds.max()) > (1 << 63)):
            raise ValueError("'bounds' must hold integers in [1, 2**63]")
        wide = bounds.astype(np.uint64)
        # largest accepted word: 2**64 - 1 - (2**64 mod b)
        limits = np.uint64(_TWO_64 - 1) - (np.uint64(0) - wide) % wide
        out = np.empty(bounds.size, dtype=np.int64)
        todo = np.arange(bounds.size)
        while todo.size:
            words = self.words64(todo.size)
            ok = words <= limits[todo]
            out[todo[ok]] = (words[ok] % wide[todo[ok]]).astype(np.int64)
            todo = todo[~ok]
        return out

    def randbelow(self, bound: int) -> int:
        """Return one integer uniform on ``[0, bound)`` for any positive Python int."""
        if bound < 1:
            raise ValueError(f"'bound' must be >= 1; received {bound}")
        if bound <= (1 << 63):
            return int(self.below(bound, 1)[0])
        nbits = bound.bit_length()
        nbytes = (nbits + 7) // 8
        while True:
            value = int.from_bytes(self.random_bytes(nbytes), "little") >> (8 * nbytes - nbits)
            if value < bound:
                return value


class SecureRandom(RandomSource):
    """Random bits from the operating system's CSPRNG (``os.urandom``). The default."""

    secure = True

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def __repr__(self) -> str:
        return "SecureRandom()"


class InsecureSeededRandom(RandomSource):
    """A seeded, NON-cryptographic source for reproducible tests only.

    Anyone who knows the seed can predict every release made with it. Creating one emits an
    :class:`InsecureRandomWarning`, and releases made with it are marked insecure.
    """

    secure = False

    def __init__(self, seed: int | None = None, *, generator: np.random.Generator | None = None):
        warnings.warn(
            "InsecureSeededRandom is a seeded pseudo-random generator for tests; releases made "
            "with it are NOT private against anyone who can learn or guess the seed. "
            "Use rng=None (the OS CSPRNG) in production.",
            InsecureRandomWarning,
            stacklevel=2,
        )
        self._generator = generator if generator is not None else np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._generator.bytes(n)

    def __repr__(self) -> str:
        return "InsecureSeededRandom(<seeded, tests only>)"


def as_random_source(rng: RandomSource | np.random.Generator | None) -> RandomSource:
    """Resolve the ``rng`` argument of a sampler.

    ``None`` gives :class:`SecureRandom`; a :class:`RandomSource` is used as is; a numpy
    ``Generator`` is wrapped as an :class:`InsecureSeededRandom` (and warns).
    """
    if rng is None:
        return SecureRandom()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return InsecureSeededRandom(generator=rng)
    raise TypeError(
        "'rng' must be None (the OS CSPRNG), a beam_dp RandomSource or a numpy Generator; "
        f"received type {type(rng).__name__}"
    )
