"""The public parameters of a KS synthetic-sample release, validated once.

:class:`KSMechanism` holds them (``k``, ``epsilon``, relation, normaliser, contribution bound)
and derives the sensitivity and the exponent ``γ``; :class:`KSParameters` is the one typed list
of keywords that :func:`~beam_dp.mechanisms.cdf.ks.sample_ks_synthetic`,
:func:`~beam_dp.mechanisms.cdf.ks.ks_pmf_bruteforce` and
:func:`~beam_dp.mechanisms.cdf.release.release_ks_cdf` accept (PEP 692), so the keywords and
their rules are written once. Every error names the parameter and its rule, never a count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral
from typing import Required, TypedDict

import numpy as np
import numpy.typing as npt

from beam_dp._rational import positive_fraction
from beam_dp._validation import Relation, check_positive_int, check_relation

__all__ = [
    "MAX_CELLS",
    "KSMechanism",
    "KSParameters",
    "check_count_parameter",
    "check_cumulative_counts",
    "check_size",
    "mechanism_from",
]

#: The largest ``m * (k + 1)`` accepted: the number of (grid point, count) cells.
MAX_CELLS = 1 << 24


class KSParameters(TypedDict, total=False):
    """The keywords of a KS release (see :class:`KSMechanism` for their rules).

    ``k`` and ``epsilon`` are required; ``relation`` defaults to ``"add_remove"``,
    ``n_public`` to None and ``max_contributions`` to 1. ``k=None`` is accepted by
    :func:`~beam_dp.mechanisms.cdf.release.release_ks_cdf` only (``k`` is then chosen from the
    normaliser the release uses); the sampler refuses it.
    """

    k: Required[int | None]
    epsilon: Required[float | Fraction]
    relation: str
    n_public: int | None
    max_contributions: int


def check_cumulative_counts(cumulative_counts: Sequence[int] | npt.ArrayLike) -> tuple[int, ...]:
    """``N_0 <= ... <= N_{m-1}`` as Python integers (non-negative, non-decreasing, 1-D)."""
    if isinstance(cumulative_counts, (str, bytes)):
        raise TypeError("'cumulative_counts' must be a sequence of integers")
    if isinstance(cumulative_counts, (list, tuple)) and any(
        isinstance(v, (bool, np.bool_)) for v in cumulative_counts
    ):
        raise TypeError("'cumulative_counts' must hold integers (not booleans)")
    array = np.asarray(cumulative_counts)
    if array.ndim != 1 or array.size < 1:
        raise ValueError("'cumulative_counts' must be one-dimensional with at least one entry")
    if array.dtype == object:
        values = array.tolist()
        if any(isinstance(v, bool) or not isinstance(v, Integral) for v in values):
            raise TypeError("'cumulative_counts' must hold integers")
        counts = tuple(int(v) for v in values)
    elif np.issubdtype(array.dtype, np.integer):
        counts = tuple(int(v) for v in array.tolist())
    else:
        raise TypeError("'cumulative_counts' must hold integers")
    if counts[0] < 0 or any(b < a for a, b in itertools.pairwise(counts)):
        raise ValueError("'cumulative_counts' must be non-negative and non-decreasing")
    return counts


def check_count_parameter(value: object, name: str) -> int:
    """An integer ``>= 0`` (not a bool), as a Python int."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"'{name}' must be an integer; received type {type(value).__name__}")
    if int(value) < 0:
        raise ValueError(f"'{name}' must be an integer >= 0; received {value!r}")
    return int(value)


def check_size(num_points: int, k: int) -> None:
    """Refuse problems with more than :data:`MAX_CELLS` (grid point, count) cells."""
    if num_points * (k + 1) > MAX_CELLS:
        raise ValueError(
            f"the grid size times (k + 1) must be at most {MAX_CELLS:,}; received "
            f"{num_points:,} points and k = {k:,} (use a coarser grid or fewer points)"
        )


@dataclass(frozen=True)
class KSMechanism:
    """The validated public parameters of one KS synthetic-sample release.

    Construction validates every field (the error names the parameter and the rule) and
    stores ``epsilon`` as the exact rational its float denotes.

    Attributes:
        k: the number of synthetic points (>= 1).
        epsilon: the privacy parameter, as the exact rational its float denotes.
        relation: ``"add_remove"`` or ``"replace"``.
        n_public: the public normaliser ``n̂`` (required under ``add_remove``; under
            ``replace`` the dataset size is public and this is None or equal to it).
        max_contributions: the bound ``c`` on records per privacy unit that the pipeline
            enforces.
    """

    k: int
    epsilon: Fraction
    relation: Relation = "add_remove"
    n_public: int | None = None
    max_contributions: int = 1

    def __post_init__(self) -> None:
        check_positive_int(self.k, "k")
        object.__setattr__(self, "epsilon", positive_fraction(self.epsilon, "epsilon"))
        chosen = check_relation(self.relation)
        check_positive_int(self.max_contributions, "max_contributions")
        normaliser = self.n_public
        if normaliser is not None:
            normaliser = check_count_parameter(normaliser, "n_public")
        if chosen == "add_remove" and normaliser is None:
            raise ValueError(
                "'n_public' is required under relation 'add_remove' (the dataset size is "
                "private): pass a public count or one released with its own share of epsilon"
            )
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "relation", chosen)
        object.__setattr__(self, "n_public", normaliser)
        object.__setattr__(self, "max_contributions", int(self.max_contributions))

    @property
    def sensitivity(self) -> int:
        """``Δ = c k`` in the integer units of :func:`~beam_dp.mechanisms.cdf.ks_deviation`."""
        return self.max_contributions * self.k

    @property
    def gamma(self) -> Fraction:
        """``γ = ε / (2Δ)``: ``P(z) ∝ exp(-γ D(z))``."""
        return self.epsilon / (2 * self.sensitivity)

    def normaliser(self, counts: Sequence[int]) -> int:
        """``n̂``: the dataset size under ``replace``, ``n_public`` under ``add_remove``."""
        if self.relation == "replace":
            if self.n_public is not None and self.n_public != counts[-1]:
                raise ValueError(
                    "'n_public' must be None or the dataset size under relation 'replace' "
                    "(the last cumulative count)"
                )
            return counts[-1]
        assert self.n_public is not None  # __post_init__ guarantees it
        return self.n_public


def mechanism_from(parameters: KSParameters) -> KSMechanism:
    """The validated :class:`KSMechanism` of a release's keywords (unknown keys refused)."""
    unknown = sorted(set(parameters) - set(KSParameters.__annotations__))
    if unknown:
        raise TypeError(
            f"unknown keyword {unknown[0]!r}; expected one of k, epsilon, relation, "
            "n_public, max_contributions"
        )
    for required in ("k", "epsilon"):
        if parameters.get(required) is None:
            raise TypeError(f"'{required}' is required")
    k = parameters["k"]
    assert k is not None  # checked above
    return KSMechanism(
        k=k,
        epsilon=parameters["epsilon"],  # type: ignore[arg-type]  # a Fraction after validation
        relation=parameters.get("relation", "add_remove"),  # type: ignore[arg-type]  # checked
        n_public=parameters.get("n_public"),
        max_contributions=parameters.get("max_contributions", 1),
    )
