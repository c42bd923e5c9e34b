"""Does the KS sampler's running time give away one person? (issue 22, item 5)

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m benchmarks.cdf_timing            # ~15-30 min
    PYTHONPATH=. .venv/bin/python -m benchmarks.cdf_timing --quick    # seconds (smoke test)

Sections (``--only reported|small|acceptance`` runs one):

1. **reported**: the issue's case. D = 1 000 people at 0 and 1 000 at 100, D' = D plus one
   person at 50; a uniform grid of 10^4 points on [0, 100], k = 100, epsilon = 1,
   ``add_remove`` with the count released on 1/10 of epsilon: :func:`release_ks_cdf`, the
   call ``PrivateCDF`` makes. Releases alternate D, D' (so that load drifts hit both alike);
   wall and CPU seconds per release (min / median / max) per dataset and the ratios of the
   medians. Then
   the sampler's work counters (:attr:`Sampler.work`, one plan and one draw at the public
   ``n̂ = 2 000``) on both: every counter must be equal.
2. **small**: the same shape at 1 000 grid points, k = 30, 100 + 100 people (+1), with more
   repeats.
3. **acceptance**: the plan's lower bound ``p`` on the chance that a round is accepted and
   the bound ``(1 - p)**R`` on the chance that a draw needs more than the ``R`` padded rounds
   (the one event in which the work grows with the data), over a panel of datasets and
   parameters; this is what the default budgets were chosen on.
4. **others**: the review of the other samplers (``docs/timing.md``): random bytes and
   calls a counting source serves them, and milliseconds, on neighbouring inputs.

Timings are wall-clock on whatever else the machine runs; the counters are exact.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.cdf import KSMechanism, ks_suggested_k, release_ks_cdf
from beam_dp.mechanisms.cdf.ks import Sampler, Work
from beam_dp.mechanisms.cdf.plan import default_band_counts

Generator = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]


def grid_counts(values: Sequence[float], m: int, upper: float) -> list[int]:
    """``N_i = #(x <= g_i)`` on ``m`` uniform grid points over ``[0, upper]``."""
    grid = np.linspace(0.0, upper, m)
    ordered = np.sort(np.clip(np.asarray(values, dtype=np.float64), 0.0, upper))
    counts = np.searchsorted(ordered, grid, side="right")
    counts[-1] = ordered.size
    return [int(c) for c in counts]


def reported_pair(people: int, m: int) -> tuple[list[int], list[int]]:
    """D (``people`` at 0 and ``people`` at 100) and D' (one more person at 50)."""
    d = [0.0] * people + [100.0] * people
    return grid_counts(d, m, 100.0), grid_counts([*d, 50.0], m, 100.0)


def time_releases(
    pair: tuple[list[int], list[int]], m: int, k: int, repeats: int
) -> tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]]:
    """Wall and CPU seconds (``process_time``: less sensitive to the machine's other jobs)
    of ``repeats`` releases of each dataset, alternating."""
    grid = np.linspace(0.0, 100.0, m)
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for which, counts in enumerate(pair):
            start, start_cpu = time.perf_counter(), time.process_time()
            release_ks_cdf(counts, grid_points=grid, k=k, epsilon=1.0, relation="add_remove")
            wall[which].append(time.perf_counter() - start)
            cpu[which].append(time.process_time() - start_cpu)
    return wall, cpu


def work_of(counts: list[int], mechanism: KSMechanism) -> Work:
    """The work of one plan and one draw."""
    sampler = Sampler(counts, mechanism)
    sampler.draw(SecureRandom())
    return sampler.work


def neighbours(label: str, people: int, m: int, k: int, repeats: int) -> None:
    pair = reported_pair(people, m)
    print(f"\n## {label}: D = {people:,} at 0 + {people:,} at 100, D' = D + 1 at 50")
    print(f"(m = {m:,} grid points on [0, 100], k = {k}, epsilon = 1, add_remove, count ")
    print(f"released; {repeats} releases each, alternating)\n")
    wall, cpu = time_releases(pair, m, k, repeats)
    print("| dataset | wall s: min | median | max | CPU s: min | median | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, seconds, cpu_seconds in (("D", wall[0], cpu[0]), ("D'", wall[1], cpu[1])):
        print(
            f"| {name} | {min(seconds):.2f} | {statistics.median(seconds):.2f} | "
            f"{max(seconds):.2f} | {min(cpu_seconds):.2f} | "
            f"{statistics.median(cpu_seconds):.2f} | {max(cpu_seconds):.2f} |"
        )
    ratio = statistics.median(wall[1]) / statistics.median(wall[0])
    cpu_ratio = statistics.median(cpu[1]) / statistics.median(cpu[0])
    print(f"\nratio of medians D'/D: wall {ratio:.3f}, CPU {cpu_ratio:.3f}")
    mechanism = KSMechanism(
        k=k, epsilon=Fraction(9, 10), relation="add_remove", n_public=2 * people
    )
    works = [work_of(counts, mechanism) for counts in pair]
    print("\n| counter | D | D' |")
    print("|---|---:|---:|")
    for field in works[0].__dataclass_fields__:
        print(f"| {field} | {getattr(works[0], field):,} | {getattr(works[1], field):,} |")
    print(f"\nwork equal: {works[0] == works[1]}")


def lognormal(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    return rng.lognormal(0.0, 1.0, n) * 5.0


def bimodal(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    first = rng.random(n) < 0.5
    return np.where(first, rng.normal(30.0, 5.0, n), rng.normal(70.0, 8.0, n))


def ties(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    """54% of the rows at one value (the issue's hours column), the rest uniform integers."""
    heavy = int(0.54 * n)
    return np.concatenate([np.full(heavy, 40.0), rng.integers(0, 100, n - heavy)])


def point_masses(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    return np.repeat([0.0, 100.0], [n // 2, n - n // 2]).astype(np.float64)


PANEL: dict[str, Generator] = {
    "lognormal": lognormal,
    "bimodal": bimodal,
    "ties": ties,
    "point masses": point_masses,
}


def acceptance(quick: bool) -> None:
    rng = np.random.default_rng(22)
    ms = [50] if quick else [300, 1_000]
    ks = [10] if quick else [30, 100, 300]
    ns = [10**3] if quick else [10**2, 10**3, 10**5]
    epsilons = [1.0] if quick else [0.3, 1.0, 5.0]
    print("\n## Acceptance of the plan (default budgets, replace)\n")
    print("| data | m | k | n | epsilon | band counts | exact | p (lower bound) | (1-p)^R |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    worst = 1.0
    for name, generate in PANEL.items():
        for m in ms:
            for k in ks:
                if m * (k + 1) > 400_000:
                    continue
                for n in ns:
                    counts = grid_counts(generate(rng, n).tolist(), m, 100.0)
                    for epsilon in epsilons:
                        mechanism = KSMechanism(k=k, epsilon=Fraction(epsilon), relation="replace")
                        sampler = Sampler(counts, mechanism)
                        p = sampler.acceptance_bound
                        worst = min(worst, p)
                        overflow = 0.0 if sampler.exact else (1 - p) ** sampler.rounds
                        print(
                            f"| {name} | {m:,} | {k} | {n:,} | {epsilon} | "
                            f"{default_band_counts(k)} | {sampler.exact} | {p:.3f} | "
                            f"{overflow:.1e} |"
                        )
    print("\nAt the k that ks_suggested_k picks (what release_ks_cdf does with k=None):\n")
    print("| data | m | k | n | epsilon | band counts | exact | p (lower bound) | (1-p)^R |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for name, generate in PANEL.items():
        for m in ms:
            for n in ns:
                counts = grid_counts(generate(rng, n).tolist(), m, 100.0)
                for epsilon in epsilons:
                    k = min(ks_suggested_k(m, epsilon=epsilon, n=n), 400_000 // m)
                    mechanism = KSMechanism(k=k, epsilon=Fraction(epsilon), relation="replace")
                    sampler = Sampler(counts, mechanism)
                    p = sampler.acceptance_bound
                    worst = min(worst, p)
                    overflow = 0.0 if sampler.exact else (1 - p) ** sampler.rounds
                    print(
                        f"| {name} | {m:,} | {k} | {n:,} | {epsilon} | "
                        f"{default_band_counts(k)} | {sampler.exact} | {p:.3f} | "
                        f"{overflow:.1e} |"
                    )
    print(f"\nsmallest acceptance bound: {worst:.3f}")


class CountingSource(SecureRandom):
    """The OS CSPRNG, counting the bytes and the calls served."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0

    def random_bytes(self, n: int) -> bytes:
        self.bytes += n
        self.calls += 1
        return super().random_bytes(n)


def served(
    draws: Sequence[Callable[[CountingSource], object]], runs: int
) -> list[tuple[float, float, float]]:
    """Mean bytes, mean calls and median milliseconds of ``runs`` calls of each of ``draws``.

    The draws alternate (one of each per turn), so that a drift in the machine's load hits
    neighbouring inputs alike.
    """
    sizes: list[list[int]] = [[] for _ in draws]
    calls: list[list[int]] = [[] for _ in draws]
    seconds: list[list[float]] = [[] for _ in draws]
    for _ in range(runs):
        for index, draw in enumerate(draws):
            source = CountingSource()
            start = time.perf_counter()
            draw(source)
            seconds[index].append(time.perf_counter() - start)
            sizes[index].append(source.bytes)
            calls[index].append(source.calls)
    return [
        (statistics.fmean(size), statistics.fmean(call), 1e3 * statistics.median(second))
        for size, call, second in zip(sizes, calls, seconds, strict=True)
    ]


def others(quick: bool) -> None:
    from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples, bernoulli_exp_multiples_walk
    from beam_dp.mechanisms.per_key import select_per_key
    from beam_dp.mechanisms.selection import select
    from beam_dp.summaries.quantiles.joint import _pair_rounds, pair_scores

    runs = 5 if quick else 200
    print("\n## Other samplers on neighbouring inputs (bytes, calls: means; ms: median)\n")
    print("| sampler | input | bytes | calls | ms |")
    print("|---|---|---:|---:|---:|")

    def row(name: str, label: str, figures: tuple[float, float, float]) -> None:
        print(f"| {name} | {label} | {figures[0]:,.0f} | {figures[1]:.2f} | {figures[2]:.2f} |")

    d = 100 if quick else 10_000
    votes = np.zeros(d, dtype=np.int64)
    plus_one = votes.copy()
    plus_one[7] = 1
    for method in ("exponential", "permute_and_flip"):
        labelled = ((f"{d:,} candidates, no votes", votes), ("one vote more", plus_one))
        figures = served(
            [
                lambda s, scores=scores, method=method: select(
                    scores, epsilon=1.0, sensitivity=1, monotonic=True, method=method, rng=s
                )
                for _, scores in labelled
            ],
            runs,
        )
        for (label, _), figure in zip(labelled, figures, strict=True):
            row(f"select, {method}", label, figure)
    keys = np.zeros((20 if quick else 2_000, 50), dtype=np.int64)
    one_key = keys.copy()
    one_key[0, 3] = 1
    for method in ("exponential", "permute_and_flip"):
        keyed = ((f"{keys.shape[0]:,} keys x 50, no votes", keys), ("one vote more", one_key))
        figures = served(
            [
                lambda s, scores=scores, method=method: select_per_key(
                    scores, epsilon=1.0, sensitivity=1, monotonic=True, method=method, rng=s
                )
                for _, scores in keyed
            ],
            max(runs // 5, 2),
        )
        for (label, _), figure in zip(keyed, figures, strict=True):
            row(f"select_per_key, {method}", label, figure)
    multiples = [np.array([0, gap] * 500, dtype=np.int64) for gap in (1, 1_000)]
    for name, coins in (
        ("bernoulli_exp_multiples", bernoulli_exp_multiples),
        ("bernoulli_exp_multiples_walk (proposals only)", bernoulli_exp_multiples_walk),
    ):
        figures = served(
            [
                lambda s, gaps=gaps, coins=coins: coins(Fraction(1, 2), gaps, s)
                for gaps in multiples
            ],
            runs,
        )
        for gap, figure in zip((1, 1_000), figures, strict=True):
            row(name, f"1 000 multiples up to {gap:,}", figure)
    rng = np.random.default_rng(1)
    shapes = {
        "300 values tied": [50] * 300,
        "two blocks of 150": [20] * 150 + [180] * 150,
        "300 uniform values": rng.integers(0, 200, 300).tolist(),
    }
    for label, values in shapes.items():
        counts = np.bincount(np.asarray(values), minlength=200).astype(np.int64)
        cumulative = np.cumsum(counts)
        less, greater = cumulative - counts, cumulative[-1] - cumulative
        first, second, common = pair_scores(less, counts, greater, (Fraction(1, 4), Fraction(3, 4)))
        rate = Fraction(1, 2) / (2 * common)
        rounds = [_pair_rounds(first, second, rate, SecureRandom())[2] for _ in range(runs * 15)]
        print(f"| joint select_pair | {label} | | mean rounds {statistics.fmean(rounds):.2f} | |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", choices=["reported", "small", "acceptance", "others"])
    parser.add_argument("--repeats", type=int, default=5, help="releases per dataset")
    args = parser.parse_args(argv)
    if args.only in (None, "reported") and not args.quick:
        neighbours("Reported case", 1_000, 10_000, 100, args.repeats)
    if args.only in (None, "small"):
        if args.quick:
            neighbours("Small case", 20, 100, 5, 1)
        else:
            neighbours("Small case", 100, 1_000, 30, 4 * args.repeats)
    if args.only in (None, "acceptance"):
        acceptance(args.quick)
    if args.only in (None, "others"):
        others(args.quick)


if __name__ == "__main__":
    main()
