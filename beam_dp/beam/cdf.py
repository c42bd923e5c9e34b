"""A private CDF of a column on Beam: exact KS synthetic samples on the public grid.

The mechanism: Wasserman and Zhou (2010), exactly sampled.

``PrivateCDF.Globally`` / ``.PerKey`` release, per window (and public key), ``k`` synthetic
points whose step CDF is close to the data's in KS distance (Wasserman and Zhou's exponential
mechanism, sampled exactly: :mod:`beam_dp.mechanisms.cdf`)::

    releases = batches | PrivateCDF.Globally(
        lower=0.0, upper=500.0, num_points=1000, epsilon=1.0,
        unit_column="user_id", value_column="amount", max_contributions=5,
        quantiles=[0.1, 0.5, 0.9])

Each :class:`~beam_dp.release.Release` holds a :class:`CDFValue`: the synthetic points, the
step CDF they define (its steps and cumulative fractions), the requested quantiles read from
it, and the normaliser. Read top to bottom: the options, the value, the spec
(:class:`CDFSpec`), the combiner (:class:`CDFCombineFn`: the grid histogram of
:mod:`beam_dp.beam._grid`, whose ``extract_output`` draws the release), the construction and
the transforms.

Public rules and privacy (units, keys, windows and the budget division:
``docs/privacy_rules.md``):

* **Values**: clamped to ``[lower, upper]`` and snapped *up* to the public grid (a value
  strictly between two grid points counts at the upper one). ``max_contributions="auto"`` is
  refused: the sensitivity is ``max_contributions * k``, and a bound chosen for coverage
  measured worse than 1 on three of four datasets (benchmarks/RESULTS.md, "KS CDF").
* **The normaliser**: the KS distance compares ``N_i / n`` with the synthetic ``C_i / k``.

  - ``n`` given (public): the mechanism uses it, under either relation. A unit moves every
    ``N_i`` by at most ``c`` (``max_contributions``) whether its values change (``replace``)
    or appear (``add_remove``), so the sensitivity is ``c k`` in the integer score
    ``max_i |k N_i - n C_i|`` in both cases. ``n`` is the public number of values kept after
    bounding (per key and window for ``.PerKey``, as for ``PrivateMean``); if fewer or more
    are kept, the release is still private and its bound is relative to ``N_i / n``. Required
    under ``replace``.
  - ``add_remove`` without ``n``: a share ``count_share`` of each release's ε (default 1/10,
    :data:`~beam_dp.mechanisms.cdf.DEFAULT_COUNT_SHARE`) releases ``n̂ = max(0, n + Z)``, ``Z``
    exact discrete Laplace of scale ``c / ε_count``, and the KS mechanism runs on the rest with
    ``n̂`` as its normaliser (sequential composition). ``n̂`` is part of the release.

* **k**: given, or (default) chosen by :func:`~beam_dp.mechanisms.cdf.ks_suggested_k` to
  minimise the accuracy bound: from the public ``n`` at construction, or from the released
  ``n̂`` and its error bound inside the release (post-processing), capped at ``max_k``
  (default :data:`DEFAULT_MAX_K`).
* **Budget and ledger**: the KS mechanism is an exponential mechanism (ε-bounded range), so a
  budget share names mechanism ``"exponential"`` and ``rounds=1`` (the transform's
  ``mechanism`` and ``rounds`` say so); ``method`` other than ``"exponential"`` is refused.
  With a released count, the count (pure ε_count-DP,
  ε_count²/2-zCDP) and the KS mechanism (ε_ks²/8-zCDP) cost at most ``ε²/8`` together when
  ``count_share <= 2/5``; a budget share accounted by zCDP therefore refuses a larger share.
  ``num_candidates`` in the ledger is the grid size ``m`` (a release is a multiset of ``k`` of
  its points: ``C(m + k - 1, k)`` candidates, ``ln`` of which is ``accuracy.log_candidates``);
  ``sensitivity`` is ``c k`` in the integer score above.
* **Accuracy**: ``accuracy.ks_distance`` bounds the KS distance to the data's (snapped) CDF at
  ``confidence`` (:func:`~beam_dp.mechanisms.cdf.ks_accuracy_bound`, with the count's error
  when ``n̂`` is released); the statement's sentence reads "the released CDF is within D of the
  data's CDF at every point" (:func:`beam_dp.release.cdf_statement`). A quantile read from the
  release has a data CDF value within the same D of its alpha.
* **Quantile intervals** (post-processing, no ε): each quantile read from the release carries
  ``[lower, upper]`` in the column's units that holds the data's own alpha-quantile whenever the
  KS bound holds, so with probability at least ``confidence``, all quantiles at once
  (:func:`ks_quantile_interval`, method ``"ks_band"``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Unpack

import numpy as np

from beam_dp._validation import check_positive_int, check_probability_open, to_fraction
from beam_dp.accounting import LedgerEntry
from beam_dp.beam._grid import GridHistogramFn, take_grid_options
from beam_dp.beam._transform import (
    Built,
    GridOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    resolve_budget,
)
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.cdf import (
    DEFAULT_COUNT_SHARE,
    MAX_CELLS,
    KSRelease,
    cumulative_counts_from_slots,
    ks_suggested_k,
    release_ks_cdf,
)
from beam_dp.mechanisms.cdf.params import check_count_parameter, check_size
from beam_dp.release import Release, ReleaseInterval, bound_notes, cdf_statement
from beam_dp.summaries.histogram import Grid, GridHistogram
from beam_dp.summaries.quantiles import parse_quantiles

__all__ = [
    "DEFAULT_MAX_K",
    "DEFAULT_NUM_POINTS",
    "CDFCombineFn",
    "CDFOptions",
    "CDFPerKeyOptions",
    "CDFSpec",
    "CDFValue",
    "PrivateCDF",
    "ks_quantile_interval",
]

#: Default grid size (uniform over ``[lower, upper]``): the KS mechanism's cost grows about
#: linearly in ``m`` (0.06 s per release at m = 1 000, k = 100; benchmarks/RESULTS.md).
DEFAULT_NUM_POINTS = 1_000
#: Default cap on the suggested ``k``: the rounding floor ``1/(2k)`` is 5e-4 there, and a
#: release costs about k^1.0 (0.4 s at k = 400 on m = 1 000), per key and window.
DEFAULT_MAX_K = 1_000
#: Under zCDP, the largest ``count_share`` with ``s²/2 + (1 - s)²/8 <= 1/8``.
_ZCDP_MAX_COUNT_SHARE = Fraction(2, 5)


class _CDFArgs(GridOptions, total=False):
    """The CDF's own options (with the value options every grid transform reads).

    Attributes:
        k: the number of synthetic points; None (default): chosen to minimise the accuracy
            bound (from ``n``, or from the released count), up to ``max_k``.
        max_k: the cap on a chosen ``k`` (default :data:`DEFAULT_MAX_K`).
        n: the public number of values kept after bounding (per key and window); required
            under ``replace``. Under ``add_remove`` without it a count is released.
        count_share: the share of each release's ε spent on the count (``add_remove`` without
            ``n`` only; default 1/10; at most 2/5 with a zCDP-accounted budget share).
        quantiles: quantiles to read from the released CDF (post-processing: no extra ε).
    """

    k: int | None
    max_k: int
    n: int | None
    count_share: float | None
    quantiles: Sequence[float] | None


class CDFOptions(_CDFArgs, PrivateOptions, total=False):
    """Keyword options of ``PrivateCDF.Globally`` (``epsilon``: a float, or a share of
    mechanism ``"exponential"`` with ``rounds=1``)."""


class CDFPerKeyOptions(_CDFArgs, PerKeyOptions, total=False):
    """Keyword options of ``PrivateCDF.PerKey`` (``key_column`` default ``"key"``,
    ``max_keys_per_unit`` default 1)."""


# ------------------------------------------------------------------------------ the value


@dataclass(frozen=True)
class CDFValue(Mapping[str, Any]):
    """One released CDF (every field is released or public).

    Read as a mapping it is the JSON object of ``release.json``'s ``value``: ``points``,
    ``steps``, ``cdf``, ``quantiles`` (``{"0.5": value}``, in request order), ``lower``,
    ``upper``, ``k``, ``n_hat`` and ``count_released``.

    Attributes:
        points: the ``k`` synthetic points (grid values), sorted, repeats allowed.
        steps: the distinct synthetic points, increasing: where the step CDF jumps.
        counts: the synthetic points ``<=`` each step (the last is ``k``).
        quantiles: ``(alpha, value)`` for each requested quantile, in request order.
        lower, upper: the public bounds (the CDF is 0 below the first step, 1 from the last).
        k: the number of synthetic points.
        n_hat: the normaliser: the public ``n``, or the released count.
        count_released: whether ``n_hat`` was released (``add_remove`` without ``n``).
    """

    points: tuple[float, ...]
    steps: tuple[float, ...]
    counts: tuple[int, ...]
    quantiles: tuple[tuple[float, float], ...]
    lower: float
    upper: float
    k: int
    n_hat: int
    count_released: bool

    _KEYS: ClassVar[tuple[str, ...]] = (
        "points",
        "steps",
        "cdf",
        "quantiles",
        "lower",
        "upper",
        "k",
        "n_hat",
        "count_released",
    )

    @classmethod
    def from_release(
        cls, release: KSRelease, quantiles: Sequence[Fraction], grid: Grid
    ) -> CDFValue:
        """The value of a :class:`~beam_dp.mechanisms.cdf.KSRelease` (post-processing)."""
        steps: list[float] = []
        counts: list[int] = []
        previous = 0
        for value, count in zip(release.grid, release.cumulative, strict=True):
            if count > previous:
                steps.append(value)
                counts.append(count)
                previous = count
        return cls(
            points=release.values,
            steps=tuple(steps),
            counts=tuple(counts),
            quantiles=tuple((float(a), release.quantile(a)) for a in quantiles),
            lower=grid.lower,
            upper=grid.upper,
            k=release.k,
            n_hat=release.n_hat,
            count_released=release.count_released,
        )

    @property
    def cdf(self) -> tuple[float, ...]:
        """``F`` at each step: the share of synthetic points ``<=`` it."""
        return tuple(c / self.k for c in self.counts)

    def cdf_at(self, x: float) -> float:
        """``F(x)``: the share of synthetic points ``<= x``."""
        if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
            raise ValueError("'x' must be a number (not NaN)")
        index = bisect.bisect_right(self.steps, float(x)) - 1
        return 0.0 if index < 0 else self.counts[index] / self.k

    def quantile(self, alpha: float | Fraction) -> float:
        """The smallest synthetic point ``v`` with ``F(v) >= alpha`` (no extra epsilon)."""
        check_probability_open(alpha, "alpha")
        needed = math.ceil(to_fraction(alpha, "alpha") * self.k)
        return self.steps[bisect.bisect_left(self.counts, needed)]

    def __getitem__(self, key: str) -> Any:
        if key not in self._KEYS:
            raise KeyError(key)
        if key == "quantiles":
            return {f"{alpha:g}": value for alpha, value in self.quantiles}
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)


# --------------------------------------------------------------------- quantile intervals


#: The name a CDF release records for its quantiles' intervals.
KS_INTERVAL_METHOD = "ks_band"


def ks_quantile_interval(
    value: CDFValue, grid: Grid, alpha: float | Fraction, distance: float
) -> tuple[float, float]:
    """``[lower, upper]`` holding the data's alpha-quantile when the CDF is within ``distance``.

    With ``F`` the released step CDF and ``D = distance``: ``lower`` is the largest grid point
    ``g`` with ``F(g) < alpha - D`` (``value.lower`` when there is none) and ``upper`` the
    smallest grid point ``h`` with ``F(h) > alpha + D`` (``value.upper`` when there is none or
    when ``h`` is the last grid point). Post-processing of the release and public parameters.

    Coverage (on the event ``|F(g) - N_g / N| <= D`` at every grid point ``g``, with ``N_g``
    the values snapped up to the grid that are ``<= g``, which the KS bound gives at its
    confidence): snapping up keeps a value ``x`` at or below a grid point ``g`` exactly when
    ``x <= g``, so ``N_g = #(x <= g)`` for every grid point but the last (which also counts the
    values above it). (1) ``F(lower) < alpha - D`` gives ``#(x <= lower) < alpha N``, so the
    smallest alpha-quantile ``x_(ceil(alpha N))`` is above ``lower`` (a last grid point never
    qualifies: there ``N_g / N = 1``). (2) ``F(h) > alpha + D`` gives ``#(x <= h) > alpha N >=
    floor(alpha N)`` for ``h`` not last, so the largest one ``x_(floor(alpha N) + 1)`` is at or
    below ``upper``; otherwise ``upper`` is the clamping bound, above every value. Every
    alpha-quantile of the data ``[x_(ceil(alpha N)), x_(floor(alpha N) + 1)]`` is inside.
    The quantile read from the release (the first step with ``F >= alpha``) is inside too.
    """
    check_probability_open(alpha, "alpha")
    target = float(alpha)
    points = np.asarray(grid.points, dtype=np.float64)
    steps = np.asarray(value.steps, dtype=np.float64)
    counts = np.asarray(value.counts, dtype=np.float64)
    # F at every grid point: the counts of the last step at or below it, over k.
    index = np.searchsorted(steps, points, side="right") - 1
    at = np.where(index >= 0, counts[np.maximum(index, 0)], 0.0) / value.k
    below = np.flatnonzero(at < target - distance)
    lower = float(points[below[-1]]) if below.size else value.lower
    above = np.flatnonzero(at > target + distance)
    upper = value.upper
    if above.size and above[0] < points.size - 1:
        upper = float(points[above[0]])
    read = value.quantile(alpha)
    return min(lower, read), max(upper, read)


# ------------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class CDFSpec:
    """Everything a CDF release needs after the merge (public; fixed at construction).

    ``k`` is None when it is chosen from the released count (capped at ``max_k``); ``n`` is
    None when the count is released on ``count_share`` of ``epsilon`` (each release's ε).
    """

    name: str
    grid: Grid
    k: int | None
    max_k: int
    n: int | None
    count_share: Fraction | None
    epsilon: Fraction
    rho: float | None
    relation: str
    max_contributions: int
    quantiles: tuple[Fraction, ...]
    bounds: Mapping[str, int]
    confidence: float
    rng: RandomSource | None

    def draw(self, histogram: GridHistogram) -> KSRelease:
        """The KS release of one merged grid histogram."""
        counts = cumulative_counts_from_slots(histogram.counts())
        return release_ks_cdf(
            counts,
            grid_points=self.grid.points,
            k=self.k,
            epsilon=self.epsilon,
            relation="add_remove",  # with a fixed normaliser, Δ = c k under both relations
            n_public=self.n,
            max_contributions=self.max_contributions,
            count_share=self.count_share,
            confidence=self.confidence,
            max_k=self.max_k if self.k is None else None,
            rng=self.rng,
        )

    def release(self, ks: KSRelease) -> Release:
        """The :class:`~beam_dp.release.Release` of a KS release and its ledger entry."""
        m = self.grid.num_points
        log_candidates = math.lgamma(m + ks.k) - math.lgamma(ks.k + 1) - math.lgamma(m)
        accuracy = {
            "confidence": self.confidence,
            "ks_distance": ks.ks_bound,
            "rounding_error": 1 / (2 * ks.k),
            "log_candidates": log_candidates,
        }
        if ks.count_released:
            accuracy["count_error"] = float(ks.count_error)
        entry = LedgerEntry(
            name=self.name,
            statistic="cdf",
            mechanism="exponential",
            epsilon=float(self.epsilon),
            rho=self.rho,
            sensitivity=float(self.max_contributions * ks.k),
            neighbouring=self.relation,
            monotone=False,
            num_candidates=m,
            contribution_bounds=dict(self.bounds),
            accuracy=accuracy,
        )
        statement = cdf_statement(
            ks_distance=ks.ks_bound,
            confidence=self.confidence,
            k=ks.k,
            num_points=m,
            count_error=ks.count_error if ks.count_released else None,
        )
        value = CDFValue.from_release(ks, self.quantiles, self.grid)
        notes = bound_notes(
            [
                (f"the {alpha:g}-quantile read from the CDF", point)
                for alpha, point in value.quantiles
            ],
            lower=self.grid.lower,
            upper=self.grid.upper,
        )
        interval = None
        if value.quantiles:
            ends = [
                ks_quantile_interval(value, self.grid, alpha, ks.ks_bound)
                for alpha in self.quantiles
            ]
            interval = ReleaseInterval(
                quantiles=tuple(float(alpha) for alpha in self.quantiles),
                lower=tuple(lo for lo, _ in ends),
                upper=tuple(hi for _, hi in ends),
                confidence=self.confidence,
                method=KS_INTERVAL_METHOD,
                epsilon=0.0,  # post-processing of the release and its public bound
                public_range=(float(self.grid.lower), float(self.grid.upper)),
            )
        return Release(
            value=value,
            ledger=entry,
            rng_secure=ks.secure,
            statement=statement,
            notes=notes,
            interval=interval,
        )


class CDFCombineFn(GridHistogramFn):
    """Grid histogram of the values (as for the quantiles); ``extract_output`` releases the
    private CDF."""

    def __init__(self, spec: CDFSpec) -> None:
        super().__init__(spec.grid)
        self._spec = spec

    def extract_output(self, accumulator: GridHistogram) -> Release:
        return self._spec.release(self._spec.draw(accumulator))

    def display_data(self) -> dict[str, Any]:
        return {"statistic": "cdf", "grid": repr(self._spec.grid)}


# ------------------------------------------------------------------------- the transforms


def _count_share(value: object, *, n: int | None, relation: str, zcdp: bool) -> Fraction | None:
    if n is not None or relation == "replace":
        if value is not None:
            raise ValueError(
                "'count_share' applies only under relation 'add_remove' without 'n' (a public "
                "size: nothing is spent on a count)"
            )
        return None
    chosen = DEFAULT_COUNT_SHARE if value is None else value
    share = to_fraction(chosen, "count_share")
    if isinstance(chosen, float) and math.isfinite(chosen):
        share = Fraction(repr(chosen))  # as written: 0.4 is 2/5
    if not 0 < share < 1:
        raise ValueError(f"'count_share' must be strictly between 0 and 1; received {value!r}")
    if zcdp and share > _ZCDP_MAX_COUNT_SHARE:
        raise ValueError(
            "'count_share' must be at most 0.4 with a budget share accounted by zCDP (the count "
            "costs share²/2 of ε², the KS mechanism (1 - share)²/8; together at most the "
            f"share's ε²/8 only up to 2/5); received {value!r}"
        )
    return share


def _build_cdf(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    """A CDF transform from its keywords (:meth:`PrivateTransform._build`): ``k``, the
    normaliser and the epsilon of every release, before any data."""
    shared = dict(shared)
    method = shared.pop("method", "exponential")
    if method != "exponential":
        raise ValueError(
            "'method' must be 'exponential' for PrivateCDF (the KS mechanism is an "
            f"exponential mechanism over multisets of grid points); received {method!r}"
        )
    if own.get("max_contributions") == "auto":  # a fixed c decides Δ = c k here
        raise ValueError(
            "max_contributions='auto' is not offered for PrivateCDF: the KS mechanism's "
            "sensitivity is max_contributions * k, and a bound chosen for coverage measured "
            "1.3-2x worse than 1 on three of four datasets (benchmarks/RESULTS.md, 'KS "
            "CDF'); give an integer"
        )
    values, cdf_options = take_grid_options(variant, own, shared, DEFAULT_NUM_POINTS)
    options = values.options
    budget = resolve_budget(
        options.epsilon,
        name=options.name,
        default_name="cdf",
        mechanism="exponential",
        rounds=1,
    )
    release = options.per_release(budget, values.record_level)  # one key in one window
    epsilon = Fraction(release.epsilon)
    m = values.grid.num_points
    n = cdf_options.get("n")
    if n is not None:
        n = check_count_parameter(n, "n")
    elif options.relation == "replace":
        raise ValueError(
            "'n' (the public number of values kept after bounding) is required under "
            "relation 'replace'; or use 'add_remove', which releases a count"
        )
    count_share = _count_share(
        cdf_options.get("count_share"),
        n=n,
        relation=options.relation,
        zcdp=release.rho is not None,
    )
    max_k = cdf_options.get("max_k", DEFAULT_MAX_K)
    check_positive_int(max_k, "max_k")
    cap = min(int(max_k), MAX_CELLS // m - 1)
    if cap < 1:
        raise ValueError(f"the grid must have at most {MAX_CELLS // 2:,} points for a CDF")
    k = cdf_options.get("k")
    if k is not None:
        check_positive_int(k, "k")
        check_size(m, int(k))
        k = int(k)
    elif n is not None:
        k = ks_suggested_k(
            m,
            epsilon=float(epsilon),
            n=n,
            confidence=options.confidence,
            max_contributions=values.max_contributions,
            max_k=cap,
        )
    quantiles = cdf_options.get("quantiles")
    parsed = () if quantiles is None else parse_quantiles(quantiles)
    spec = CDFSpec(
        name=budget.name,
        grid=values.grid,
        k=k,
        max_k=cap,
        n=n,
        count_share=count_share,
        epsilon=epsilon,
        rho=release.rho,
        relation=options.relation,
        max_contributions=values.max_contributions,
        quantiles=parsed,
        bounds=values.ledger_bounds(),
        confidence=options.confidence,
        rng=options.rng,
    )
    display = {
        **values.display(budget.name, "cdf", budget.epsilon),
        "method": "exponential",
        "k": "chosen from the released count" if k is None else k,
        "normaliser": "released count" if n is None else "public n",
        "privacy_unit": "record" if values.record_level else "unit_column",
        "contribution_bounds": str(values.ledger_bounds()),
    }
    if options.keys is not None:
        display["epsilon_per_key"] = float(epsilon)
    return Built(
        values.wiring(CDFCombineFn(spec)),
        release_name=budget.name,
        keys_per_unit=values.keys_per_unit,
        display=display,
        mechanism="exponential",
        rounds=1,
        shares=options.shares(),
        spec=spec,
    )


class _CDFTransform(PrivateTransform):
    """A private CDF from a grid histogram (see the module docstring).

    Args:
        **options: :class:`CDFOptions` (``.PerKey``: :class:`CDFPerKeyOptions`): this
            statistic's own (``k``, ``max_k``, ``n``, ``count_share``, ``quantiles``), the grid
            options (:class:`~beam_dp.beam._transform.GridOptions`; ``num_points`` default
            :data:`DEFAULT_NUM_POINTS`; no ``"auto"`` bound) and those of every private
            transform (:class:`~beam_dp.beam._transform.PrivateOptions`; ``method`` may only
            be ``"exponential"``).

    Raises:
        ValueError, TypeError: at construction, naming the bad parameter and its rule, before
            any pipeline runs.

    Privacy:
        epsilon-DP under ``relation`` over all the windows and, for ``.PerKey``, all the keys,
        with ``max_contributions`` values per unit; only the synthetic points (grid values)
        and, under ``add_remove`` without ``n``, the noisy count are released.
    """

    NAMESPACE: ClassVar[str] = "PrivateCDF"
    _spec: CDFSpec

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._build(options, _build_cdf)

    @property
    def spec(self) -> CDFSpec:
        """The public parameters of every release of this transform."""
        return self._spec


class PrivateCDF:
    """A private CDF of a column: ``PrivateCDF.Globally(...)`` and ``.PerKey(...)``.

    Each window (and key) gets one :class:`~beam_dp.release.Release` whose value is a
    :class:`CDFValue`. See ``_CDFTransform`` for the arguments and the module docstring for
    the relations, ``k`` and the accuracy statement.
    """

    class Globally(_CDFTransform):
        """A private CDF of all the values, one release per window."""

        VARIANT = "Globally"

        def __init__(self, **options: Unpack[CDFOptions]) -> None:
            super().__init__(**options)

    class PerKey(_CDFTransform):
        """A private CDF per public key, one release per key and window."""

        VARIANT = "PerKey"

        def __init__(self, **options: Unpack[CDFPerKeyOptions]) -> None:
            super().__init__(**options)
