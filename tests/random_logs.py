"""A seeded random source that logs every request it serves: the grey-box replays compare
these logs on neighbouring inputs (docs/timing.md)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.randomness import InsecureSeededRandom


class WorkLog(InsecureSeededRandom):
    """A seeded source that logs every request, at every depth (a request made inside another
    is logged too): each pass of a sampler's loops asks for bits, so the log counts them."""

    def __init__(self, seed: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            super().__init__(seed)
        self.log: list[tuple[Any, ...]] = []

    def random_bytes(self, n: int) -> bytes:
        self.log.append(("bytes", n))
        return super().random_bytes(n)

    def words16(self, n: int) -> npt.NDArray[np.uint16]:
        self.log.append(("words16", n))
        return super().words16(n)

    def words32(self, n: int) -> npt.NDArray[np.uint32]:
        self.log.append(("words32", n))
        return super().words32(n)

    def words64(self, n: int) -> npt.NDArray[np.uint64]:
        self.log.append(("words64", n))
        return super().words64(n)

    def below(self, bound: int, n: int) -> npt.NDArray[np.int64]:
        self.log.append(("below", int(bound), int(n)))
        return super().below(bound, n)

    def below_each(self, bounds: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        self.log.append(("below_each", tuple(np.asarray(bounds).tolist())))
        return super().below_each(bounds)

    def randbelow(self, bound: int) -> int:
        self.log.append(("randbelow", int(bound)))
        return super().randbelow(bound)
