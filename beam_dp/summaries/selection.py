"""Planning a private selection: everything a release needs, fixed before any data is read.

The Beam layer (:mod:`beam_dp.beam.selection`) reads a transform's keywords, resolves its
budget and wires a plan into its combiner; everything else of a selection is here, without
Beam:

* :class:`SelectionSpec`, one selection's public parameters (the sensitivity and monotonicity
  from the score objects of :mod:`beam_dp.scores` for the relation and the bounds the pipeline
  enforces, ε and ρ of one release, ``k`` rounds), whose :meth:`~SelectionSpec.release` runs
  the exact sampler of :mod:`beam_dp.mechanisms` once on the merged scores and builds the
  release record (``.PerKey`` with ``k = 1``: :meth:`~SelectionSpec.release_many`, one
  vectorised exact draw for many keys);
* the plans of the four statistics (:func:`plan_top_candidates`,
  :func:`plan_top_after_key_selection`, :func:`plan_best_price`, :func:`plan_election`,
  :func:`plan_custom`): the checks of their own parameters, the score, the contribution bounds
  the pipeline enforces and the ones the ledger records, and the spec, as a
  :class:`SelectionPlan`;
* :class:`PackedGrid`, a price grid as runs of equal steps (what a combiner pickles).

The plans read the transform's shared options and budget through two protocols,
:class:`SelectionOptions` and :class:`SelectionBudget` (the Beam layer's ``CommonOptions`` and
``ResolvedBudget`` satisfy them), so this module never imports the Beam layer
(``tests/test_architecture.py``).

Privacy: a budget share names the mechanism ``method`` (``method + "_top_k"`` with
``rounds=k`` for top-k); ``Release.ledger.rho`` is set when it is accounted by zCDP. Units
(``record_level=True``), keys, windows and the budget division: ``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

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
from beam_dp.mechanisms import Method, RandomSource, as_random_source, select, top_k
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.mechanisms.selection import check_method
from beam_dp.release import Release, make_release, selection_statement
from beam_dp.scores import DistinctUnitCount, PluralityVote, Revenue, Score, VoteMargin
from beam_dp.summaries.counts import PER_UNIT_RULES

__all__ = [
    "Counts",
    "Labels",
    "PackedGrid",
    "SelectionBudget",
    "SelectionOptions",
    "SelectionPlan",
    "SelectionSpec",
    "accuracy_kind_of",
    "check_declared_score",
    "check_election_score",
    "check_key_selection_relation",
    "check_max_candidates_per_unit",
    "check_per_unit_rule",
    "check_release_names",
    "describe",
    "election_score",
    "ledger_bounds",
    "mechanism_name",
    "plan_best_price",
    "plan_custom",
    "plan_election",
    "plan_top_after_key_selection",
    "plan_top_candidates",
    "revenue_score",
    "sorted_labels",
]


# ------------------------------------------------------------------------ what a plan reads


class SelectionOptions(Protocol):
    """The shared options of one selection transform, as a plan reads them (the Beam layer's
    ``CommonOptions``)."""

    @property
    def method(self) -> Method: ...

    @property
    def relation(self) -> Relation: ...

    @property
    def k(self) -> int: ...

    @property
    def confidence(self) -> float: ...

    @property
    def rng(self) -> RandomSource | None: ...

    @property
    def max_keys_per_unit(self) -> int | None: ...

    def check_k(self, num_candidates: int | None) -> None:
        """``k`` must not exceed the number of public candidates (when known)."""

    def unit_bounds(self, record_level: bool) -> dict[str, int]:
        """What the ledger records about the privacy unit."""

    def key_bounds(self, record_level: bool) -> dict[str, int]:
        """What the ledger records about the keys a unit reaches."""

    def windows_per_unit(self, record_level: bool) -> int:
        """The windows whose releases one unit can influence."""


class SelectionBudget(Protocol):
    """A release's resolved budget, as a plan reads it (the Beam layer's ``ResolvedBudget``)."""

    @property
    def name(self) -> str: ...

    @property
    def epsilon(self) -> float: ...

    @property
    def rho(self) -> float | None: ...


def mechanism_name(method: Method, k: int) -> str:
    """The ledger's mechanism name for ``k`` selections with ``method``."""
    return method if k == 1 else f"{method}_top_k"


# ---------------------------------------------------------------------------------- the spec


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
        budget: SelectionBudget,
        statistic: str,
        options: SelectionOptions,
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


def describe(
    spec: SelectionSpec,
    *,
    labels: Labels | None,
    bounds: ContributionBounds | None,
    keys: tuple[Any, ...] | None,
    epsilon_total: float,
) -> dict[str, Any]:
    """Display data of a transform: public parameters only."""
    shown = spec.display_data()
    shown["epsilon_total"] = epsilon_total
    shown["num_candidates"] = "side input" if labels is None else len(labels)
    shown["privacy_unit"] = "record" if bounds is None else "unit_column"
    if keys is not None:
        shown["num_keys"] = len(keys)
    return shown


def ledger_bounds(
    base: Mapping[str, int], options: SelectionOptions, record_level: bool
) -> dict[str, int]:
    """Every contribution bound the ledger records: the statistic's own, what a unit is
    (record-level privacy, or ids read as given: :meth:`SelectionOptions.unit_bounds`), the
    keys and the windows a unit reaches."""
    bounds = {**base, **options.unit_bounds(record_level)}
    windows = options.windows_per_unit(record_level)
    return {**bounds, **options.key_bounds(record_level), "max_windows_per_unit": windows}


# ---------------------------------------------------------------------------- a price grid


Counts = npt.NDArray[np.int64]


class PackedGrid:
    """A price grid (integer score steps and their float thresholds) as runs of equal steps.

    :meth:`pack` keeps a grid only if unpacking gives back both arrays exactly (checked when
    packing): the thresholds are ``scaled / 10**places`` in IEEE division, exact for integers
    below 2**53 and ``places <= 22``, which is how ``Revenue`` makes the nearest float of a
    decimal price.
    """

    __slots__ = ("first", "lengths", "places", "size", "steps")

    def __init__(self, first: int, steps: Counts, lengths: Counts, size: int, places: int) -> None:
        self.first = first
        self.steps = steps
        self.lengths = lengths
        self.size = size
        self.places = places

    def __getstate__(self) -> tuple[int, Counts, Counts, int, int]:
        return (self.first, self.steps, self.lengths, self.size, self.places)

    def __setstate__(self, state: tuple[int, Counts, Counts, int, int]) -> None:
        self.first, self.steps, self.lengths, self.size, self.places = state

    @classmethod
    def pack(
        cls, scaled: Counts, thresholds: npt.NDArray[np.float64], max_runs: int = 1024
    ) -> PackedGrid | None:
        """The packed grid, or None when it has more than ``max_runs`` runs or is not exact."""
        size = int(scaled.size)
        if size < 2 or int(scaled[-1]) >= 1 << 53 or int(scaled[0]) < 0:
            return None
        diffs = np.diff(scaled)
        starts = np.concatenate([[0], np.flatnonzero(diffs[1:] != diffs[:-1]) + 1])
        if starts.size > max_runs:
            return None
        lengths = np.diff(np.concatenate([starts, [diffs.size]])).astype(np.int64)
        first = float(scaled[0])
        places = next((p for p in range(23) if first / float(10**p) == float(thresholds[0])), None)
        if places is None:
            return None
        packed = cls(int(scaled[0]), diffs[starts].astype(np.int64), lengths, size, places)
        again_scaled, again_thresholds = packed.unpack()
        if np.array_equal(again_scaled, scaled) and np.array_equal(again_thresholds, thresholds):
            return packed
        return None

    def unpack(self) -> tuple[Counts, npt.NDArray[np.float64]]:
        """The scaled prices and their thresholds."""
        scaled = np.empty(self.size, dtype=np.int64)
        scaled[0] = self.first
        np.cumsum(np.repeat(self.steps, self.lengths), out=scaled[1:])
        scaled[1:] += self.first
        thresholds = scaled.astype(np.float64) / float(10**self.places)
        return scaled, thresholds


# ---------------------------------------------------------------------------------- the plans


@dataclass(frozen=True)
class SelectionPlan:
    """A selection release, planned: its spec and the contribution bounds the pipeline enforces.

    Attributes:
        spec: what every release needs after the merge (public).
        bounds: the contribution bounds enforced per unit; None at record level (each record
            is its own unit).
    """

    spec: SelectionSpec
    bounds: ContributionBounds | None


def check_max_candidates_per_unit(bound: object) -> None:
    """``TopCandidates``' bound on the distinct candidates a unit keeps: None or an integer."""
    if isinstance(bound, str) and bound == "auto":
        # contribution_bounds, "Which bounds are worth choosing": the noise is the same at
        # every bound here, so a chosen one would only drop candidates and spend budget.
        raise ValueError(
            "'max_candidates_per_unit' takes no 'auto' in TopCandidates: the distinct-unit "
            "count has sensitivity 1 whatever a unit names, so a bound never lowers the "
            "noise; leave it None (no bound) or give an integer (with candidates=None, "
            "KeySelection(max_candidates_per_unit='auto') chooses the key selection's bound, "
            "which sets its threshold)"
        )
    if bound is not None:
        DistinctUnitCount(1, bound)  # type: ignore[arg-type]  # validates the bound


def plan_top_candidates(
    options: SelectionOptions,
    budget: SelectionBudget,
    *,
    labels: Sequence[Any] | None,
    record_level: bool,
    max_candidates_per_unit: int | None,
) -> SelectionPlan:
    """Heavy hitters over public candidates (``labels``; None: from a side input).

    ``budget`` is one release's (one key, one window). The count's sensitivity is 1 whatever a
    unit names; no bound on the candidates per unit is needed, and an absent bound is left out
    of the ledger.
    """
    own_bounds: dict[str, int] = {}
    bounds: ContributionBounds | None
    if record_level:
        bounds = None
        own_bounds["max_candidates_per_unit"] = 1
    else:
        bounds = ContributionBounds(
            max_contributions_per_unit=max_candidates_per_unit,
            max_keys_per_unit=options.max_keys_per_unit,
            distinct_candidates=True,
        )
        own_bounds["distinct_candidates"] = 1
        if max_candidates_per_unit is not None:
            own_bounds["max_candidates_per_unit"] = max_candidates_per_unit
    spec = SelectionSpec.for_score(
        DistinctUnitCount(num_candidates=len(labels) if labels else 1),
        budget=budget,
        statistic="top_candidates",
        options=options,
        bounds=ledger_bounds(own_bounds, options, record_level),
    )
    return SelectionPlan(spec, bounds)


def check_key_selection_relation(relation: Relation) -> None:
    """DP key selection is defined for ``relation="add_remove"`` only."""
    if relation != "add_remove":
        raise ValueError(
            "DP key selection is defined for relation='add_remove': delta protects the "
            "presence of a unit, and of the labels only it holds"
        )


def check_release_names(selection_name: str, key_selection_name: str) -> None:
    """A top-k after key selection and its key selection are two releases: two names."""
    if selection_name == key_selection_name:
        raise ValueError(
            f"the key selection and the selection are both named {key_selection_name!r}; "
            "each release needs its own budget share name"
        )


def plan_top_after_key_selection(
    options: SelectionOptions,
    budget: SelectionBudget,
    *,
    labels_per_unit: int,
    record_level: bool,
) -> SelectionSpec:
    """The top-k among the labels DP key selection selects, on the same counts.

    ``budget`` is one window's; ``labels_per_unit`` the labels a unit keeps (the key
    selection's bound, 1 at record level).
    """
    bounds = {
        "max_candidates_per_unit": labels_per_unit,
        "distinct_candidates": 1,
        "max_windows_per_unit": options.windows_per_unit(record_level),
        **options.unit_bounds(record_level),
    }
    return SelectionSpec.for_score(
        DistinctUnitCount(num_candidates=1),
        budget=budget,
        statistic="top_candidates",
        options=options,
        bounds=bounds,
    )


def check_per_unit_rule(per_unit: object) -> None:
    """``BestPrice``'s rule for a unit's several values."""
    if per_unit not in PER_UNIT_RULES:
        raise ValueError(f"'per_unit' must be one of {list(PER_UNIT_RULES)}; received {per_unit!r}")


def revenue_score(prices: Sequence[Any] | Revenue | None) -> Revenue:
    """The revenue score of a grid: the default, a built :class:`Revenue` as it is, or a new one.

    A float64 array or a list of Python floats takes ``Revenue``'s vectorised reading.
    """
    if prices is None:
        return Revenue.default()
    if isinstance(prices, Revenue):
        return prices
    if isinstance(prices, np.ndarray):
        return Revenue(prices)
    return Revenue(tuple(prices))


def plan_best_price(
    options: SelectionOptions, budget: SelectionBudget, *, score: Revenue, record_level: bool
) -> SelectionPlan:
    """The revenue-maximising price over ``score``'s grid; ``budget`` is one release's.

    One value per unit comes from the per-unit rule, so no row bound is needed: the shuffle
    only brings each unit's rows together (and bounds its keys for ``.PerKey``).
    """
    bounds = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=None, max_keys_per_unit=options.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score,
        budget=budget,
        statistic="best_price",
        options=options,
        bounds=ledger_bounds(score.contribution_bounds, options, record_level),
    )
    return SelectionPlan(spec, bounds)


def check_election_score(score: object) -> None:
    """``Election``'s score: ``"plurality"`` or ``"margin"``."""
    if score not in ("plurality", "margin"):
        raise ValueError(f"'score' must be 'plurality' or 'margin'; received {score!r}")


def election_score(score: str, labels: Sequence[Any] | None) -> Score:
    """The score object of an election over ``labels`` (None: from a side input)."""
    if score == "margin":
        if labels is None or len(labels) != 2:
            raise ValueError(
                "score='margin' is the two-way margin: it needs exactly 2 candidates; "
                f"received {0 if labels is None else len(labels)}"
            )
        return VoteMargin()
    return PluralityVote(num_candidates=len(labels) if labels else 1)


def plan_election(
    options: SelectionOptions, budget: SelectionBudget, *, score: Score, record_level: bool
) -> SelectionPlan:
    """The winner under ``score``; ``budget`` is one release's. One vote per unit: a unit with
    several vote records keeps one (a per-unit rule)."""
    bounds = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=1, max_keys_per_unit=options.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score,
        budget=budget,
        statistic="election",
        options=options,
        bounds=ledger_bounds(score.contribution_bounds, options, record_level),
    )
    return SelectionPlan(spec, bounds)


def check_declared_score(
    sensitivity: object, monotone: object, bounds: object, statistic: object
) -> ContributionBounds:
    """A user's declared score (``ExponentialSelect``): the bounds it asks for, checked."""
    check_positive_finite(sensitivity, "sensitivity")
    if not isinstance(monotone, bool):
        raise TypeError(f"'monotone' must be a bool; received type {type(monotone).__name__}")
    requested = ContributionBounds() if bounds is None else bounds
    if not isinstance(requested, ContributionBounds):
        raise TypeError("'bounds' must be a beam_dp.batching.ContributionBounds")
    if not isinstance(statistic, str) or not statistic:
        raise ValueError(f"'statistic' must be a non-empty string; received {statistic!r}")
    return requested


def plan_custom(
    options: SelectionOptions,
    budget: SelectionBudget,
    *,
    statistic: str,
    sensitivity: float | Fraction,
    monotone: bool,
    requested: ContributionBounds,
    record_level: bool,
) -> SelectionPlan:
    """A selection with a user's score of declared ``sensitivity`` and ``monotone``-ness, under
    the ``requested`` bounds (their ``max_keys_per_unit`` is the ``.PerKey`` argument's);
    ``budget`` is one release's."""
    enforced = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=requested.max_contributions_per_unit,
            max_keys_per_unit=options.max_keys_per_unit,
            distinct_candidates=requested.distinct_candidates,
        )
    )
    spec = SelectionSpec(
        name=budget.name,
        statistic=statistic,
        method=options.method,
        k=options.k,
        epsilon=budget.epsilon,
        rho=budget.rho,
        selection_sensitivity=Fraction(sensitivity),
        sensitivity=float(sensitivity),
        monotone=monotone,
        relation=options.relation,
        contribution_bounds=ledger_bounds(
            {} if record_level else requested.to_dict(), options, record_level
        ),
        confidence=options.confidence,
        rng=options.rng,
    )
    return SelectionPlan(spec, enforced)
