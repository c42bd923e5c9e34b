"""The KS release a pipeline returns: the released count under add_remove, its exact joint law
with the synthetic points, privacy of the pair on neighbours, the accuracy bound, the frozen
result's reading (step CDF, quantiles) and fail-closed parameters."""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.cdf import (
    DEFAULT_COUNT_SHARE,
    KSRelease,
    count_error_bound,
    ks_accuracy_bound,
    ks_pmf_bruteforce,
    ks_suggested_k,
    release_count,
    release_ks_cdf,
    sample_ks_synthetic,
)


def _counts(values: list[int], m: int) -> list[int]:
    per_point = [0] * m
    for v in values:
        per_point[v] += 1
    return list(itertools.accumulate(per_point))


def _count_pmf(n: int, v: int, epsilon: float | Fraction, c: int) -> float:
    """P(max(0, n + Z) = v), Z discrete Laplace with P(Z = z) ∝ a**|z|, a = exp(-ε/c)."""
    a = math.exp(-float(epsilon) / c)
    if v < 0:
        return 0.0
    if v == 0:  # P(Z <= -n) = a**n / (1 + a) (n >= 0)
        return a**n / (1 + a)
    return (1 - a) / (1 + a) * a ** abs(v - n)


def _joint_pmf(
    counts: list[int], k: int, epsilon: float, share: float, c: int, window: range
) -> dict[tuple[int, tuple[int, ...]], float]:
    """P(n_hat = v, points = z) for v in window (composition: count, then KS given it)."""
    n = counts[-1]
    out: dict[tuple[int, tuple[int, ...]], float] = {}
    for v in window:
        pv = _count_pmf(n, v, share * epsilon, c)
        law = ks_pmf_bruteforce(
            counts,
            k=k,
            epsilon=(1 - share) * epsilon,
            relation="add_remove",
            n_public=v,
            max_contributions=c,
        )
        for z, p in law.items():
            out[(v, z)] = pv * p
    return out


# ------------------------------------------------------------------ the released count


def test_released_count_draws_the_clamped_discrete_laplace_law() -> None:
    n, epsilon, c = 2, Fraction(7, 10), 2  # a Fraction: a float's exact value is slower
    draws = [release_count(n, epsilon=epsilon, max_contributions=c) for _ in range(4_000)]
    support = list(range(0, 25))
    observed = np.array(
        [sum(d == v for d in draws) for v in support] + [sum(d >= 25 for d in draws)]
    )
    law = [_count_pmf(n, v, epsilon, c) for v in support]
    expected = np.array([*law, 1 - math.fsum(law)])
    assert chi_square_pvalue(observed, expected) > FPR


@pytest.mark.parametrize(("epsilon", "c", "beta"), [(1.0, 1, 0.025), (0.1, 3, 1e-6), (5.0, 1, 0.4)])
def test_count_error_bound_is_the_smallest_with_its_failure_probability(
    epsilon: float, c: int, beta: float
) -> None:
    e = count_error_bound(epsilon, failure_probability=beta, max_contributions=c)
    a = math.exp(-epsilon / c)

    def tail(j: int) -> float:  # P(|Z| > j), summed term by term
        return 2 * math.fsum((1 - a) / (1 + a) * a**z for z in range(j + 1, j + 4000))

    assert tail(e) <= beta * (1 + 1e-9)
    assert e == 0 or tail(e - 1) > beta


# ------------------------------------------------------------------ exact law of the release


def test_release_with_a_released_count_draws_the_joint_law() -> None:
    counts, k, epsilon, share, c = [1, 3, 3, 6], 2, 2.0, 0.5, 1
    n = counts[-1]
    window = range(n - 4, n + 5)
    law = _joint_pmf(counts, k, epsilon, share, c, window)
    cells = sorted(law)
    index = {cell: i for i, cell in enumerate(cells)}
    observed = np.zeros(len(cells) + 1, dtype=np.int64)  # the last cell: n_hat outside window
    source = SecureRandom()
    for _ in range(3_000):
        release = release_ks_cdf(
            counts,
            grid_points=[0.0, 1.0, 2.0, 3.0],
            k=k,
            epsilon=epsilon,
            count_share=share,
            rng=source,
        )
        assert release.count_released and release.epsilon == epsilon
        observed[index.get((release.n_hat, release.points), len(cells))] += 1
    probabilities = np.array([law[cell] for cell in cells])
    expected = np.append(probabilities, 1 - probabilities.sum())
    assert chi_square_pvalue(observed, expected) > FPR


@pytest.mark.parametrize(
    ("relation", "n_public"), [("replace", None), ("add_remove", 5), ("add_remove", 13)]
)
def test_release_with_a_public_size_draws_the_brute_force_law(
    relation: str, n_public: int | None
) -> None:
    counts, k, epsilon = [0, 2, 5, 5, 9], 2, 1.5
    law = ks_pmf_bruteforce(counts, k=k, epsilon=epsilon, relation=relation, n_public=n_public)
    support = sorted(law)
    index = {z: i for i, z in enumerate(support)}
    observed = np.zeros(len(support), dtype=np.int64)
    for _ in range(1_200):
        release = release_ks_cdf(
            counts,
            grid_points=[1, 2, 4, 8, 16],
            k=k,
            epsilon=epsilon,
            relation=relation,
            n_public=n_public,
        )
        assert not release.count_released and release.count_epsilon == 0.0
        assert release.n_hat == (counts[-1] if n_public is None else n_public)
        observed[index[release.points]] += 1
    assert chi_square_pvalue(observed, np.array([law[z] for z in support])) > FPR


# ------------------------------------------------------------------ privacy of the pair


@st.composite
def _add_remove_neighbours(draw: st.DrawFn) -> tuple[list[int], list[int], int, int]:
    m = draw(st.integers(1, 4))
    k = draw(st.integers(1, 3))
    c = draw(st.integers(1, 2))
    values = draw(st.lists(st.integers(0, m - 1), max_size=6))
    added = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=c))
    return _counts(values + added, m), _counts(values, m), k, c


@settings(max_examples=80, deadline=None)
@given(_add_remove_neighbours(), st.sampled_from([0.3, 1.0, 3.0]), st.sampled_from([0.1, 0.5]))
def test_count_and_points_together_lose_at_most_epsilon_on_neighbours(
    pair: tuple[list[int], list[int], int, int], epsilon: float, share: float
) -> None:
    x, neighbour, k, c = pair
    window = range(0, x[-1] + c + 6)
    p = _joint_pmf(x, k, epsilon, share, c, window)
    q = _joint_pmf(neighbour, k, epsilon, share, c, window)
    worst = max(abs(math.log(p[cell] / q[cell])) for cell in p)
    assert worst <= epsilon + 1e-9


def test_the_privacy_check_would_catch_a_count_without_its_share() -> None:
    # The same joint law with the count at the full epsilon (its share not subtracted from
    # the KS mechanism) loses more than epsilon on some neighbours: the check above can fail.
    # (found by listing small neighbours: this pair loses about 2 epsilon)
    x, neighbour, k, c, epsilon = _counts([1, 1, 1, 0], 2), _counts([1, 1, 1], 2), 1, 1, 1.0

    def joint(counts: list[int]) -> dict[tuple[int, tuple[int, ...]], float]:
        out = {}
        for v in range(0, 12):
            law = ks_pmf_bruteforce(counts, k=k, epsilon=epsilon, n_public=v)
            for z, pz in law.items():
                out[(v, z)] = _count_pmf(counts[-1], v, epsilon, c) * pz
        return out

    p, q = joint(x), joint(neighbour)
    assert max(abs(math.log(p[cell] / q[cell])) for cell in p) > 1.9 * epsilon


# ------------------------------------------------------------------ accuracy


def test_ks_bound_with_a_released_count_holds_with_its_confidence() -> None:
    # Exactly, from the joint law: P(KS to N/n > bound(n_hat)) <= 1 - confidence, counting
    # every n_hat outside the listed window as a failure.
    rng = np.random.default_rng(8)
    counts = _counts(list(rng.integers(0, 4, 200)), 4)
    n, k, epsilon, share = counts[-1], 3, 2.0, 0.1
    window = range(n - 80, n + 81)
    law = _joint_pmf(counts, k, epsilon, share, 1, window)
    e = count_error_bound(share * epsilon, failure_probability=0.025)
    failing = 1 - math.fsum(law.values())
    for (v, z), p in law.items():
        bound = ks_accuracy_bound(
            4, k, epsilon=(1 - share) * epsilon, n=v, confidence=0.975, count_error=e
        )
        assert bound < 1.0  # not a vacuous check
        path = _counts(list(z), 4)
        distance = max(abs(Fraction(counts[i], n) - Fraction(path[i], k)) for i in range(4))
        if distance > bound:
            failing += p
    assert failing <= 0.05


def test_release_reports_the_bound_of_its_parameters() -> None:
    counts = _counts([0, 1, 1, 2, 3, 3, 3] * 30, 4)
    grid = [0.0, 0.5, 1.0, 2.0]
    public = release_ks_cdf(counts, grid_points=grid, k=3, epsilon=1.0, relation="replace")
    assert public.ks_bound == ks_accuracy_bound(4, 3, epsilon=1.0, n=counts[-1])
    noisy = release_ks_cdf(counts, grid_points=grid, k=3, epsilon=1.0, confidence=0.9)
    e = count_error_bound(Fraction(1, 10), failure_probability=0.05)
    assert noisy.count_error == e and noisy.count_epsilon == pytest.approx(0.1)
    assert noisy.ks_bound == ks_accuracy_bound(
        4, 3, epsilon=0.9, n=noisy.n_hat, confidence=0.95, count_error=e
    )
    assert Fraction(1, 10) == DEFAULT_COUNT_SHARE


def test_k_none_is_chosen_from_the_normaliser_the_release_uses() -> None:
    counts = _counts([0, 1, 1, 2, 3, 3, 3] * 300, 50)
    grid = [float(g) for g in range(50)]
    public = release_ks_cdf(counts, grid_points=grid, k=None, epsilon=1.0, relation="replace")
    assert public.k == ks_suggested_k(50, epsilon=1.0, n=counts[-1]) > 1
    assert len(public.points) == public.k
    # With a released count: k from the count and its error bound (post-processing).
    noisy = release_ks_cdf(counts, grid_points=grid, k=None, epsilon=1.0, confidence=0.9)
    assert noisy.count_released and noisy.k == ks_suggested_k(
        50, epsilon=0.9, n=noisy.n_hat, confidence=0.95, count_error=noisy.count_error
    )
    assert noisy.ks_bound == ks_accuracy_bound(
        50, noisy.k, epsilon=0.9, n=noisy.n_hat, confidence=0.95, count_error=noisy.count_error
    )
    capped = release_ks_cdf(
        counts, grid_points=grid, k=None, max_k=2, epsilon=1.0, relation="replace"
    )
    assert capped.k == 2
    with pytest.raises(ValueError, match="'max_k' applies only with k=None"):
        release_ks_cdf(counts, grid_points=grid, k=3, max_k=2, epsilon=1.0, relation="replace")
    with pytest.raises(ValueError, match="'max_k'"):
        release_ks_cdf(counts, grid_points=grid, k=None, max_k=0, epsilon=1.0)
    with pytest.raises(TypeError, match="'k' is required"):
        sample_ks_synthetic(counts, k=None, epsilon=1.0, relation="replace")


# ------------------------------------------------------------------ the frozen result


def _release(points: tuple[int, ...], grid: tuple[float, ...]) -> KSRelease:
    path = tuple(_counts(list(points), len(grid)))
    return KSRelease(
        grid=grid,
        points=points,
        cumulative=path,
        k=len(points),
        n_hat=10,
        count_released=False,
        epsilon=1.0,
        count_epsilon=0.0,
        relation="replace",
        max_contributions=1,
        confidence=0.95,
        ks_bound=0.5,
        count_error=0,
        secure=True,
    )


def test_the_release_reads_as_a_step_cdf_with_quantiles() -> None:
    release = _release((0, 2, 2, 3), (1.0, 2.0, 4.0, 8.0))
    assert release.values == (1.0, 4.0, 4.0, 8.0)
    assert release.cdf == (0.25, 0.25, 0.75, 1.0)
    assert [release.cdf_at(x) for x in (0.5, 1.0, 3.9, 4.0, 100.0)] == [0, 0.25, 0.25, 0.75, 1]
    # the smallest grid point with F >= alpha
    assert release.quantiles([0.1, 0.25, 0.26, 0.5, 0.75, 0.99]) == (1, 1, 4, 4, 4, 8)
    assert release.quantile(Fraction(3, 4)) == 4.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        release.k = 3  # type: ignore[misc]
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="'alpha'"):
            release.quantile(bad)
    with pytest.raises(ValueError, match="'x'"):
        release.cdf_at(float("nan"))


def test_a_release_has_consistent_fields() -> None:
    counts = _counts([0, 1, 1, 4, 4, 4], 5)
    release = release_ks_cdf(counts, grid_points=range(5), k=4, epsilon=2.0, relation="replace")
    assert len(release.points) == 4 and list(release.points) == sorted(release.points)
    assert release.cumulative == tuple(_counts(list(release.points), 5))
    assert release.grid == (0.0, 1.0, 2.0, 3.0, 4.0) and release.secure


# ------------------------------------------------------------------ fail closed

SECRET = 987_654


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"count_share": 0.0}, ValueError, "'count_share'"),
        ({"count_share": 1.0}, ValueError, "'count_share'"),
        ({"count_share": float("nan")}, ValueError, "'count_share'"),
        ({"count_share": 0.5, "n_public": 3}, ValueError, "'count_share'"),
        ({"count_share": 0.5, "relation": "replace"}, ValueError, "'count_share'"),
        ({"confidence": 1.0}, ValueError, "'confidence'"),
        ({"grid_points": [0.0, 1.0]}, ValueError, "'grid_points'"),
        ({"grid_points": [0.0, 2.0, 1.0]}, ValueError, "'grid_points'"),
        ({"grid_points": [0.0, 1.0, float("inf")]}, ValueError, "'grid_points'"),
        ({"epsilon": -1.0}, ValueError, "'epsilon'"),
        ({"relation": "bounded"}, ValueError, "'relation'"),
        ({"k_points": 3}, TypeError, "'k_points'"),
        ({"counts": [SECRET, 1, 2]}, ValueError, "'cumulative_counts'"),
    ],
)
def test_bad_parameters_fail_closed_without_showing_counts(
    kwargs: dict[str, object], error: type[Exception], fragment: str
) -> None:
    arguments: dict[str, object] = {"k": 2, "epsilon": 1.0, "grid_points": [0.0, 1.0, 2.0]}
    arguments.update(kwargs)
    counts = arguments.pop("counts", [1, 5, SECRET])
    with pytest.raises(error) as raised:
        release_ks_cdf(counts, **arguments)  # type: ignore[arg-type]
    assert fragment in str(raised.value)
    assert str(SECRET) not in str(raised.value)
