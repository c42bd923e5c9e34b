"""Private selection on Beam: heavy hitters, best price, elections and a user's own score.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms, as Beam's own
combiners (``Count.Globally``, ``Top.PerKey``)::

    releases = batches | TopCandidates.Globally(
        candidate_column="site", candidates=sites, unit_column="user_id", epsilon=0.5)

The transforms take **batches** (pyarrow RecordBatches or Tables, mappings of columns, lists of
dicts). Read top to bottom: the options of each statistic, the spec of one selection
(:class:`SelectionSpec`: the sensitivity and monotonicity from the score objects of
:mod:`beam_dp.scores` for the relation and the bounds the pipeline enforces, the exact sampler
of :mod:`beam_dp.mechanisms` run once on the merged scores, the release record), the
combiners (each batch reduced with numpy into an integer vector indexed by candidate; vectors
merge by addition; ``.PerKey`` with ``k = 1`` releases many keys with one vectorised exact
draw, :func:`~beam_dp.mechanisms.select_per_key`), the wiring, and the transforms.
Only :class:`ExponentialSelect` takes a declared sensitivity, for a user's score.

Candidates (``candidates=``) are public: a sequence of labels, a path to a text file (one
label per line), or a PCollection of labels used as a side input (for counts-based scores;
every worker sorts it, so labels must be mutually comparable). When the candidates are not
public, ``TopCandidates.Globally(candidates=None, key_selection=KeySelection(...))`` runs DP
key selection first (:mod:`beam_dp.beam.key_selection`, the one family module this one
imports).

Privacy: a budget share names the mechanism ``method`` (``method + "_top_k"`` with
``rounds=k`` for top-k); ``Release.ledger.rho`` is set when it is accounted by zCDP. Units
(``record_level=True``), keys, windows and the budget division:
``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Required, TypedDict, Unpack

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import PCollection

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ColumnBatch,
    ContributionBounds,
    PublicIndex,
    encode_batch,
    num_rows,
)
from beam_dp.batching.columns import LabelMatch, with_source
from beam_dp.beam._contributions import is_heartbeat
from beam_dp.beam._graph import BatchedSelectFn, split_by_key
from beam_dp.beam._transform import (
    Built,
    CommonOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    PublicList,
    ResolvedBudget,
    check_column,
    divide_budget,
    mechanism_name,
    static_labels,
    take_options,
)
from beam_dp.beam.key_selection import KeySelection, key_selection_wiring
from beam_dp.mechanisms import Method, RandomSource, as_random_source, select, top_k
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.mechanisms.selection import check_method
from beam_dp.release import Release, make_release, selection_statement
from beam_dp.scores import DistinctUnitCount, PluralityVote, Revenue, Score, VoteMargin
from beam_dp.summaries.counts import (
    PER_UNIT_RULES,
    PerUnitRule,
    at_least_counts,
    candidate_counts,
    merge_into,
    reduce_per_unit,
    threshold_histogram,
)

__all__ = [
    "BestPrice",
    "CandidateCountsFn",
    "Election",
    "ExponentialSelect",
    "PackedGrid",
    "RevenueFn",
    "SelectionSpec",
    "TopCandidates",
]


# ------------------------------------------------------------------------------- options


Candidates = Sequence[Any] | str | os.PathLike[str] | PCollection

# A statistic's own keywords are declared once, in a TypedDict of the functional form (its
# Required[...] stays visible at run time, __required_keys__, which a class body under
# ``from __future__ import annotations`` would hide), and combined with PrivateOptions /
# PerKeyOptions into each variant's ``**options``; its build function reads them and applies
# their defaults.
_TopCandidatesOwn = TypedDict(  # noqa: UP013 (Required read at run time)
    "_TopCandidatesOwn",
    {
        "candidate_column": Required[str],
        "unit_column": str | None,
        "k": int,
        # "auto" is refused with its reason (and taken by a KeySelection in job configs)
        "max_candidates_per_unit": int | Literal["auto"] | None,
    },
    total=False,
)


_MaybePublicCandidates = TypedDict(  # noqa: UP013 (Required read at run time)
    "_MaybePublicCandidates",
    {"candidates": Required[Candidates | None], "key_selection": KeySelection | None},
    total=False,
)


_PublicCandidates = TypedDict(  # noqa: UP013 (Required read at run time)
    "_PublicCandidates", {"candidates": Required[Candidates]}
)


class TopCandidatesArgs(_TopCandidatesOwn, _MaybePublicCandidates, total=False):
    """:class:`TopCandidates`' own keywords (``.Globally``)."""


class TopCandidatesGloballyOptions(TopCandidatesArgs, PrivateOptions, total=False):
    """Every keyword of ``TopCandidates.Globally``."""


class TopCandidatesPerKeyOptions(_TopCandidatesOwn, _PublicCandidates, PerKeyOptions, total=False):
    """Every keyword of ``TopCandidates.PerKey``."""


BestPriceArgs = TypedDict(  # noqa: UP013 (Required read at run time)
    "BestPriceArgs",
    {
        "value_column": Required[str],
        "unit_column": str | None,
        "prices": Sequence[Any] | Revenue | None,
        "per_unit": str,
    },
    total=False,
)


class BestPriceGloballyOptions(BestPriceArgs, PrivateOptions, total=False):
    """Every keyword of ``BestPrice.Globally``."""


class BestPricePerKeyOptions(BestPriceArgs, PerKeyOptions, total=False):
    """Every keyword of ``BestPrice.PerKey``."""


_ElectionOwn = TypedDict(  # noqa: UP013 (Required read at run time)
    "_ElectionOwn",
    {"candidate_column": Required[str], "unit_column": str | None, "score": str},
    total=False,
)


class ElectionArgs(_ElectionOwn, _PublicCandidates, total=False):
    """:class:`Election`'s own keywords."""


class ElectionGloballyOptions(ElectionArgs, PrivateOptions, total=False):
    """Every keyword of ``Election.Globally``."""


class ElectionPerKeyOptions(ElectionArgs, PerKeyOptions, total=False):
    """Every keyword of ``Election.PerKey``."""


# ``score_fn`` stays positional.
ExponentialSelectArgs = TypedDict(  # noqa: UP013 (Required read at run time)
    "ExponentialSelectArgs",
    {
        "candidates": Required[PublicList],
        "sensitivity": Required[float | Fraction],
        "monotone": Required[bool],
        "unit_column": str | None,
        "candidate_column": str | None,
        "value_column": str | None,
        "bounds": ContributionBounds | None,
        "statistic": str,
        "k": int,
    },
    total=False,
)


class ExponentialSelectGloballyOptions(ExponentialSelectArgs, PrivateOptions, total=False):
    """Every keyword of ``ExponentialSelect.Globally``."""


class ExponentialSelectPerKeyOptions(ExponentialSelectArgs, PerKeyOptions, total=False):
    """Every keyword of ``ExponentialSelect.PerKey``."""


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
    base: Mapping[str, int], options: CommonOptions, record_level: bool
) -> dict[str, int]:
    """Every contribution bound the ledger records: the statistic's own, what a unit is
    (record-level privacy, or ids read as given: :meth:`CommonOptions.unit_bounds`), the keys
    and the windows a unit reaches."""
    bounds = {**base, **options.unit_bounds(record_level)}
    windows = options.windows_per_unit(record_level)
    return {**bounds, **options.key_bounds(record_level), "max_windows_per_unit": windows}


# ----------------------------------------------------------------------------- the combiners


Counts = npt.NDArray[np.int64]


class _LabelCache:
    """The sorted labels of a side input, recomputed only when the side input object changes.

    Static labels may be a tuple or a one-dimensional numpy array (a price grid: one buffer to
    pickle instead of a million floats).
    """

    def __init__(self, static: Labels | None) -> None:
        self._static = static
        self._source: Any = None
        self._labels: Labels = ()

    @property
    def static(self) -> Labels | None:
        """The static labels (None: from a side input)."""
        return self._static

    def get(self, args: Sequence[Any]) -> Labels:
        if self._static is not None:
            return self._static
        side = args[0]
        if side is not self._source:
            self._labels = sorted_labels(side)
            self._source = side
        return self._labels

    def __getstate__(self) -> tuple[Labels | None]:
        # A one-element tuple (never falsy, so that copy and pickle call __setstate__).
        return (self._static,)

    def __setstate__(self, state: tuple[Labels | None]) -> None:
        self.__init__(state[0])  # type: ignore[misc]


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


class _VectorSelectFn(BatchedSelectFn):
    """Base combiner: an int64 vector accumulator that adds per batch and merges by addition.

    Subclasses define the accumulator length, what one batch adds, and the scores. As a
    :class:`~beam_dp.beam._graph.BatchedSelectFn`, ``.PerKey`` transforms release many keys'
    selections at once (:meth:`scores_of`, :meth:`release_batch`) when ``k = 1``.
    """

    def __init__(self, spec: SelectionSpec, labels: Labels | None) -> None:
        super().__init__()
        self._spec = spec
        self._labels = _LabelCache(labels)

    def _size(self, num_candidates: int) -> int:
        return num_candidates

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        raise NotImplementedError

    def _scores(self, accumulator: Counts) -> Any:
        return accumulator

    def create_accumulator(self, *args: Any) -> Counts:
        return np.zeros(self._size(len(self._labels.get(args))), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            accumulator += self._summarise(batch, len(self._labels.get(args)))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> list[Release]:
        labels = self._labels.get(args)
        if len(labels) == 0:  # an empty side input: nothing to select from, nothing released
            return []
        return [self._spec.release(self._scores(accumulator), labels)]

    @property
    def batchable(self) -> bool:
        """One selection per key (``k = 1``): keys can be released in batches."""
        return self._spec.k == 1

    def row_size(self) -> int | None:
        static = self._labels.static
        return None if static is None else self._size(len(static))

    def shard_fn(self, keys_per_shard: int) -> beam.CombineFn:
        return _ShardFn(self, keys_per_shard)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        """Add a batch into the rows ``rows`` (one per record: its key's row) of a shard's
        accumulator; by default one key at a time (all of a key's rows together)."""
        keyed = dict(batch)
        keyed[KEY] = rows
        for row, sub in split_by_key(keyed):
            accumulator[row] += self._summarise(sub, n)

    def scores_of(self, accumulator: Counts, *args: Any) -> Any:
        """The merged scores :meth:`extract_output` would select from (None: no candidate)."""
        if len(self._labels.get(args)) == 0:
            return None
        return self._scores(accumulator)

    def release_batch(self, scores: Sequence[Any], *args: Any) -> list[list[Release]]:
        """Each key's releases, as :meth:`extract_output` would give them, drawn together."""
        labels = self._labels.get(args)
        present = [row for row in scores if row is not None]
        releases = iter(self._spec.release_many(present, labels) if len(labels) else [])
        return [[] if row is None else [next(releases)] for row in scores]

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()


class CandidateCountsFn(_VectorSelectFn):
    """Rows per candidate: distinct units (heavy hitters) or votes (elections).

    After bounding with distinct candidates (or one vote per unit), or when every record is
    its own unit, the rows naming a candidate are exactly its distinct units or votes, so a
    batch adds ``bincount(candidate)``.

    Args:
        spec: the selection's parameters.
        labels: the public candidates, or None when they come from a side input.
        score: ``"counts"`` (the count itself) or ``"margin"`` (two candidates:
            ``#r - #other``).
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels | None,
        score: Literal["counts", "margin"] = "counts",
    ) -> None:
        super().__init__(spec, labels)
        self._score = score

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        return candidate_counts(batch[CANDIDATE], num_candidates)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        # Rows per (key, candidate) at once: the same counts as one bincount per key.
        cells = accumulator.shape[0] * n
        positions = np.asarray(batch[CANDIDATE], dtype=np.int64).ravel()
        if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= n):
            raise ValueError(f"candidate positions must lie in [0, {n})")  # as candidate_counts
        flat = rows * n + positions
        accumulator += np.bincount(flat, minlength=cells).reshape(accumulator.shape)

    def _scores(self, accumulator: Counts) -> Counts:
        if self._score == "margin":
            margin = accumulator[0] - accumulator[1]
            return np.array([margin, -margin], dtype=np.int64)
        return accumulator


class RevenueFn(_VectorSelectFn):
    """Revenue ``p * #{units with x >= p}`` from a histogram of one value per unit.

    The accumulator is the histogram of per-unit values over the price thresholds
    (``len(prices) + 1`` buckets); the number of buyers at each price is a reversed cumulative
    sum of it.

    Args:
        spec: the selection's parameters.
        labels: the prices as release labels (a tuple, or a float array: a large grid then
            pickles as one buffer).
        thresholds: the nearest float of each price, sorted (``x >= price`` exactly when
            ``x >= threshold`` for a decimal price; see ``Revenue``).
        scaled_prices: each price in integer score steps (``price / Revenue.unit``).
        per_unit: how a unit's several values become one (``"min"``, ``"max"``, ``"mean"``);
            None when every record is its own unit.
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels,
        thresholds: npt.NDArray[np.float64],
        scaled_prices: Counts,
        per_unit: PerUnitRule | None,
    ) -> None:
        super().__init__(spec, labels)
        self._thresholds = thresholds
        self._scaled_prices = scaled_prices
        self._per_unit = per_unit
        self._packed: PackedGrid | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Beam pickles (and bz2-compresses) a combiner many times while it builds and starts a
        # job: a grid given as START:STOP:STEP (runs of equal steps) goes as a few numbers,
        # not as two arrays of a million entries (seconds per pickle).
        state = dict(self.__dict__)
        state["_packed"] = None
        if self._packed is None:
            self._packed = PackedGrid.pack(self._scaled_prices, self._thresholds)
        if self._packed is not None:
            state["_grid"] = self._packed
            state["_labels_are_thresholds"] = self._labels.static is self._thresholds
            state["_scaled_prices"] = state["_thresholds"] = None
            if state["_labels_are_thresholds"]:
                state["_labels"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        grid = state.pop("_grid", None)
        labels_are_thresholds = state.pop("_labels_are_thresholds", False)
        self.__dict__.update(state)
        if grid is not None:
            self._scaled_prices, self._thresholds = grid.unpack()
            self._packed = grid
            if labels_are_thresholds:
                self._labels = _LabelCache(self._thresholds)

    def _size(self, num_candidates: int) -> int:
        return num_candidates + 1

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        values = batch[VALUE]
        if self._per_unit is not None:
            values = reduce_per_unit(batch[UNIT], values, self._per_unit)
        return threshold_histogram(values, self._thresholds)

    def _scores(self, accumulator: Counts) -> Any:
        buyers = at_least_counts(accumulator)
        if int(self._scaled_prices[-1]) * int(buyers[0] if buyers.size else 0) < (1 << 61):
            return self._scaled_prices * buyers
        # Beyond int64: exact Python integers (the sampler accepts them).
        return np.array(
            [int(p) * int(b) for p, b in zip(self._scaled_prices, buyers, strict=True)],
            dtype=object,
        )


class _ShardFn(beam.CombineFn):
    """One shard of a ``.PerKey`` selection's keys: a ``(keys_per_shard, size)`` accumulator.

    Row ``i`` is what the per-key combiner's accumulator would be for key
    ``shard * keys_per_shard + i`` (``position % keys_per_shard``); ``extract_output`` gives
    the rows, released by :class:`~beam_dp.beam._graph.ReleaseShardFn`.
    """

    def __init__(self, fn: _VectorSelectFn, keys_per_shard: int) -> None:
        super().__init__()
        self._fn = fn
        self._keys_per_shard = keys_per_shard

    def create_accumulator(self, *args: Any) -> Counts:
        size = self._fn._size(len(self._fn._labels.get(args)))
        return np.zeros((self._keys_per_shard, size), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            rows = np.asarray(batch[KEY], dtype=np.int64) % self._keys_per_shard
            n = len(self._fn._labels.get(args))
            self._fn._summarise_keys(batch, rows, accumulator, n)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> Counts:
        return accumulator

    def display_data(self) -> dict[str, Any]:
        return self._fn.display_data()


class CustomScoreFn(beam.CombineFn):
    """Wrap a user's score ``CombineFn``: it accumulates batches, we select on its output.

    The user's combiner receives the same column batches as the built-in ones (every batch
    holds all bounded rows of each unit in it) and its ``extract_output`` must return one score
    per candidate (ints, floats or Fractions). Its accumulator is used as it is.
    """

    def __init__(self, spec: SelectionSpec, labels: tuple[Any, ...], score_fn: beam.CombineFn):
        super().__init__()
        self._spec = spec
        self._labels = labels
        self._score_fn = score_fn

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.teardown(*args, **kwargs)

    def create_accumulator(self) -> Any:
        return self._score_fn.create_accumulator()

    def add_input(self, accumulator: Any, batch: ColumnBatch) -> Any:
        if not num_rows(batch):
            return accumulator
        return self._score_fn.add_input(accumulator, batch)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return self._score_fn.merge_accumulators(accumulators)

    def compact(self, accumulator: Any) -> Any:
        return self._score_fn.compact(accumulator)

    def extract_output(self, accumulator: Any) -> list[Release]:
        scores = self._score_fn.extract_output(accumulator)
        values = list(scores) if not isinstance(scores, np.ndarray) else scores
        if len(values) != len(self._labels):
            raise ValueError(
                f"the score CombineFn returned {len(values)} scores for "
                f"{len(self._labels)} candidates"
            )
        if not isinstance(values, np.ndarray) and any(isinstance(v, Fraction) for v in values):
            return [self._spec.release(values, self._labels)]
        return [self._spec.release(np.asarray(values), self._labels)]

    def display_data(self) -> dict[str, Any]:
        return {**self._spec.display_data(), "score_fn": type(self._score_fn).__name__}


class EncodeWithSideCandidatesFn(beam.DoFn):
    """Encode batches against candidates that arrive as a side input (a list of labels).

    Labels are put in sorted order (as the combiners do), so positions agree everywhere.
    """

    def __init__(self, options: dict[str, Any], match: LabelMatch) -> None:
        super().__init__()
        self._options = options
        self._match = match
        self._source: Any = None
        self._index: PublicIndex | None = None

    def process(
        self, element: Any, candidates: Sequence[Any], window: Any = beam.DoFn.WindowParam
    ) -> Iterator[ColumnBatch]:
        # Asking for the window (unused) keeps Beam from holding the element after the call
        # (beam_dp.beam._calls).
        del window
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        if candidates is not self._source:
            labels = sorted_labels(candidates)
            # No public candidate: nothing can be selected and nothing is encoded.
            self._index = PublicIndex(labels, self._match) if labels else None
            self._source = candidates
        if self._index is not None:
            encoded = encode_batch(batch, candidates=self._index, **options)
            if num_rows(encoded):
                yield encoded


# -------------------------------------------------------------------------------- the wiring


def resolve_candidates(
    candidates: object, *, side_input_ok: bool
) -> tuple[tuple[Any, ...] | None, PCollection | None]:
    """``(labels, None)`` for public labels, ``(None, pcoll)`` for a side-input PCollection."""
    if isinstance(candidates, PCollection):
        if not side_input_ok:
            raise TypeError(
                "'candidates' as a PCollection is supported for count scores only "
                "(TopCandidates, Election with score='plurality')"
            )
        return None, candidates
    return static_labels(candidates), None


def selection_built(
    spec: SelectionSpec,
    *,
    options: CommonOptions,
    unit_column: str | None,
    encode: dict[str, Any],
    combine_fn: beam.CombineFn,
    bounds: ContributionBounds | None,
    labels: Labels | None,
    side: PCollection | None = None,
    epsilon_total: float,
) -> Built:
    """A selection over ``spec``: encode with the keys, bound, combine."""
    record_level = unit_column is None
    encode = options.encode_options(unit_column, encode)
    if side is not None:  # the encoder reads the candidates from the side input
        del encode["candidates"]
    wiring = options.wiring(
        combine_fn,
        record_level=record_level,
        encode=encode,
        bounds=bounds,
        encode_fn=None if side is None else EncodeWithSideCandidatesFn(encode, options.label_match),
        side_candidates=side,
    )
    display = describe(
        spec, labels=labels, bounds=bounds, keys=options.keys, epsilon_total=epsilon_total
    )
    return Built(
        wiring,
        release_name=spec.name,
        keys_per_unit=options.keys_per_unit(record_level),
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=options.shares(),
        spec=spec,
    )


def public_index(labels: tuple[Any, ...] | None, match: LabelMatch) -> PublicIndex | None:
    return None if labels is None else PublicIndex(labels, match)


# ---------------------------------------------------------------------------- top candidates


def _top_candidates(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"), k=own.get("k", 1))
    candidate_column = own["candidate_column"]
    candidates = own["candidates"]
    unit_column = own.get("unit_column")
    max_candidates_per_unit = own.get("max_candidates_per_unit")
    key_selection = own.get("key_selection")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    if isinstance(max_candidates_per_unit, str) and max_candidates_per_unit == "auto":
        # contribution_bounds, "Which bounds are worth choosing": the noise is the same at
        # every bound here, so a chosen one would only drop candidates and spend budget.
        raise ValueError(
            "'max_candidates_per_unit' takes no 'auto' in TopCandidates: the distinct-unit "
            "count has sensitivity 1 whatever a unit names, so a bound never lowers the "
            "noise; leave it None (no bound) or give an integer (with candidates=None, "
            "KeySelection(max_candidates_per_unit='auto') chooses the key selection's bound, "
            "which sets its threshold)"
        )
    if max_candidates_per_unit is not None:
        DistinctUnitCount(1, max_candidates_per_unit)  # validates the bound
    if candidates is None:
        if options.keys is not None:
            raise ValueError("TopCandidates.PerKey needs public 'candidates'")
        if key_selection is None:
            raise ValueError(
                "'candidates' is None: pass the public candidates, or key_selection="
                "KeySelection(epsilon=..., delta=..., max_candidates_per_unit=...) to select "
                "them privately from the data first"
            )
        return _top_after_key_selection(
            key_selection,
            candidate_column=candidate_column,
            unit_column=unit_column,
            options=options,
        )
    if key_selection is not None:
        raise ValueError(
            "'key_selection' applies only when the candidates are not public "
            "(candidates=None); public candidates need no key selection"
        )
    labels, side = resolve_candidates(candidates, side_input_ok=True)
    options.check_k(None if labels is None else len(labels))
    record_level = unit_column is None
    budget = options.budget("top_candidates")
    # The count's sensitivity is 1 whatever a unit names; no bound on the candidates per
    # unit is needed, and an absent bound is left out of the ledger.
    own_bounds: dict[str, int] = {}
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
        budget=options.per_release(budget, record_level),
        statistic="top_candidates",
        options=options,
        bounds=ledger_bounds(own_bounds, options, record_level),
    )
    return selection_built(
        spec,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(spec, labels),
        bounds=bounds,
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


def _top_after_key_selection(
    selection: KeySelection,
    *,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
) -> Built:
    """``TopCandidates.Globally(candidates=None, key_selection=...)``: DP key selection, then
    the top-k among the selected labels, on the same counts, in one pass."""
    if not isinstance(selection, KeySelection):
        raise TypeError("'key_selection' must be a KeySelection")
    if options.relation != "add_remove":
        raise ValueError(
            "DP key selection is defined for relation='add_remove': delta protects the "
            "presence of a unit, and of the labels only it holds"
        )
    budget = options.budget("top_candidates")
    ks_name = selection.resolve()[0]
    if budget.name == ks_name:
        raise ValueError(
            f"the key selection and the selection are both named {ks_name!r}; "
            "each release needs its own budget share name"
        )
    per_unit = 1 if unit_column is None else selection.held_per_unit()
    windows = options.windows_per_unit(unit_column is None)
    bounds = {
        "max_candidates_per_unit": per_unit,
        "distinct_candidates": 1,
        "max_windows_per_unit": windows,
        **options.unit_bounds(unit_column is None),
    }
    top = SelectionSpec.for_score(
        DistinctUnitCount(num_candidates=1),
        budget=divide_budget(budget, windows_per_unit=windows),
        statistic="top_candidates",
        options=options,
        bounds=bounds,
    )
    wiring, spec = key_selection_wiring(
        selection,
        candidate_column=candidate_column,
        unit_column=unit_column,
        options=options,
        top=top,
    )
    display = describe(
        top, labels=None, bounds=wiring.bounds, keys=None, epsilon_total=budget.epsilon
    )
    display.update(
        num_candidates="selected from the data",
        key_selection_epsilon=spec.epsilon,
        key_selection_delta=spec.delta,
        max_candidates_per_unit="auto" if selection.auto() else spec.max_candidates_per_unit,
    )
    return Built(
        wiring,
        release_name=budget.name,
        keys_per_unit=1,
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=(*options.shares(), *selection.shares()),
        # the selected labels always; the top-k among them only if some label was selected
        releases=((spec.name, False), (budget.name, True)),
    )


class TopCandidates:
    """Heavy hitters: the candidate(s) that most distinct privacy units contributed.

    A selection over public candidates by the exponential mechanism (McSherry and Talwar
    2007) or permute-and-flip (McKenna and Sheldon 2020).

    Score: ``q(r) = #{units that contributed r}`` (:class:`~beam_dp.scores.DistinctUnitCount`).
    A unit that names a candidate many times counts once (contribution bounding deduplicates
    ``(unit, candidate)``); ``max_candidates_per_unit`` optionally also bounds how many distinct
    candidates a unit keeps. ``k > 1`` releases a ranked top-k by peeling (``k`` selections at
    ``ε/k``; the value is the list of labels in the order chosen).

    Args (both variants):
        candidate_column: the field naming the candidate.
        candidates: public labels (a sequence, a file path, or a PCollection side input), or
            None with ``key_selection`` (``.Globally`` only).
        unit_column: the privacy-unit field (or ``record_level=True``, a shared option, for
            record-level privacy).
        k: how many candidates to release (a ``BudgetShare`` as ``epsilon`` must then be of
            mechanism ``method + "_top_k"`` with ``rounds=k``).
        max_candidates_per_unit: distinct candidates kept per unit (None: no bound).
        key_selection: a :class:`KeySelection` when ``candidates`` is None (``.Globally``).
        **options: those of every private transform
            (:class:`~beam_dp.beam._transform.PrivateOptions`; ``name`` defaults to
            ``"top_candidates"``), and for ``.PerKey`` the keys
            (:class:`~beam_dp.beam._transform.PerKeyOptions`).

    Privacy:
        Sensitivity 1 under both relations, whatever ``max_candidates_per_unit`` (each
        candidate's count moves by at most one); monotone under ``add_remove`` only. Releases
        the chosen label(s). With ``key_selection``, the labels are first selected privately
        from the data (an extra (ε, δ) release, recorded separately), then the top-k among
        them. Units, keys and windows: ``docs/privacy_rules.md``.
    """

    class Globally(PrivateTransform):
        """Top candidate(s) over the whole input, one release per window."""

        def __init__(self, **options: Unpack[TopCandidatesGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _top_candidates)

    class PerKey(PrivateTransform):
        """Top candidate(s) per public key (e.g. per country), one release per key."""

        def __init__(self, **options: Unpack[TopCandidatesPerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _top_candidates)


# -------------------------------------------------------------------------------- best price


def _best_price(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"))
    value_column = own["value_column"]
    unit_column = own.get("unit_column")
    prices = own.get("prices")
    per_unit = own.get("per_unit", "max")
    check_column(value_column, "value_column")
    check_column(unit_column, "unit_column", optional=True)
    if per_unit not in PER_UNIT_RULES:
        raise ValueError(f"'per_unit' must be one of {list(PER_UNIT_RULES)}; received {per_unit!r}")
    score = _revenue(prices)
    record_level = unit_column is None
    budget = options.budget("best_price")
    # The nearest float of each price is both the release label and the threshold: for
    # decimal prices, x >= price exactly when x >= threshold (see Revenue); the integer score
    # step is Revenue.unit. Labels stay an array: a 10^6-price grid pickles as one buffer.
    thresholds = score.thresholds
    scaled = score.scaled_prices
    # One value per unit comes from the per-unit rule, so no row bound is needed: the shuffle
    # only brings each unit's rows together (and bounds its keys for .PerKey).
    bounds = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=None, max_keys_per_unit=options.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score,
        budget=options.per_release(budget, record_level),
        statistic="best_price",
        options=options,
        bounds=ledger_bounds(score.contribution_bounds, options, record_level),
    )
    rule = None if record_level else per_unit
    built = selection_built(
        spec,
        options=options,
        unit_column=unit_column,
        encode={"value_column": value_column},
        combine_fn=RevenueFn(spec, thresholds, thresholds, scaled, rule),
        bounds=bounds,
        labels=thresholds,
        epsilon_total=budget.epsilon,
    )
    built.display["per_unit"] = "record" if rule is None else rule
    return built


def _revenue(prices: Sequence[Any] | Revenue | None) -> Revenue:
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


class BestPrice:
    """The posted price that maximises revenue (pricing a digital good: McSherry and Talwar 2007).

    Each privacy unit has one willingness to pay ``x_u``. A unit with several records is
    reduced to one value by ``per_unit``: ``"max"`` (default: the most the unit said it would
    pay, so it buys at every price up to it), ``"min"`` (the most cautious reading) or
    ``"mean"``. Candidates are a public price grid (default $0.01, ..., $1.99); the score is the
    revenue ``q(p) = p · #{units with x_u >= p}`` (:class:`~beam_dp.scores.Revenue`), with
    values compared to prices as exact decimals (``+inf`` buys at every price). The release
    value is the chosen price as a float.

    Args (both variants):
        value_column: the willingness-to-pay field (numeric; NaN and null are bad records).
        unit_column: the privacy-unit field; or ``record_level=True`` (each record is
            one buyer).
        prices: the public grid: exact decimals, strictly increasing (default 0.01 ... 1.99),
            or a :class:`~beam_dp.scores.Revenue` already built from it (a large grid is then
            read once for several transforms).
        per_unit: ``"max"`` (default), ``"min"`` or ``"mean"``.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``"best_price"``).

    Privacy:
        Sensitivity ``max(prices)`` under both relations, monotone under both (one value per
        unit: every count moves the same way). Releases one price.
    """

    class Globally(PrivateTransform):
        """The best price over the whole input, one release per window."""

        def __init__(self, **options: Unpack[BestPriceGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _best_price)

    class PerKey(PrivateTransform):
        """The best price per public key (e.g. per country), one release per key."""

        def __init__(self, **options: Unpack[BestPricePerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _best_price)


# ---------------------------------------------------------------------------------- election


def _election(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"))
    candidate_column = own["candidate_column"]
    candidates = own["candidates"]
    unit_column = own.get("unit_column")
    score = own.get("score", "plurality")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    if score not in ("plurality", "margin"):
        raise ValueError(f"'score' must be 'plurality' or 'margin'; received {score!r}")
    labels, side = resolve_candidates(candidates, side_input_ok=score == "plurality")
    score_object: Score
    if score == "margin":
        if labels is None or len(labels) != 2:
            raise ValueError(
                "score='margin' is the two-way margin: it needs exactly 2 candidates; "
                f"received {0 if labels is None else len(labels)}"
            )
        score_object = VoteMargin()
    else:
        score_object = PluralityVote(num_candidates=len(labels) if labels else 1)
    record_level = unit_column is None
    budget = options.budget("election")
    # One vote per unit: a unit with several vote records keeps one (a per-unit rule).
    bounds = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=1, max_keys_per_unit=options.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score_object,
        budget=options.per_release(budget, record_level),
        statistic="election",
        options=options,
        bounds=ledger_bounds(score_object.contribution_bounds, options, record_level),
    )
    return selection_built(
        spec,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(spec, labels, "margin" if score == "margin" else "counts"),
        bounds=bounds,
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


class Election:
    """An election among public candidates: one vote per privacy unit.

    ``score="plurality"`` (default): ``q(r) = #votes for r``
    (:class:`~beam_dp.scores.PluralityVote`). ``score="margin"``: two candidates,
    ``q(r) = #r - #other`` (:class:`~beam_dp.scores.VoteMargin`); with ``relation="replace"``
    (a switched vote) its sensitivity is 2, and ``method="exponential"`` reproduces the seed
    (P(Melon-pan) = 0.525 at ε = 0.1 for 3 votes to 1). A unit with several vote records keeps
    one of them, chosen pseudo-randomly per pipeline run by contribution bounding.

    Args (both variants):
        candidate_column: the field holding the vote.
        candidates: the public candidates (a sequence, a file path, or a PCollection side
            input for plurality).
        unit_column: the voter field; None when each record is one voter's only vote.
        score: ``"plurality"`` (default) or ``"margin"``.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``"election"``).

    Privacy:
        Plurality: sensitivity 1, monotone under ``add_remove`` only. Margin: sensitivity 1
        (``add_remove``) or 2 (``replace``), never monotone. Releases the winner's label.
    """

    class Globally(PrivateTransform):
        """The winner over the whole input, one release per window."""

        def __init__(self, **options: Unpack[ElectionGloballyOptions]) -> None:
            super().__init__()
            self._build(options, _election)

    class PerKey(PrivateTransform):
        """One winner per public key (e.g. per village), one release per key."""

        def __init__(self, **options: Unpack[ElectionPerKeyOptions]) -> None:
            super().__init__()
            self._build(options, _election)


# ---------------------------------------------------------------------------- a user's score


def _custom(
    score_fn: beam.CombineFn,
    variant: PrivateTransform,
    own: Mapping[str, Any],
    shared: Mapping[str, Any],
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"), k=own.get("k", 1))
    candidates = own["candidates"]
    sensitivity = own["sensitivity"]
    monotone = own["monotone"]
    unit_column = own.get("unit_column")
    candidate_column = own.get("candidate_column")
    value_column = own.get("value_column")
    bounds = own.get("bounds")
    statistic = own.get("statistic", "custom")
    if not isinstance(score_fn, beam.CombineFn):
        raise TypeError(
            f"'score_fn' must be a beam.CombineFn; received type {type(score_fn).__name__}"
        )
    check_positive_finite(sensitivity, "sensitivity")
    if not isinstance(monotone, bool):
        raise TypeError(f"'monotone' must be a bool; received type {type(monotone).__name__}")
    requested = ContributionBounds() if bounds is None else bounds
    if not isinstance(requested, ContributionBounds):
        raise TypeError("'bounds' must be a beam_dp.batching.ContributionBounds")
    if not isinstance(statistic, str) or not statistic:
        raise ValueError(f"'statistic' must be a non-empty string; received {statistic!r}")
    for column, name in (
        (unit_column, "unit_column"),
        (candidate_column, "candidate_column"),
        (value_column, "value_column"),
    ):
        check_column(column, name, optional=True)
    labels = static_labels(candidates)
    options.check_k(len(labels))
    record_level = unit_column is None
    budget = options.budget(statistic)
    one_key = options.per_release(budget, record_level)
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
        epsilon=one_key.epsilon,
        rho=one_key.rho,
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
    built = selection_built(
        spec,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": None
            if candidate_column is None
            else public_index(labels, options.label_match),
            "value_column": value_column,
        },
        combine_fn=CustomScoreFn(spec, labels, score_fn),
        bounds=enforced,
        labels=labels,
        epsilon_total=budget.epsilon,
    )
    built.display["score_fn"] = type(score_fn).__name__
    return built


class ExponentialSelect:
    """Private selection with a user's score: a ``CombineFn`` plus its declared sensitivity.

    ``score_fn`` is a ``beam.CombineFn`` whose inputs are encoded column batches (dicts of
    numpy arrays): ``"unit"`` (the stable unit hash; absent with record-level privacy),
    ``"candidate"`` (the position in ``candidates``, if ``candidate_column`` is given),
    ``"value"`` (float64, if ``value_column`` is given) and ``"key"``. Every batch holds *all*
    the bounded rows of each unit in it, so per-unit logic can run inside ``add_input``. Its
    ``extract_output`` returns one score per candidate (ints, floats or Fractions; higher is
    better). The library enforces ``bounds`` and runs the same exact selection and release as
    the built-in scores.

    Args (both variants):
        score_fn: the score ``CombineFn``.
        candidates: the public labels (a sequence or a file path).
        sensitivity: the declared sensitivity in the score's units (> 0, finite).
        monotone: the declared monotonicity under ``relation``.
        unit_column: the privacy-unit field (or ``record_level=True`` for record-level
            privacy).
        candidate_column, value_column: fields encoded for ``score_fn``.
        bounds: the contribution bounds to enforce (default: one row per unit; its
            ``max_keys_per_unit`` is replaced by the ``.PerKey`` argument).
        statistic: the ledger's statistic name (default ``"custom"``).
        k: how many candidates to release, as in :class:`TopCandidates`.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``statistic``).

    Privacy:
        The caller declares ``sensitivity`` (the largest change of any candidate's score
        between neighbours under ``relation``, given ``bounds``) and ``monotone``; the
        guarantee is only as good as that declaration. Releases the chosen label(s).
    """

    class Globally(PrivateTransform):
        """Select over the whole input, one release per window."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectGloballyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))

    class PerKey(PrivateTransform):
        """One selection per public key, one release per key."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectPerKeyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))
