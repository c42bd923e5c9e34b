"""Public parameters shared by every quantile and mean release (validated before any data).

The quantiles themselves (:func:`parse_quantiles`: read as the decimals they were written as,
denominators bounded by a public rule), the checks every plan makes (:func:`check_release`),
the score-loss bound of one selection (:func:`selection_loss`) and the one call to the exact
samplers (:func:`private_choice`: every quantile and mean utility is non-monotone). Nothing here
reads data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from numbers import Real
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

from beam_dp._rational import positive_fraction
from beam_dp._validation import Relation, check_positive_int, check_probability_open, check_relation
from beam_dp.mechanisms import Method, RandomSource, score_loss_bound, select
from beam_dp.mechanisms.selection import check_method
from beam_dp.scores._exact import decimal_fraction
from beam_dp.summaries.histogram import Grid, GridHistogram

__all__ = [
    "DEFAULT_SPLIT",
    "MAX_QUANTILE_DENOMINATOR",
    "SPLITS",
    "PlanBase",
    "PlanOptions",
    "Split",
    "base_fields",
    "bounded",
    "check_quantile_plan",
    "check_release",
    "check_split",
    "dense_counts",
    "parse_quantiles",
    "private_choice",
    "selection_loss",
]

Split = Literal["auto", "recursive", "joint", "independent"]
SPLITS: tuple[Split, ...] = ("auto", "recursive", "joint", "independent")

#: The many-quantile method used unless one is asked for: ``"auto"`` is the joint split for
#: two quantiles or more (one selection for one). Chosen by measurement against the original
#: JointExp code (benchmarks/jointexp.py; RESULTS.md, "Against the original JointExp, per range
#: of m"): 0.90x, 0.92x and 0.89x JointExp's misclassified points for m = 1-2, 3-12 and 13-29,
#: where the recursive split (the earlier default for m >= 3) measured 1.21x, 1.10x and 0.93x.
DEFAULT_SPLIT: Split = "auto"

#: Quantiles are used as fractions with a denominator of at most this (see parse_quantiles).
MAX_QUANTILE_DENOMINATOR = 1 << 20

IntArray = npt.NDArray[np.int64]
HistogramLike = GridHistogram | npt.ArrayLike
RngLike = RandomSource | np.random.Generator | None


@dataclass(frozen=True)
class PlanBase:
    """What every quantile plan records: the quantiles asked for and the checked options.

    Attributes:
        quantiles: the requested quantiles, in request order (exact fractions).
        distinct: the distinct quantiles, sorted (one selection or cell each).
        relation: the neighbouring relation the plan is private under.
        epsilon: epsilon of the whole plan.
        method: the selection method.
        max_contributions: values per privacy unit ``k``.
    """

    quantiles: tuple[Fraction, ...]
    distinct: tuple[Fraction, ...]
    relation: Relation
    epsilon: Fraction
    method: Method
    max_contributions: int


def check_split(split: str) -> Split:
    """``split`` if it is one of :data:`SPLITS`, else ValueError naming the parameter."""
    for known in SPLITS:
        if split == known:
            return known
    raise ValueError(f"'split' must be one of {list(SPLITS)}; received {split!r}")


def bounded(alpha: Fraction) -> Fraction:
    """``alpha`` itself, or the nearest fraction with denominator <= 2**20 (within 2**-20).

    Exact integer scores are ``b * u`` for ``alpha = a / b``; a bounded ``b`` keeps them in
    int64 for up to about 10**11 values. The rule is public and data-independent.
    """
    if alpha.denominator <= MAX_QUANTILE_DENOMINATOR:
        return alpha
    near = alpha.limit_denominator(MAX_QUANTILE_DENOMINATOR)
    smallest = Fraction(1, MAX_QUANTILE_DENOMINATOR)
    return min(max(near, smallest), 1 - smallest)


def _quantile_fraction(value: object, name: str) -> Fraction:
    """A quantile as the exact decimal it was written as (``0.9`` is 9/10), then bounded."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"'{name}' must be a real number; received type bool")
    if not isinstance(value, Real):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    check_probability_open(value, name)
    fraction = decimal_fraction(value, name)  # the reading QuantileScore uses
    if not 0 < fraction < 1:
        raise ValueError(f"'{name}' must be strictly between 0 and 1; received {value!r}")
    return bounded(fraction)


def parse_quantiles(quantiles: object) -> tuple[Fraction, ...]:
    """Validate the requested quantiles: a non-empty sequence of numbers in (0, 1).

    Floats are read as the decimals they were written as (``0.9`` is ``9/10``), as
    :class:`~beam_dp.scores.QuantileScore` does; a quantile whose denominator exceeds
    ``2**20`` (``0.3333333333333333``, or ``0.123456789``) is replaced by the nearest fraction
    with a denominator of at most ``2**20`` (``1/3``; always within ``2**-20``), a public rule
    that keeps the exact integer scores in int64. Duplicates are allowed.
    """
    items: list[object]
    if isinstance(quantiles, np.ndarray):
        items = list(quantiles.ravel().tolist())
    elif isinstance(quantiles, Sequence) and not isinstance(quantiles, (str, bytes)):
        items = list(quantiles)
    else:
        raise TypeError(
            "'quantiles' must be a sequence of numbers in (0, 1); received type "
            f"{type(quantiles).__name__}"
        )
    if not items:
        raise ValueError("'quantiles' must hold at least one quantile; received none")
    return tuple(_quantile_fraction(q, f"quantiles[{i}]") for i, q in enumerate(items))


class PlanOptions(TypedDict, total=False):
    """The options every quantile and mean plan takes, declared once.

    Keys:
        relation: ``"add_remove"`` (default) or ``"replace"``.
        max_contributions: values per privacy unit ``k`` (enforced upstream; default 1).
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.

    A plan's own signature lists only what is specific to it; ``**options:
    Unpack[PlanOptions]`` keeps every keyword visible to editors and mypy, and
    :func:`check_release` refuses any other keyword at run time (fail closed).
    """

    relation: str
    max_contributions: int
    method: str


_OPTION_NAMES = frozenset(PlanOptions.__optional_keys__)


def check_release(
    epsilon: object, options: PlanOptions, max_partitions: int = 1
) -> tuple[Fraction, Relation, int, Method]:
    """The checks every quantile and mean plan makes: ``(epsilon, relation, k, method)``.

    ``epsilon`` comes back as the exact rational the float denotes; ``max_contributions``
    (``k``) and ``max_partitions`` must be integers >= 1; the method name goes through
    :func:`beam_dp.mechanisms.selection.check_method` (the one rule for method names).

    Raises:
        TypeError: for a keyword that is not a :class:`PlanOptions` key.
    """
    unknown = sorted(set(options) - _OPTION_NAMES)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument {unknown[0]!r}; the options every plan takes are "
            f"{sorted(_OPTION_NAMES)}"
        )
    eps = positive_fraction(epsilon, "epsilon")
    rel = check_relation(options.get("relation", "add_remove"))
    k = options.get("max_contributions", 1)
    check_positive_int(k, "max_contributions")
    check_positive_int(max_partitions, "max_partitions")
    return eps, rel, int(k), check_method(options.get("method", "permute_and_flip"))


def check_quantile_plan(
    quantiles: object, epsilon: object, options: PlanOptions, max_partitions: int = 1
) -> PlanBase:
    """The checks every quantile plan makes (:func:`parse_quantiles`, :func:`check_release`)."""
    parsed = parse_quantiles(quantiles)
    eps, rel, k, method = check_release(epsilon, options, max_partitions)
    return PlanBase(parsed, tuple(sorted(set(parsed))), rel, eps, method, k)


def base_fields(base: PlanBase) -> dict[str, Any]:
    """``base``'s fields by name, to unpack into the constructor of a plan that extends it."""
    return {item.name: getattr(base, item.name) for item in fields(PlanBase)}


def selection_loss(
    num_candidates: int, epsilon: Fraction, sensitivity: Fraction, confidence: float
) -> float:
    """The score-loss bound ``l`` of one non-monotone selection (Dwork-Roth 3.11)."""
    return score_loss_bound(
        int(num_candidates),
        epsilon=float(epsilon),
        sensitivity=float(sensitivity),
        confidence=confidence,
    )


def private_choice(
    scores: IntArray, epsilon: Fraction, sensitivity: Fraction, method: Method, rng: RandomSource
) -> int:
    """One exact selection over integer ``scores`` (non-monotone: ``exp(eps q / 2 Delta)``).

    Privacy:
        ``epsilon``-DP when ``sensitivity`` bounds how much one neighbour moves any score (in
        integer score steps); the callers prove that bound next to their scores.
    """
    return int(
        select(
            scores,
            epsilon=epsilon,
            sensitivity=sensitivity,
            monotonic=False,
            method=method,
            rng=rng,
        )
    )


def dense_counts(histogram: HistogramLike, grid: Grid) -> IntArray:
    """The ``2d + 1`` slot counts of a merged histogram (or of its dense array), checked."""
    counts = (
        histogram.counts()
        if isinstance(histogram, GridHistogram)
        else np.asarray(histogram, dtype=np.int64).copy()
    )
    if counts.shape != (grid.num_slots,):
        raise ValueError(f"the histogram has {counts.size} slots; the grid needs {grid.num_slots}")
    return counts
