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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
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
from beam_dp.batching import ContributionBounds
from beam_dp.beam.options import (
    CommonOptions,
    EpsilonLike,
    KeyOptions,
    ResolvedBudget,
    check_windows_per_unit,
    effective_keys_per_unit,
    mechanism_name,
    read_labels,
    resolve_budget,
    split_share,
)
from beam_dp.mechanisms import Method, RandomSource, as_random_source, select, top_k
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.mechanisms.selection import check_method
from beam_dp.release import Release, make_release, selection_statement
from beam_dp.scores import DistinctUnitCount, PluralityVote, Revenue, Score, VoteMargin

# The options, budget and label rules live in beam_dp.beam.options and method names in
# beam_dp.mechanisms.selection; the names stay importable from here.
__all__ = [
    "CommonOptions",
    "EpsilonLike",
    "Labels",
    "ResolvedBudget",
    "SelectionSpec",
    "accuracy_kind_of",
    "check_method",
    "check_windows_per_unit",
    "describe",
    "effective_keys_per_unit",
    "ledger_bounds",
    "mechanism_name",
    "nearest_float",
    "read_labels",
    "resolve_budget",
    "sorted_labels",
    "split_share",
]

#: Candidate labels: a tuple (or any sequence), or a one-dimensional numpy array (a price grid).
Labels = Sequence[Any] | npt.NDArray[Any]

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

    def release(self, scores: npt.ArrayLike | Sequence[Fraction], labels: Labels) -> Release:
        """Choose ``k`` candidates from ``scores`` (one per label) and build the release.

        The exact sampler runs here, once, on the merged scores. When fewer than ``k``
        candidates exist (candidates from a side input), all of them are ranked, each round
        still at ``epsilon / k``, and the ledger records the smaller spend.
        """
        values = _score_row(scores, len(labels))
        source = as_random_source(self.rng)
        rounds = min(self.k, len(labels))
        options: dict[str, Any] = {
            "sensitivity": self.selection_sensitivity,
            "monotonic": self.monotone,
            "method": self.method,
            "rng": source,
        }
        record = self._record(labels, rounds, secure=source.secure)
        if self.k == 1:
            value: Any = _label(labels, select(values, epsilon=record.ledger.epsilon, **options))
        else:
            chosen = top_k(values, rounds, epsilon=record.ledger.epsilon, **options)
            value = [_label(labels, i) for i in chosen]
        return dataclasses.replace(record, value=value)

    def release_many(
        self, scores: Sequence[npt.ArrayLike | Sequence[Fraction]], labels: Labels
    ) -> list[Release]:
        """One release per score vector (one per key), as :meth:`release` gives each.

        With ``k = 1`` every vector's selection is drawn by one call of
        :func:`~beam_dp.mechanisms.select_per_key`: the same law as :meth:`release` called once
        per vector, independently, for a few microseconds per vector instead of a few hundred.
        The release records are :meth:`release`'s (the same ε, ρ, sensitivity, mechanism,
        rounds and accuracy statement); only the values differ. Top-k (``k > 1``) calls
        :meth:`release` per vector.

        Privacy:
            Each vector's selection spends what :meth:`release` spends on it (ε, or ρ); how
            the vectors compose (the keys of a ``.PerKey`` transform) is the transform's
            accounting, unchanged.
        """
        if self.k != 1:
            return [self.release(row, labels) for row in scores]
        if not scores:
            return []
        rows = [_score_row(row, len(labels)) for row in scores]
        dtypes = {row.dtype for row in rows}
        if len(dtypes) == 1 and next(iter(dtypes)).kind != "O":
            flat = np.concatenate(rows)
        else:  # mixed types: exact Python numbers (never a lossy common float type)
            flat = np.concatenate([row.astype(object) for row in rows])
        source = as_random_source(self.rng)
        record = self._record(labels, 1, secure=source.secure)
        chosen = select_per_key(
            flat,
            np.full(len(rows), len(labels), dtype=np.int64),
            epsilon=record.ledger.epsilon,
            sensitivity=self.selection_sensitivity,
            monotonic=self.monotone,
            method=self.method,
            rng=source,
        )
        return [dataclasses.replace(record, value=_label(labels, i)) for i in chosen.tolist()]

    def _record(self, labels: Labels, rounds: int, *, secure: bool) -> Release:
        """The release record of one selection over ``labels`` in ``rounds`` rounds (value None).

        Fewer rounds than ``k`` (candidates from a side input) spend ``epsilon * rounds / k``.
        """
        epsilon = self.epsilon if rounds == self.k else self.epsilon * rounds / self.k
        rho = None if self.rho is None else self.rho * rounds / self.k
        release = make_release(
            name=self.name,
            statistic=self.statistic,
            value=None,
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
            rng_secure=secure,
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


def _score_row(scores: npt.ArrayLike | Sequence[Fraction], num_labels: int) -> npt.NDArray[Any]:
    """One selection's scores as an array, one per label."""
    values = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    if values.shape[0] != num_labels:
        raise ValueError(
            f"the score vector has {values.shape[0]} entries for {num_labels} candidates"
        )
    return values


def _label(labels: Labels, index: int) -> Any:
    """The label at ``index``, as a Python value when labels are a numpy array (prices)."""
    label = labels[index]
    return label.item() if isinstance(label, np.generic) else label


def nearest_float(value: Fraction) -> float:
    """A public parameter as a float for a release value (e.g. a price)."""
    result = float(value)
    if not math.isfinite(result):
        raise ValueError("a candidate label is not representable as a finite float")
    return result


def describe(
    spec: SelectionSpec,
    *,
    labels: Labels | None,
    bounds: ContributionBounds | None,
    keys: KeyOptions,
    epsilon_total: float,
) -> dict[str, Any]:
    """Display data of a transform: public parameters only."""
    shown = spec.display_data()
    shown["epsilon_total"] = epsilon_total
    shown["num_candidates"] = "side input" if labels is None else len(labels)
    shown["privacy_unit"] = "record" if bounds is None else "unit_column"
    if keys.keys is not None:
        shown["num_keys"] = len(keys.keys)
    return shown


def ledger_bounds(
    base: Mapping[str, int],
    keys: KeyOptions,
    options: CommonOptions,
    record_level: bool,
    windows: int,
) -> dict[str, int]:
    """Every contribution bound the ledger records: the statistic's own, what a unit is
    (record-level privacy, or ids read as given: :meth:`CommonOptions.unit_bounds`), the keys
    and the windows a unit reaches."""
    bounds = {**base, **options.unit_bounds(record_level)}
    return {**bounds, **keys.ledger_bounds(record_level), "max_windows_per_unit": windows}
