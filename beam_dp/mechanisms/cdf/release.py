"""A private CDF of a column as one release: what the Beam transform returns (pure, no Beam).

:func:`release_ks_cdf` takes the cumulative counts of a merged grid histogram
(:func:`~beam_dp.mechanisms.cdf.ks.cumulative_counts_from_slots`) and the public grid, and
returns a frozen :class:`KSRelease`: the ``k`` synthetic points, the step CDF they define, any
quantile read from it, and a KS bound at the requested confidence.

**The normaliser.** Under ``replace`` the dataset size ``n`` is public and used. Under
``add_remove`` it is private: pass a public ``n_public``, or leave it out and a share
``count_share`` of epsilon (default :data:`DEFAULT_COUNT_SHARE`) releases
``n̂ = max(0, n + Z)`` with ``Z`` exact discrete Laplace of scale ``c / ε_count``
(:func:`release_count`; one unit moves ``n`` by at most ``c``), and the KS mechanism runs on
the rest of epsilon with ``n̂`` as its public normaliser. Why a small share: the KS term of the
error bound grows with ``ln C(m + k - 1, k)`` (hundreds for ``m = 1000``, ``k = 100``), the
count's with ``ln(1/β)`` (a few), so the split that minimises their sum puts about a tenth of
epsilon on the count (``sqrt(ln(1/β)) / (sqrt(ln(1/β)) + sqrt(ln C))``).

**Quantiles** are read from the released step CDF ``F(g_i) = C_i / k`` as post-processing
(no extra epsilon): the ``α``-quantile is the smallest grid point with ``F >= α``.

**Accuracy.** ``ks_bound`` bounds, with probability ``>= confidence``, the largest
``|F(g_i) - N_i / n|`` over the grid points (the KS distance between the release and the
data's empirical CDF after the public snap-to-grid rule; the grid's own resolution is public
and not included). With a released count the failure probability is split in half between the
count's error bound (:func:`~beam_dp.mechanisms.cdf.accuracy.count_error_bound`) and the KS
mechanism's (:func:`~beam_dp.mechanisms.cdf.accuracy.ks_accuracy_bound`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    to_fraction,
)
from beam_dp.mechanisms.cdf.accuracy import count_error_bound, ks_accuracy_bound, ks_suggested_k
from beam_dp.mechanisms.cdf.bands import points_from_path
from beam_dp.mechanisms.cdf.ks import Sampler
from beam_dp.mechanisms.cdf.params import (
    MAX_CELLS,
    KSParameters,
    check_count_parameter,
    check_cumulative_counts,
    check_size,
    mechanism_from,
)
from beam_dp.mechanisms.cdf.plan import PlanOptions
from beam_dp.mechanisms.partition_selection import discrete_laplace
from beam_dp.mechanisms.randomness import RandomSource, as_random_source

__all__ = ["DEFAULT_COUNT_SHARE", "KSRelease", "release_count", "release_ks_cdf"]

#: The share of epsilon spent on the count under ``add_remove`` without a public ``n``.
DEFAULT_COUNT_SHARE = Fraction(1, 10)

#: The chance that the released count is further from ``n`` than the bound that sizes the
#: sampler's columns (then its work grows, revealing that the noise was this large).
_WIDTH_FAILURE = 2.0**-40


@dataclass(frozen=True)
class KSRelease:
    """One private CDF: ``k`` synthetic points on a public grid and what follows from them.

    Every field is public: parameters, the grid, and released values.

    Attributes:
        grid: the public grid points ``g_0 < ... < g_{m-1}``.
        points: the ``k`` synthetic points as sorted grid indices (repeats allowed).
        cumulative: ``C_i = #(points <= i)`` per grid point (``C_{m-1} = k``).
        k: the number of synthetic points.
        n_hat: the normaliser the release used: the public size, or the released count.
        count_released: whether ``n_hat`` was released here (``add_remove`` without a public
            size), spending ``count_epsilon``.
        epsilon: epsilon spent in total (count and KS mechanism).
        count_epsilon: the count's share (0 when the size was public).
        relation: the neighbouring relation the release is private under.
        max_contributions: records per privacy unit the pipeline enforced.
        confidence: the probability with which ``ks_bound`` (and ``count_error``) hold.
        ks_bound: the KS bound at ``confidence`` (see the module docstring).
        count_error: a bound on ``|n_hat - n|`` at half the failure probability (0 if public).
        secure: whether the randomness came from the OS CSPRNG.
    """

    grid: tuple[float, ...]
    points: tuple[int, ...]
    cumulative: tuple[int, ...]
    k: int
    n_hat: int
    count_released: bool
    epsilon: float
    count_epsilon: float
    relation: Relation
    max_contributions: int
    confidence: float
    ks_bound: float
    count_error: int
    secure: bool

    @property
    def values(self) -> tuple[float, ...]:
        """The synthetic points as grid values, sorted."""
        return tuple(self.grid[i] for i in self.points)

    @property
    def cdf(self) -> tuple[float, ...]:
        """The step CDF at every grid point, ``C_i / k``."""
        return tuple(c / self.k for c in self.cumulative)

    def cdf_at(self, x: float) -> float:
        """``F(x)``: the share of synthetic points ``<= x`` (0 below the grid)."""
        check_finite(x, "x")
        index = bisect.bisect_right(self.grid, float(x)) - 1
        return 0.0 if index < 0 else self.cumulative[index] / self.k

    def quantile(self, alpha: float | Fraction) -> float:
        """The smallest grid point ``g`` with ``F(g) >= alpha``, for ``0 < alpha < 1``."""
        check_probability_open(alpha, "alpha")
        target = to_fraction(alpha, "alpha") * self.k  # exact: C_i >= alpha k
        return self.grid[bisect.bisect_left(self.cumulative, math.ceil(target))]

    def quantiles(self, alphas: Iterable[float | Fraction]) -> tuple[float, ...]:
        """:meth:`quantile` for each of ``alphas`` (post-processing: no extra epsilon)."""
        return tuple(self.quantile(alpha) for alpha in alphas)


def check_finite(value: object, name: str) -> None:
    """A real number that is neither NaN nor infinite (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction, np.floating)):
        raise TypeError(f"'{name}' must be a real number")
    if not math.isfinite(float(value)):
        raise ValueError(f"'{name}' must be finite")


def _check_grid(grid_points: Sequence[float] | npt.ArrayLike, num_points: int) -> tuple[float, ...]:
    array = np.asarray(grid_points, dtype=np.float64)
    if array.ndim != 1 or array.size != num_points:
        raise ValueError(
            "'grid_points' must be one-dimensional with one point per cumulative count"
        )
    if not np.all(np.isfinite(array)) or np.any(np.diff(array) <= 0):
        raise ValueError("'grid_points' must be finite and strictly increasing")
    return tuple(float(g) for g in array.tolist())


def release_count(
    n: int,
    *,
    epsilon: float | Fraction,
    max_contributions: int = 1,
    rng: RandomSource | np.random.Generator | None = None,
) -> int:
    """``max(0, n + Z)`` with ``Z`` exact discrete Laplace, ``P(Z = z) ∝ exp(-ε |z| / c)``.

    Privacy:
        ε-DP under ``add_remove`` when one privacy unit holds at most ``c``
        (``max_contributions``) of the ``n`` records: ``n`` moves by at most ``c``. Clamping
        at 0 is post-processing. Only the noisy count is released.
    """
    size = check_count_parameter(n, "n")
    check_positive_finite(epsilon, "epsilon")
    check_positive_int(max_contributions, "max_contributions")
    scale = Fraction(int(max_contributions)) / to_fraction(epsilon, "epsilon")
    noise = int(discrete_laplace(scale, 1, rng=as_random_source(rng))[0])
    return max(0, size + noise)


def release_ks_cdf(
    cumulative_counts: Sequence[int] | npt.ArrayLike,
    *,
    grid_points: Sequence[float] | npt.ArrayLike,
    count_share: float | Fraction | None = None,
    confidence: float = 0.95,
    max_k: int | None = None,
    rng: RandomSource | np.random.Generator | None = None,
    **parameters: Unpack[KSParameters],
) -> KSRelease:
    """Release a private CDF of a column: ``k`` synthetic points on the public grid.

    Args:
        cumulative_counts: ``N_i = #(x <= g_i)`` per grid point after the public input rule
            (:func:`~beam_dp.mechanisms.cdf.ks.cumulative_counts_from_slots` of a merged grid
            histogram); the last entry is the dataset size.
        grid_points: the public grid ``g_0 < ... < g_{m-1}`` (``Grid.points``).
        count_share: under ``add_remove`` without ``n_public``, the share of ``epsilon`` spent
            on the count (``0 < count_share < 1``; default :data:`DEFAULT_COUNT_SHARE`).
            Refused otherwise (nothing to spend it on).
        confidence: the probability with which ``ks_bound`` holds (0 < confidence < 1).
        max_k: with ``k=None``, the largest ``k`` considered (default: the largest the grid
            allows, ``m (k + 1) <= MAX_CELLS``). Refused with an explicit ``k``.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests (it warns).
        **parameters: as for :func:`~beam_dp.mechanisms.cdf.ks.sample_ks_synthetic`, with
            ``epsilon`` the *total* spent; under ``add_remove`` ``n_public`` may be left out
            (then the count is released here). ``k=None`` chooses ``k`` with
            :func:`~beam_dp.mechanisms.cdf.accuracy.ks_suggested_k` from the normaliser the
            release uses (the public size, or the released count and its error bound:
            post-processing of a release and public parameters), up to ``max_k``.

    Returns:
        A :class:`KSRelease`.

    Privacy:
        ``epsilon``-DP under ``relation`` with at most ``max_contributions`` records per unit:
        the KS mechanism (:func:`~beam_dp.mechanisms.cdf.ks.sample_ks_synthetic`) at
        ``epsilon``, or, with a released count, the count at ``count_share * epsilon`` and the
        KS mechanism at the rest given the released count (sequential composition). The
        step CDF, quantiles and bounds are post-processing of released values and public
        parameters.

    Raises:
        ValueError, TypeError: a parameter breaks its rule (named in the message), before any
            count is read; the message never contains a count.
    """
    wanted = dict(parameters)
    relation = wanted.get("relation", "add_remove")
    noisy = relation == "add_remove" and wanted.get("n_public") is None
    if noisy:
        wanted["n_public"] = 0  # validated now; replaced by the released count below
    suggest = "k" in wanted and wanted["k"] is None
    if suggest:
        wanted["k"] = 1  # validated now; chosen once the normaliser is known
        if max_k is not None:
            check_positive_int(max_k, "max_k")
    elif max_k is not None:
        raise ValueError("'max_k' applies only with k=None (k chosen from the normaliser)")
    checked = mechanism_from(wanted)  # type: ignore[arg-type]  # same keys as parameters
    check_probability_open(confidence, "confidence")
    if count_share is not None and not noisy:
        raise ValueError(
            "'count_share' applies only under relation 'add_remove' without 'n_public' "
            "(the size is public here: nothing is spent on it)"
        )
    share = to_fraction(DEFAULT_COUNT_SHARE if count_share is None else count_share, "count_share")
    if noisy and not 0 < share < 1:
        raise ValueError("'count_share' must be strictly between 0 and 1")
    counts = check_cumulative_counts(cumulative_counts)
    grid = _check_grid(grid_points, len(counts))
    if suggest:
        cap = MAX_CELLS // len(counts) - 1
        check_positive_int(cap, "the grid size")  # at most MAX_CELLS // 2 points
        cap = cap if max_k is None else min(cap, int(max_k))
    check_size(len(counts), checked.k)
    source = as_random_source(rng)
    c = checked.max_contributions
    beta = 1.0 - float(confidence)
    if noisy:
        count_epsilon = checked.epsilon * share
        n_hat = release_count(counts[-1], epsilon=count_epsilon, max_contributions=c, rng=source)
        count_error = count_error_bound(
            count_epsilon, failure_probability=beta / 2, max_contributions=c
        )
        ks_confidence = 1.0 - beta / 2
        wanted["n_public"] = n_hat
        wanted["epsilon"] = checked.epsilon - count_epsilon
    else:
        count_epsilon, count_error, ks_confidence = Fraction(0), 0, float(confidence)
        n_hat = checked.normaliser(counts)
    if suggest:
        wanted["k"] = ks_suggested_k(
            len(counts),
            epsilon=float(checked.epsilon - count_epsilon),
            n=n_hat,
            confidence=ks_confidence,
            max_contributions=c,
            count_error=count_error,
            max_k=cap,
        )
    mechanism = mechanism_from(wanted)  # type: ignore[arg-type]
    options = PlanOptions()
    if noisy:
        # D_min <= max(n̂ / 2, k (n - n̂)) and n - n̂ <= |Z| <= the count's error bound at
        # failure probability 2**-40 (a property of the noise alone): a public bound that
        # sizes the sampler's padded columns (ks.py: its work is fixed by public values).
        margin = count_error_bound(
            count_epsilon, failure_probability=_WIDTH_FAILURE, max_contributions=c
        )
        options = PlanOptions(deviation_bound=max((n_hat + 1) // 2, mechanism.k * margin))
    path = Sampler(counts, mechanism, options).draw(source)
    bound = ks_accuracy_bound(
        len(counts),
        mechanism.k,
        epsilon=float(mechanism.epsilon),
        n=n_hat,
        confidence=ks_confidence,
        max_contributions=c,
        count_error=count_error,
    )
    return KSRelease(
        grid=grid,
        points=points_from_path(path),
        cumulative=tuple(path),
        k=mechanism.k,
        n_hat=n_hat,
        count_released=noisy,
        epsilon=float(checked.epsilon),
        count_epsilon=float(count_epsilon),
        relation=mechanism.relation,
        max_contributions=c,
        confidence=float(confidence),
        ks_bound=bound,
        count_error=count_error,
        secure=source.secure,
    )
