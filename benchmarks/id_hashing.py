"""Throughput of the privacy-unit hash: the identity rule against ids taken as given.

``canonical_hash64(column, "exact")`` is the reading every release used before the identity
rule (issue 22): canonical decimal text is the integer, other text byte for byte. The default
``"normalize"`` adds the text rule (Unicode canonical decomposition, lower case, stripping,
numbers read as numbers; :mod:`beam_dp.batching.hashing`). This measures both on columns of
``--rows`` ids of the shapes an export holds, alternating the two rules so that a busy machine
slows both alike, and prints the best time of each and their ratio. ``--quick`` is the smoke
run of the test suite.

    python -m benchmarks.id_hashing            # 10^6 ids per column, 7 rounds
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from beam_dp.batching.hashing import canonical_hash64


def columns(rows: int, seed: int = 1) -> dict[str, pa.Array]:
    """Id columns of ``rows`` values: integers, and the text forms exports write."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 10**9, rows)
    halves = rng.integers(0, 2**63, (rows, 2))
    uuids = [uuid.UUID(int=int(a) << 64 | int(b), version=4) for a, b in halves]
    return {
        "int64": pa.array(ids, type=pa.int64()),
        "digits as text": pa.array([str(x) for x in ids]),
        "pandas floats (12.0)": pa.array([f"{x}.0" for x in ids]),
        "u%08x": pa.array([f"u{x:08x}" for x in ids]),
        "U%08X (upper case)": pa.array([f"U{x:08X}" for x in ids]),
        "uuid4 hex": pa.array([u.hex for u in uuids]),
        "UUID4 upper, dashed": pa.array([str(u).upper() for u in uuids]),
        "names, 1% non-ASCII": pa.array(
            [(f"josé{x}" if x % 100 == 0 else f"jose{x}") for x in ids]
        ),
    }


def best_of(rounds: int, calls: Sequence[Callable[[], object]]) -> list[float]:
    """The best wall time (seconds) of each call over ``rounds`` alternating rounds."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for i, call in enumerate(calls):
            start = time.perf_counter()
            call()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**6)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="10^4 ids, 2 rounds")
    args = parser.parse_args(argv)
    rows, rounds = (10**4, 2) if args.quick else (args.rows, args.rounds)
    results: dict[str, tuple[float, float]] = {}
    print(f"| column ({rows:,} ids) | exact (ms) | normalize (ms) | normalize / exact |")
    print("|---|---:|---:|---:|")
    for name, column in columns(rows).items():
        exact, normal = best_of(
            rounds,
            [lambda c=column: canonical_hash64(c, "exact"), lambda c=column: canonical_hash64(c)],
        )
        results[name] = (exact, normal)
        print(f"| {name} | {exact * 1e3:.1f} | {normal * 1e3:.1f} | {normal / exact:.2f} |")
    return results


if __name__ == "__main__":
    main()
