"""What one selection releases and spends, fixed before the pipeline runs (no Beam here).

A :class:`SelectionSpec` holds everything the final step of a selection transform needs: the
privacy parameters (resolved from a float or a :class:`~beam_dp.accounting.BudgetShare`), the
sensitivity and monotonicity taken from the score object, the contribution bounds for the
ledger, and the sampler settings. :meth:`SelectionSpec.release` runs the exact sampler once on
a merged score vector and builds the :class:`~beam_dp.release.Release`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.accounting import BudgetShare
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho, floor_float
from beam_dp.mechanisms import (
    METHODS,
    Method,
    RandomSource,
    as_random_source,
    select,
    top_k,
)
from beam_dp.release import Release, make_release, selection_statement
from beam_dp.scores import DistinctUnitCount, PluralityVote, Revenue, Score, VoteMargin

__all__ = [
    "CommonOptions",
    "EpsilonLike",
    "ResolvedBudget",
    "SelectionSpec",
    "accuracy_kind_of",
    "check_method",
    "check_windows_per_unit",
    "effective_keys_per_unit",
    "mechanism_name",
    "nearest_float",
    "read_labels",
    "resolve_budget",
    "sorted_labels",
    "split_over_keys",
    "split_share",
]

EpsilonLike = float | BudgetShare

_ACCURACY_KINDS = ("distinct_count", "votes", "margin", "revenue", "score")


def accuracy_kind_of(score: Score) -> str:
    """The units a selection over ``score`` states its accuracy in (see
    :func:`beam_dp.release.selection_statement`)."""
    if isinstance(score, DistinctUnitCount):
        return "distinct_count"
    if isinstance(score, PluralityVote):
        return "votes"
    if isinstance(score, VoteMargin):
        return "margin"
    if isinstance(score, Revenue):
        return "revenue"
    return "score"


def check_method(method: object) -> Method:
    """Return ``method`` if it is ``"permute_and_flip"`` or ``"exponential"``."""
    if method == "permute_and_flip":
        return "permute_and_flip"
    if method == "exponential":
        return "exponential"
    raise ValueError(f"'method' must be one of {list(METHODS)}; received {method!r}")


def mechanism_name(method: Method, k: int) -> str:
    """The ledger's mechanism name for ``k`` selections with ``method``."""
    return method if k == 1 else f"{method}_top_k"


@dataclass(frozen=True)
class ResolvedBudget:
    """A selection's privacy parameters after reading a float or a budget share.

    Attributes:
        name: the release (share) name.
        epsilon: ε over the ``rounds`` selections of one release.
        rho: zCDP cost of one release when the share is accounted by zCDP, else None.
        mechanism: the ledger's mechanism name (decides the zCDP rate when ``rho`` is set).
        rounds: how many equal rounds ``epsilon`` is split into (k for top-k).
    """

    name: str
    epsilon: float
    rho: float | None
    mechanism: str | None = None
    rounds: int = 1


def resolve_budget(
    epsilon: object, *, name: str | None, default_name: str, mechanism: str, rounds: int
) -> ResolvedBudget:
    """Read ``epsilon`` (a float or an allocated :class:`BudgetShare`) for one transform.

    A share must be allocated (``PrivacyBudget.finalize()`` or ``spend()`` ran), be for the
    same mechanism as the transform (so that permute-and-flip is never accounted with the
    exponential mechanism's zCDP rate) and cover ``rounds`` selections (``k`` for top-k).

    Raises:
        ValueError: naming the parameter and the rule, before any pipeline runs.
    """
    if isinstance(epsilon, BudgetShare):
        if not epsilon.allocated:
            raise ValueError(
                f"budget share {epsilon.name!r} has no epsilon yet: call "
                "PrivacyBudget.finalize() before building the transform"
            )
        if epsilon.mechanism != mechanism:
            raise ValueError(
                f"budget share {epsilon.name!r} was requested for mechanism "
                f"{epsilon.mechanism!r}, but this transform runs {mechanism!r}; request the "
                "share with the transform's mechanism (its method, and k for top-k, decide it)"
            )
        if epsilon.rounds != rounds:
            raise ValueError(
                f"budget share {epsilon.name!r} covers rounds={epsilon.rounds}, but this "
                f"transform composes {rounds} round(s) (k for top-k, the levels or quantiles of a "
                f"quantile release); request it with rounds={rounds}"
            )
        if name is not None and name != epsilon.name:
            raise ValueError(
                f"'name' ({name!r}) differs from the budget share's name ({epsilon.name!r}); "
                "releases are recorded against the share, so leave 'name' unset"
            )
        return ResolvedBudget(
            epsilon.name, float(epsilon.epsilon), epsilon.rho, mechanism, int(rounds)
        )
    check_positive_finite(epsilon, "epsilon")
    chosen = default_name if name is None else name
    if not isinstance(chosen, str) or not chosen:
        raise ValueError(f"'name' must be a non-empty string; received {chosen!r}")
    return ResolvedBudget(chosen, float(epsilon), None, mechanism, int(rounds))  # type: ignore[arg-type]


def sorted_labels(labels: Iterable[Any]) -> tuple[Any, ...]:
    """Distinct labels in sorted order: the canonical candidate order for side inputs.

    A side input's element order is not guaranteed to be the same everywhere, so every worker
    sorts it; labels must therefore be mutually comparable (all strings or all numbers).
    """
    try:
        return tuple(sorted(set(labels)))
    except TypeError:
        raise TypeError(
            "candidate labels from a PCollection must be mutually comparable "
            "(all strings or all numbers) so that every worker orders them the same way"
        ) from None


def read_labels(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Public labels from a text file: one per line, surrounding blanks stripped, blank lines
    and lines starting with ``#`` skipped."""
    text = Path(path).read_text(encoding="utf-8")
    labels = tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if not labels:
        raise ValueError(f"candidate file {os.fspath(path)!r} holds no labels")
    return labels


@dataclass(frozen=True)
class CommonOptions:
    """The parameters every selection transform shares, validated at construction.

    See :mod:`beam_dp.beam.selection` for their meaning.
    """

    epsilon: EpsilonLike
    method: Method = "permute_and_flip"
    relation: Relation = "add_remove"
    k: int = 1
    name: str | None = None
    confidence: float = 0.95
    num_shards: int = 32
    salt: int | None = None
    on_bad_record: str = "fail"
    rng: RandomSource | None = None
    max_windows_per_unit: int = 1

    def __post_init__(self) -> None:
        check_method(self.method)
        check_positive_int(self.max_windows_per_unit, "max_windows_per_unit")
        check_relation(self.relation)
        check_positive_int(self.k, "k")
        check_probability_open(self.confidence, "confidence")
        check_positive_int(self.num_shards, "num_shards")
        if self.salt is not None and (
            isinstance(self.salt, bool) or not isinstance(self.salt, int)
        ):
            raise TypeError(f"'salt' must be an integer or None; received {self.salt!r}")
        if self.on_bad_record not in ("fail", "skip"):
            raise ValueError(
                f"'on_bad_record' must be 'fail' or 'skip'; received {self.on_bad_record!r}"
            )
        if self.rng is not None and not isinstance(self.rng, RandomSource):
            raise TypeError("'rng' must be None (the OS CSPRNG) or a beam_dp RandomSource")
        if not isinstance(self.epsilon, BudgetShare):
            check_positive_finite(self.epsilon, "epsilon")

    @property
    def mechanism(self) -> str:
        return mechanism_name(self.method, self.k)

    def budget(self, default_name: str) -> ResolvedBudget:
        """The resolved ε (and ρ) and release name; see :func:`resolve_budget`."""
        return resolve_budget(
            self.epsilon,
            name=self.name,
            default_name=default_name,
            mechanism=self.mechanism,
            rounds=self.k,
        )

    def windows_per_unit(self, record_level: bool) -> int:
        """The windows whose releases one unit can influence (``max_windows_per_unit``).

        Raises:
            ValueError: for a bound above 1 with record-level privacy, where no unit column
                tells a unit's windows apart (each record is in one fixed window).
        """
        return check_windows_per_unit(self.max_windows_per_unit, record_level)

    def check_k(self, num_candidates: int | None) -> None:
        """``k`` must not exceed the number of public candidates (when known)."""
        if num_candidates is not None and self.k > num_candidates:
            raise ValueError(
                f"'k' must be at most the number of candidates ({num_candidates}); "
                f"received {self.k}"
            )


@dataclass(frozen=True)
class SelectionSpec:
    """One selection's public parameters; :meth:`release` samples and builds the record.

    Attributes:
        name: The budget share (or release) name.
        statistic: What is released (``"top_candidates"``, ``"best_price"``, ...).
        method: ``"permute_and_flip"`` or ``"exponential"``.
        k: The number of candidates released (top-k by peeling when > 1).
        epsilon: ε of one selection over its ``k`` rounds (for ``.PerKey``, of one key).
        rho: zCDP cost of one selection, when the budget share is accounted by zCDP.
        selection_sensitivity: Δ in the units of the score vectors given to :meth:`release`
            (``Score.scaled_sensitivity``): the sampler works on exact integers.
        sensitivity: Δ in the score's real units (the ledger's ``sensitivity``).
        monotone: Whether the score is monotone under ``relation``.
        relation: The neighbouring relation.
        contribution_bounds: Bounds the pipeline enforces per unit (ledger).
        confidence: Confidence level of the accuracy bound.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests.
        accuracy_kind: The units the accuracy is stated in (see
            :func:`beam_dp.release.selection_statement`): ``"distinct_count"``, ``"votes"``,
            ``"margin"``, ``"revenue"`` or ``"score"``; :meth:`for_score` takes it from the score.
    """

    name: str
    statistic: str
    method: Method
    k: int
    epsilon: float
    rho: float | None
    selection_sensitivity: Fraction
    sensitivity: float
    monotone: bool
    relation: Relation
    contribution_bounds: Mapping[str, int] = field(default_factory=dict)
    confidence: float = 0.95
    rng: RandomSource | None = None
    accuracy_kind: str = "score"

    def __post_init__(self) -> None:
        check_method(self.method)
        if self.accuracy_kind not in _ACCURACY_KINDS:
            raise ValueError(
                f"'accuracy_kind' must be one of {list(_ACCURACY_KINDS)}; "
                f"received {self.accuracy_kind!r}"
            )
        check_positive_int(self.k, "k")
        check_positive_finite(self.epsilon, "epsilon")
        check_positive_finite(self.selection_sensitivity, "sensitivity")
        check_positive_finite(self.sensitivity, "sensitivity")
        check_relation(self.relation)
        check_probability_open(self.confidence, "confidence")
        if not isinstance(self.monotone, bool):
            raise TypeError("'monotone' must be a bool")

    @property
    def mechanism(self) -> str:
        return mechanism_name(self.method, self.k)

    @classmethod
    def for_score(
        cls,
        score: Score,
        *,
        budget: ResolvedBudget,
        statistic: str,
        options: CommonOptions,
        bounds: Mapping[str, int],
    ) -> SelectionSpec:
        """A spec whose sensitivity and monotonicity come from ``score`` under the relation.

        ``bounds`` are all the contribution bounds the ledger records.
        """
        return cls(
            name=budget.name,
            statistic=statistic,
            method=options.method,
            k=options.k,
            epsilon=budget.epsilon,
            rho=budget.rho,
            selection_sensitivity=score.scaled_sensitivity(options.relation),
            sensitivity=float(score.sensitivity(options.relation)),
            monotone=score.monotone(options.relation),
            relation=options.relation,
            contribution_bounds=dict(bounds),
            confidence=options.confidence,
            rng=options.rng,
            accuracy_kind=accuracy_kind_of(score),
        )

    def release(self, scores: npt.ArrayLike | Sequence[Fraction], labels: Sequence[Any]) -> Release:
        """Choose ``k`` candidates from ``scores`` (one per label) and build the release.

        The exact sampler runs here, once, on the merged scores. When fewer than ``k``
        candidates exist (candidates from a side input), all of them are ranked, each round
        still at ``epsilon / k``, and the ledger records the smaller spend.
        """
        values = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
        if values.shape[0] != len(labels):
            raise ValueError(
                f"the score vector has {values.shape[0]} entries for {len(labels)} candidates"
            )
        source = as_random_source(self.rng)
        rounds = min(self.k, len(labels))
        epsilon = self.epsilon if rounds == self.k else self.epsilon * rounds / self.k
        rho = None if self.rho is None else self.rho * rounds / self.k
        options: dict[str, Any] = {
            "sensitivity": self.selection_sensitivity,
            "monotonic": self.monotone,
            "method": self.method,
            "rng": source,
        }
        if self.k == 1:
            value: Any = labels[select(values, epsilon=epsilon, **options)]
        else:
            chosen = top_k(values, rounds, epsilon=epsilon, **options)
            value = [labels[i] for i in chosen]
        release = make_release(
            name=self.name,
            statistic=self.statistic,
            value=value,
            mechanism=mechanism_name(self.method, self.k),
            epsilon=epsilon,
            sensitivity=self.sensitivity,
            neighbouring=self.relation,
            monotone=self.monotone,
            num_candidates=len(labels),
            contribution_bounds=self.contribution_bounds,
            confidence=self.confidence,
            rounds=rounds,
            rho=rho,
            rng_secure=source.secure,
        )
        # The per-round score-loss bound, in the score's units, stated in its own words.
        statement = selection_statement(
            self.accuracy_kind,
            score_loss=release.ledger.accuracy["score_loss"],
            k=rounds,
            confidence=self.confidence,
            record_level="record_level_privacy" in self.contribution_bounds,
        )
        return dataclasses.replace(release, statement=statement)

    def display_data(self) -> dict[str, Any]:
        """Public parameters for pipeline graphs (never data)."""
        return {
            "name": self.name,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "relation": self.relation,
            "sensitivity": self.sensitivity,
            "monotone": self.monotone,
            "k": self.k,
            "contribution_bounds": str(dict(self.contribution_bounds)),
        }


def effective_keys_per_unit(max_keys_per_unit: int | None, num_keys: int) -> int:
    """How many keys' selections one unit can influence: ``min(max_keys_per_unit, keys)``."""
    return num_keys if max_keys_per_unit is None else min(max_keys_per_unit, num_keys)


def check_windows_per_unit(max_windows_per_unit: object, record_level: bool) -> int:
    """Validate ``max_windows_per_unit``: an integer >= 1, and 1 with record-level privacy.

    Record-level privacy has no unit column to bound a unit's windows with; a record is in
    exactly one window because only ``FixedWindows`` are accepted then (see
    :func:`beam_dp.beam.bounding.check_windowing`).
    """
    check_positive_int(max_windows_per_unit, "max_windows_per_unit")
    if record_level and max_windows_per_unit != 1:
        raise ValueError(
            "'max_windows_per_unit' applies only with a 'unit_column': with unit_column=None "
            "(record-level privacy) every record is its own unit and lies in one window; "
            f"received {max_windows_per_unit!r}"
        )
    return int(max_windows_per_unit)  # type: ignore[call-overload]


def split_share(
    budget: ResolvedBudget, *, keys_per_unit: int = 1, windows_per_unit: int = 1
) -> ResolvedBudget:
    """The budget of one release when a unit can influence ``keys · windows`` releases.

    A ``.PerKey`` transform releases once per public key (and every transform once per
    window); one unit can influence ``n = keys_per_unit · windows_per_unit`` of those
    releases, and together they must cost no more than ``budget``:

    * basic composition (``budget.rho`` is None): each release runs at ``ε / n``, rounded
      down, so that ``n`` of them never exceed ``ε``;
    * zCDP (``budget.rho`` set): each release gets ``ρ / n`` (rounded down), and runs at the
      largest ε whose cost at the mechanism's rate is at most that: ``ε / √n`` for the
      mechanisms accounted by ``ρ ∝ ε²``, rounded down with exact rational arithmetic so
      that ``n`` releases cost at most the share's ρ.

    With ``n = 1`` (``.Globally``, one window per unit, or ``max_keys_per_unit=1``: parallel
    composition) the budget is returned as it is.

    Privacy:
        The ``n`` releases one unit can reach compose to the share's ε (basic) or ρ (zCDP);
        releases the unit cannot reach are parallel to them.
    """
    check_positive_int(keys_per_unit, "keys_per_unit")
    check_positive_int(windows_per_unit, "windows_per_unit")
    parts = keys_per_unit * windows_per_unit
    if parts == 1:
        return budget
    if budget.rho is None:
        epsilon = floor_float(Fraction(budget.epsilon) / parts)
        return dataclasses.replace(budget, epsilon=epsilon)
    if budget.mechanism is None:
        raise ValueError("a zCDP budget needs its mechanism to be split over keys or windows")
    kind = privacy_kind(budget.mechanism)
    if kind not in ZCDP_RATE:
        raise ValueError(
            f"mechanism {budget.mechanism!r} has no zCDP rate to split its budget over keys "
            "or windows"
        )
    rate = ZCDP_RATE[kind]
    rho = floor_float(Fraction(budget.rho) / parts)
    # The largest ε (over the release's rounds) with rate · ε² / rounds <= rho, exactly.
    epsilon = epsilon_per_round_for_rho(rho, rate / budget.rounds, 1)
    return dataclasses.replace(budget, epsilon=epsilon, rho=rho)


def split_over_keys(budget: ResolvedBudget, keys_per_unit: int) -> ResolvedBudget:
    """The budget of one key's selection: :func:`split_share` over ``keys_per_unit`` keys."""
    return split_share(budget, keys_per_unit=keys_per_unit)


def nearest_float(value: Fraction) -> float:
    """A public parameter as a float for a release value (e.g. a price)."""
    result = float(value)
    if not math.isfinite(result):
        raise ValueError("a candidate label is not representable as a finite float")
    return result
