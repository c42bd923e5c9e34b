"""DP key selection on Beam: release the labels that enough privacy units hold.

When the candidates are not public (websites in the wild), labels read from the data are
released only if their distinct-unit count plus exact discrete Laplace noise clears a
threshold (:mod:`beam_dp.mechanisms.partition_selection`), as PipelineDP's
``select_partitions``. It needs ``delta > 0`` and a bound on the distinct labels per unit,
which the pipeline enforces (or chooses privately: ``max_candidates_per_unit="auto"``, the
``"auto"`` bound of :mod:`beam_dp.beam._grid`).

* :class:`SelectCandidates` releases the selected set alone;
* ``TopCandidates.Globally(candidates=None, key_selection=KeySelection(...))``
  (:mod:`beam_dp.beam.selection`) selects the set and then the top-k among it, on the same
  counts, in one pass: :class:`KeySelectionFn` takes that selection as ``top``.

Read top to bottom: the options, :class:`KeySelection` (the public parameters) and
:class:`KeySelectionSpec` (one window's release), the encoding of labels read from the data,
the combiner, the wiring and the transform. Units, windows and the budget division:
``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, Protocol, Required, TypedDict, Unpack

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import PCollection

from beam_dp._validation import check_positive_int
from beam_dp.accounting import BudgetShare, LedgerEntry
from beam_dp.accounting.zcdp import floor_float
from beam_dp.batching import (
    CANDIDATE,
    ColumnBatch,
    ContributionBounds,
    canonical_id_text,
    encode_batch,
    num_rows,
    stable_hash64,
)
from beam_dp.batching.columns import EncodeStats, OnBadRecord, as_table, with_source
from beam_dp.batching.hashing import UnitIds
from beam_dp.beam._contributions import is_heartbeat
from beam_dp.beam._grid import AutoBound, AutoBoundSpec, check_auto_bound, expand_auto_bound
from beam_dp.beam._transform import (
    Built,
    CommonOptions,
    EpsilonLike,
    PrivateTransform,
    ResolvedBudget,
    check_column,
    divide_budget,
    take_options,
)
from beam_dp.errors import BadRecordError, data_error
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.partition_selection import (
    DEFAULT_MAX_LABELS,
    check_key_selection,
    key_selection_threshold,
    select_keys,
    sure_release_count,
)
from beam_dp.mechanisms.randomness import as_random_source
from beam_dp.release import Release
from beam_dp.summaries.contribution_bounds import DEFAULT_CAP, split_epsilon
from beam_dp.summaries.counts import LabelCounts

if TYPE_CHECKING:
    from beam_dp.beam._graph import Wiring

__all__ = [
    "LABEL",
    "MIXED_LABELS_RULE",
    "EncodeLabelsFn",
    "KeySelection",
    "KeySelectionFn",
    "KeySelectionSpec",
    "LabelSummary",
    "SelectCandidates",
    "canonical_label_text",
    "key_selection_wiring",
]


# ------------------------------------------------------------------------------- options


# SelectCandidates' keywords (functional form: its Required[...] stays visible at run time).
# Not PrivateOptions: key selection has no method and is defined under add/remove only.
SelectCandidatesOptions = TypedDict(  # noqa: UP013 (Required read at run time)
    "SelectCandidatesOptions",
    {
        "candidate_column": Required[str],
        "unit_column": str | None,
        "epsilon": Required[EpsilonLike],
        "delta": float | None,
        "max_candidates_per_unit": int | Literal["auto"],
        "name": str | None,
        "bound_share": float | Fraction | None,
        "bound_cap": int | None,
        "bound_alpha": float | Fraction | None,
        "max_labels": int,
        "confidence": float,
        "num_shards": int,
        "salt": int | None,
        "on_bad_record": str,
        "rng": RandomSource | None,
        "max_windows_per_unit": int,
        "record_level": bool,
        "unit_ids": UnitIds,
    },
    total=False,
)


@dataclass(frozen=True)
class KeySelection:
    """DP key selection for candidates that are not public (``TopCandidates(candidates=None)``).

    Args:
        epsilon: ε of the key selection: a float, or a ``BudgetShare`` of mechanism
            ``"partition_selection"`` (which also gives ``delta``).
        delta: > 0, required: without it no label read from the data can be released
            privately (the error explains why).
        max_candidates_per_unit: distinct labels kept per unit (enforced by bounding; 1 when
            every record is its own unit), or ``"auto"``: chosen privately per window. Each
            unit's distinct labels are first held to ``bound_cap`` (default 1024); one count
            per unit (its distinct labels) goes into a histogram, and ``bound_share`` (default
            1/10) of the window's ε chooses the bound among the powers of two up to the cap
            (the exact selection of ``max_contributions="auto"``, quantile ``bound_alpha``,
            default 0.9); every unit keeps a uniform sample of that many labels, and the key
            selection runs at the rest of ε with the window's δ, its threshold at the chosen
            bound. The record holds the chosen bound, the cap (``max_candidates_cap``) and the
            two parts of ε (``epsilon_bound_choice``, ``epsilon_statistic``).
        name: release name (default ``"candidate_selection"``; a share's name otherwise).
        bound_share, bound_cap, bound_alpha: the choice's parameters (only with ``"auto"``).
        max_labels: the public number of labels whose noise is always drawn (default 65 536):
            the selection's work is padded to it, so that its running time does not follow
            the private number of distinct labels; past it the work grows by whole blocks
            of this size (:func:`~beam_dp.mechanisms.partition_selection.select_keys`,
            ``docs/timing.md``). It changes no release: set it above the labels expected.

    Privacy:
        (epsilon, delta)-DP under add/remove. Composed with the selection that follows by basic
        composition: the two releases together cost (key selection ε + selection ε, delta).
        On windowed input with ``max_windows_per_unit = w`` (an argument of the transform),
        each window's key selection runs at ``(epsilon / w, delta / w)`` (basic composition
        over the ``w`` windows a unit reaches).
    """

    epsilon: EpsilonLike
    delta: float | None = None
    max_candidates_per_unit: int | Literal["auto"] = 1
    name: str | None = None
    bound_share: float | Fraction | None = None
    bound_cap: int | None = None
    bound_alpha: float | Fraction | None = None
    max_labels: int = DEFAULT_MAX_LABELS

    def __post_init__(self) -> None:
        self.resolve()
        self.auto()
        check_positive_int(self.max_labels, "max_labels")

    def auto(self) -> AutoBound | None:
        """The validated ``max_candidates_per_unit="auto"`` parameters, or None.

        Raises:
            ValueError: for a ``bound_*`` option without ``"auto"`` (it would do nothing).
        """
        own = {
            key: value
            for key, value in (
                ("bound_share", self.bound_share),
                ("bound_cap", self.bound_cap),
                ("bound_alpha", self.bound_alpha),
            )
            if value is not None
        }
        chosen = self.max_candidates_per_unit
        if not (isinstance(chosen, str) and chosen == "auto"):
            if own:
                raise ValueError(
                    f"{next(iter(own))!r} applies only with max_candidates_per_unit='auto'; "
                    f"received max_candidates_per_unit={chosen!r}"
                )
            return None
        return check_auto_bound("auto", own)

    def shares(self) -> tuple[BudgetShare, ...]:
        """The budget share this key selection spends, if ``epsilon`` is one."""
        return (self.epsilon,) if isinstance(self.epsilon, BudgetShare) else ()

    def held_per_unit(self) -> int:
        """The bound the data is first held to: the given one, or the cap with ``"auto"``."""
        auto = self.auto()
        if auto is not None:
            return auto.candidates[-1]
        return self.max_candidates_per_unit  # type: ignore[return-value]

    def resolve(self) -> tuple[str, float, float]:
        """``(name, epsilon, delta)``, validated."""
        chosen = self.max_candidates_per_unit
        if isinstance(chosen, str) and chosen != "auto":
            raise ValueError(
                f"'max_candidates_per_unit' must be an integer >= 1 or 'auto'; received {chosen!r}"
            )
        per_unit = DEFAULT_CAP if isinstance(chosen, str) else chosen
        if not isinstance(chosen, str):
            check_positive_int(chosen, "max_candidates_per_unit")
        if isinstance(self.epsilon, BudgetShare):
            share = self.epsilon
            if not share.allocated:
                raise ValueError(
                    f"budget share {share.name!r} has no epsilon yet: call "
                    "PrivacyBudget.finalize() before building the transform"
                )
            if share.mechanism != "partition_selection":
                raise ValueError(
                    f"budget share {share.name!r} is for mechanism {share.mechanism!r}; key "
                    "selection needs a share of mechanism 'partition_selection'"
                )
            if self.delta is not None and float(self.delta) != share.delta:
                raise ValueError("'delta' differs from the budget share's delta; leave it unset")
            check_key_selection(share.epsilon, share.delta, per_unit)
            return share.name, float(share.epsilon), float(share.delta)
        check_key_selection(self.epsilon, self.delta, per_unit)
        name = "candidate_selection" if self.name is None else self.name
        if not isinstance(name, str) or not name:
            raise ValueError(f"'name' must be a non-empty string; received {name!r}")
        return name, float(self.epsilon), float(self.delta)  # type: ignore[arg-type]

    def spec(
        self,
        *,
        record_level: bool,
        confidence: float,
        rng: RandomSource | None,
        windows_per_unit: int = 1,
    ) -> KeySelectionSpec:
        """The parameters of one window's key selection (ε and δ divided over the windows).

        With ``max_candidates_per_unit="auto"``, ``bound_share`` of the window's ε chooses the
        bound (pure ε-DP) and the key selection runs at the rest with the window's δ: the two
        compose to the window's (ε, δ).
        """
        name, epsilon, delta = self.resolve()
        # (ε, δ)-DP releases compose by basic composition over the windows a unit reaches.
        whole = ResolvedBudget(name, epsilon, None, "partition_selection", delta=delta)
        one = divide_budget(whole, windows_per_unit=windows_per_unit)
        assert one.delta is not None
        auto = self.auto()
        if auto is None:
            return KeySelectionSpec(
                name=name,
                epsilon=one.epsilon,
                delta=one.delta,
                max_candidates_per_unit=1 if record_level else self.held_per_unit(),
                confidence=confidence,
                rng=rng,
                max_windows_per_unit=windows_per_unit,
                max_labels=self.max_labels,
            )
        if record_level:
            raise ValueError(
                "max_candidates_per_unit='auto' needs a 'unit_column': with unit_column=None "
                "(record-level privacy) every record is its own unit and holds one label"
            )
        choice, rest = split_epsilon(Fraction(one.epsilon), auto.share)
        return KeySelectionSpec(
            name=name,
            epsilon=floor_float(rest),
            delta=one.delta,
            max_candidates_per_unit=auto.candidates[-1],
            confidence=confidence,
            rng=rng,
            max_windows_per_unit=windows_per_unit,
            window_epsilon=one.epsilon,
            choice_epsilon=floor_float(choice),
            cap=auto.candidates[-1],
            max_labels=self.max_labels,
        )

    def choice(self, spec: KeySelectionSpec) -> AutoBoundSpec | None:
        """The public half of the bound choice at ``spec`` (one window), or None."""
        auto = self.auto()
        if auto is None:
            return None
        assert spec.choice_epsilon is not None and spec.window_epsilon is not None
        return AutoBoundSpec(
            candidates=auto.candidates,
            cap=auto.candidates[-1],
            rule=auto.rule,
            alpha=auto.alpha,
            choice_epsilon=Fraction(spec.choice_epsilon),
            key_epsilon=Fraction(spec.window_epsilon),
            bound_epsilon=Fraction(spec.choice_epsilon),
            statistic_epsilon=Fraction(spec.epsilon),
            counts_per_unit=1,  # one count per unit: its distinct labels
            method="permute_and_flip",
            relation="add_remove",
            plans={},
            target="candidates",
        )


@dataclasses.dataclass(frozen=True)
class KeySelectionSpec:
    """Parameters of DP key selection (thresholding of noisy distinct-unit counts)."""

    name: str
    epsilon: float
    delta: float
    max_candidates_per_unit: int
    confidence: float = 0.95
    rng: RandomSource | None = None
    max_windows_per_unit: int = 1
    #: With ``max_candidates_per_unit="auto"``: the window's whole epsilon (what the release
    #: is charged), the part that chose the bound, and the public cap; ``epsilon`` is then the
    #: selection's part and ``max_candidates_per_unit`` the chosen bound (:meth:`at_bound`).
    window_epsilon: float | None = None
    choice_epsilon: float | None = None
    cap: int | None = None
    #: The public number of labels the selection's work is padded to (:class:`KeySelection`).
    max_labels: int = DEFAULT_MAX_LABELS

    def at_bound(self, bound: int) -> KeySelectionSpec:
        """This spec at a privately chosen ``max_candidates_per_unit``."""
        return dataclasses.replace(self, max_candidates_per_unit=int(bound))

    def release(self, labels: list[Any]) -> Release:
        """The release of the selected label set (its ledger and accuracy)."""
        threshold = key_selection_threshold(self.epsilon, self.delta, self.max_candidates_per_unit)
        bounds = {
            "max_candidates_per_unit": self.max_candidates_per_unit,
            "distinct_candidates": 1,
            "max_windows_per_unit": self.max_windows_per_unit,
        }
        extra: dict[str, float] = {}
        epsilon = self.epsilon
        if self.window_epsilon is not None:
            assert self.choice_epsilon is not None and self.cap is not None
            bounds["max_candidates_cap"] = self.cap
            extra = {"epsilon_bound_choice": self.choice_epsilon, "epsilon_statistic": epsilon}
            epsilon = self.window_epsilon
        entry = LedgerEntry(
            name=self.name,
            statistic="candidate_selection",
            mechanism="partition_selection",
            epsilon=epsilon,
            delta=self.delta,
            sensitivity=1.0,
            neighbouring="add_remove",
            monotone=True,
            # The universe of labels is not public; the released set is, so its size is
            # recorded (at least 1, as the ledger requires).
            num_candidates=max(1, len(labels)),
            contribution_bounds=bounds,
            accuracy={
                **extra,
                "confidence": self.confidence,
                "release_threshold": float(threshold),
                "count_released_with_confidence": float(
                    sure_release_count(
                        self.epsilon,
                        self.delta,
                        self.max_candidates_per_unit,
                        self.confidence,
                    )
                ),
            },
        )
        return Release(value=labels, ledger=entry, rng_secure=as_random_source(self.rng).secure)


# ----------------------------------------------------------------- labels read from the data


#: Column of raw candidate labels (an object array) used by DP key selection.
LABEL = "label"


#: The rule broken when one candidate column holds labels of two kinds that cannot merge.
MIXED_LABELS_RULE = "rule: candidate labels must be integers or text, in every file and batch"


_INTEGER = "integer"


_TEXT = "string"


def _label_kind(labels: pa.Array) -> str:
    """``"integer"``, ``"string"`` or the Arrow type's name."""
    if pa.types.is_integer(labels.type):
        return _INTEGER
    if pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type):
        return _TEXT
    return str(labels.type)


def _mixed_labels(field: str) -> BadRecordError:
    # Built from the field and the rule only: Arrow's own message quotes a label.
    return data_error("input", MIXED_LABELS_RULE, field=field)


def canonical_label_text(column: pa.Array) -> pa.Array:
    """Labels read from the data as their canonical text; null where a label is not valid.

    Key selection counts labels by the identity privacy units have
    (:mod:`beam_dp.batching.hashing`): an integer and its decimal text are one label (``7``
    and ``"7"``), so labels are released as text. The rule looks at each value alone, so the
    labels never depend on how rows were split into batches or files, or on merge order.
    """
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type):
        return column
    if pa.types.is_large_string(column.type):
        return column.cast(pa.string())
    if pa.types.is_integer(column.type):
        return column.cast(pa.string())
    return pa.array([canonical_id_text(value) for value in column.to_pylist()], type=pa.string())


def _encode_labels(
    batch: Any,
    *,
    unit_column: str | None,
    unit_ids: UnitIds,
    candidate_column: str,
    on_bad_record: OnBadRecord,
    source: str,
    stats: EncodeStats,
) -> ColumnBatch:
    """Encode for key selection: unit hash, label hash (for bounding) and the raw labels.

    A null unit or label is a bad record (``on_bad_record``); messages name the field and the
    rule, never a value.
    """
    fields = [candidate_column] if unit_column is None else [unit_column, candidate_column]
    try:
        table = as_table(batch, columns=fields)  # records: these fields only
    except pa.ArrowException:  # Arrow's message quotes the value it could not convert
        raise data_error(
            source, "rule: each field must hold values of one type (e.g. all strings)"
        ) from None
    stats.rows_read += table.num_rows
    bad = np.zeros(table.num_rows, dtype=bool)
    for name in fields:
        if name not in table.schema.names:
            raise data_error(source, "rule: the field is required", field=name)
        nulls = table.column(name).null_count
        if nulls and on_bad_record == "fail":
            raise data_error(
                source,
                "rule: the field must not be null; use on_bad_record='skip' to drop such records",
                field=name,
            )
        if nulls:
            bad |= table.column(name).is_null().to_numpy(zero_copy_only=False)
    if bad.any():
        stats.bad_records += int(bad.sum())
        table = table.filter(pa.array(~bad))
    column = table.column(candidate_column)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    labels = canonical_label_text(column)
    bad = np.asarray(labels.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if bad.any():
        if on_bad_record == "fail":
            raise data_error(
                source,
                "rule: candidate labels must be integers or text (a whole number, or valid "
                "UTF-8); use on_bad_record='skip' to drop such records",
                field=candidate_column,
            )
        stats.bad_records += int(bad.sum())
        keep = pa.array(~bad)
        table, labels = table.filter(keep), labels.filter(keep)
    out = encode_batch(table, unit_column=unit_column, unit_ids=unit_ids, source=source)
    # Bounding (distinct labels per unit) and the counts use one identity: the label's text
    # as it is (the release shows it, so labels that differ are never merged into one).
    out[CANDIDATE] = stable_hash64(labels, "exact").view(np.int64)
    out[LABEL] = labels.to_numpy(zero_copy_only=False)
    return out


class EncodeLabelsFn(beam.DoFn):
    """Reader output to column batches for DP key selection (labels are not public)."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__()
        self._options = options

    def process(self, element: Any) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        encoded = _encode_labels(batch, stats=EncodeStats(), **options)
        if num_rows(encoded):
            yield encoded


# ------------------------------------------------------------------------------ the combiner


@dataclasses.dataclass
class LabelSummary:
    """Key selection's accumulator: the label counts and the one kind of label they hold.

    A candidate column that holds integers in some batches and text in others is read as
    text throughout (an integer as its decimal text, so ``7`` and ``"7"`` are one label), as
    :func:`beam_dp.batching.columns.as_table` reads a field that mixes types within one
    batch: the labels never depend on how the rows were split into batches or on the order
    in which batches merge. Other mixtures are refused (:data:`MIXED_LABELS_RULE`).
    """

    counts: LabelCounts = dataclasses.field(default_factory=LabelCounts)
    kind: str | None = None

    def as_text(self) -> None:
        """Turn integer labels into their decimal text (in place)."""
        if self.kind != _INTEGER:
            return
        labels, counts = self.counts.labels, self.counts.counts
        self.counts = LabelCounts()
        if len(labels):
            self.counts.add(labels.cast(pa.string()), counts)
        self.kind = _TEXT

    def to_dict(self) -> dict[Any, int]:
        """``{label: count}`` (for tests and small summaries)."""
        return self.counts.to_dict()


def _agree(first: LabelSummary, kind: str | None, field: str) -> str | None:
    """Bring ``first`` to the kind both sides share; return it (None: nothing yet)."""
    if kind is None or first.kind == kind:
        return first.kind
    if first.kind is None:
        first.kind = kind
        return kind
    if {first.kind, kind} == {_INTEGER, _TEXT}:
        first.as_text()
        return _TEXT
    raise _mixed_labels(field)


class TopSelection(Protocol):
    """The selection among the selected labels: ``TopCandidates``'
    :class:`~beam_dp.summaries.selection.SelectionSpec`."""

    def release(self, scores: Any, labels: Any) -> Release: ...


class KeySelectionFn(beam.CombineFn):
    """Distinct-unit counts per label read from the data, then DP key selection.

    The accumulator is a :class:`LabelSummary` around a
    :class:`~beam_dp.summaries.counts.LabelCounts`. ``extract_output`` keeps the labels whose
    noisy count clears the threshold and returns a list of releases: the selected set and,
    when ``top`` is given, the top-k selection among the selected labels (on the same counts;
    the selected set is public by then).

    Args:
        spec: the key selection's parameters.
        top: the selection among the selected labels, or None.
        field: the candidate column (named in errors).

    Raises:
        BadRecordError: when labels of kinds that cannot merge meet (the message names the
            field and the rule, never a label). Integers and text merge as text.
    """

    def __init__(
        self, spec: KeySelectionSpec, top: TopSelection | None, field: str = "candidate"
    ) -> None:
        super().__init__()
        self._spec = spec
        self._top = top
        self._field = field

    def create_accumulator(self) -> LabelSummary:
        return LabelSummary()

    def add_input(self, accumulator: LabelSummary, batch: ColumnBatch) -> LabelSummary:
        if not num_rows(batch):
            return accumulator
        try:
            labels = pa.array(batch[LABEL])
            kind = _label_kind(labels)
            if _agree(accumulator, kind, self._field) != kind:
                labels = labels.cast(pa.string())  # integers meet text: decimal text
            accumulator.counts.add(labels)
        except pa.ArrowException:
            raise _mixed_labels(self._field) from None
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[LabelSummary]) -> LabelSummary:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            try:
                if _agree(first, other.kind, self._field) != other.kind:
                    other = LabelSummary(LabelCounts().merge([other.counts]), other.kind)
                    other.as_text()  # a copy: the other accumulators are not modified
                first.counts.merge([other.counts])
            except pa.ArrowException:
                raise _mixed_labels(self._field) from None
        return first

    def compact(self, accumulator: LabelSummary) -> LabelSummary:
        accumulator.counts.compact()
        return accumulator

    def extract_output(self, accumulator: LabelSummary) -> list[Release]:
        return self.releases(accumulator, self._spec)

    def releases(self, accumulator: LabelSummary, spec: KeySelectionSpec) -> list[Release]:
        """The selected set at ``spec`` and, with ``top``, the top-k among it."""
        labels = accumulator.counts.labels.to_pylist()
        counts = accumulator.counts.counts
        keep = select_keys(
            counts,
            epsilon=spec.epsilon,
            delta=spec.delta,
            max_keys_per_unit=spec.max_candidates_per_unit,
            max_labels=spec.max_labels,
            rng=spec.rng,
        )
        order = sorted(np.flatnonzero(keep).tolist(), key=lambda i: labels[i])
        selected = [labels[i] for i in order]
        releases = [spec.release(selected)]
        if self._top is not None and selected:
            releases.append(self._top.release(counts[order], selected))
        return releases

    @property
    def spec(self) -> KeySelectionSpec:
        return self._spec

    def display_data(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "name": self._spec.name,
            "epsilon": self._spec.epsilon,
            "delta": self._spec.delta,
            "max_candidates_per_unit": self._spec.max_candidates_per_unit,
            "max_windows_per_unit": self._spec.max_windows_per_unit,
        }
        return shown


class AutoKeySelectionFn(KeySelectionFn):
    """:class:`KeySelectionFn` whose output is the merged counts, released at the chosen bound.

    With ``max_candidates_per_unit="auto"`` the threshold needs the privately chosen bound, a
    singleton side input per window; as for the quantiles, a ``Map`` with the side input
    releases (:func:`release_selection_at_choice`), not the combine.
    """

    def extract_output(self, accumulator: LabelSummary) -> LabelSummary:  # type: ignore[override]
        return self.compact(accumulator)

    @property
    def rng(self) -> RandomSource | None:
        """The random source of the bound choice (that of the key selection)."""
        return self.spec.rng


def release_selection_at_choice(
    element: tuple[Any, LabelSummary], choice: Any, fn: AutoKeySelectionFn
) -> tuple[Any, list[Release]]:
    """``(key, merged counts)`` to ``(key, releases)`` at the chosen bound."""
    key, accumulator = element
    return key, fn.releases(accumulator, fn.spec.at_bound(choice.bound))


# -------------------------------------------------------------------------------- the wiring


def key_selection_wiring(
    selection: KeySelection,
    *,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
    top: TopSelection | None,
) -> tuple[Wiring, KeySelectionSpec]:
    """The wiring of a key selection, followed by the top-k selection ``top`` if given, and
    the parameters of one window's key selection."""
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    record_level = unit_column is None
    windows = options.windows_per_unit(record_level)
    spec = selection.spec(
        record_level=record_level,
        confidence=options.confidence,
        rng=options.rng,
        windows_per_unit=windows,
    )
    bounds = (
        None
        if unit_column is None
        else ContributionBounds(
            max_contributions_per_unit=spec.max_candidates_per_unit, distinct_candidates=True
        )
    )
    auto = selection.choice(spec)
    fn = KeySelectionFn(spec, top, candidate_column)
    graph = None
    if auto is not None:
        fn = AutoKeySelectionFn(spec, top, candidate_column)
        graph = functools.partial(_expand_auto_candidates, auto=auto, fn=fn)
    encode_fn = EncodeLabelsFn(
        {
            "unit_column": unit_column,
            "unit_ids": options.unit_ids,
            "candidate_column": candidate_column,
            "on_bad_record": options.on_bad_record,
            "source": "input",
        }
    )
    wiring = options.wiring(
        fn,
        record_level=record_level,
        encode=None,
        bounds=bounds,
        encode_fn=encode_fn,
        graph=graph,
    )
    return wiring, spec


def _expand_auto_candidates(
    pcoll: PCollection, wiring: Wiring, *, auto: AutoBoundSpec, fn: AutoKeySelectionFn
) -> PCollection:
    """``max_candidates_per_unit="auto"``: the graph of ``max_contributions="auto"``.

    After bounding (one row per distinct (unit, label), at most the cap per unit) a unit's
    rows are its distinct labels: their histogram per unit (one count per unit) feeds one
    exact choice per window, every unit keeps a uniform sample of the chosen number of its
    labels, and the key selection (and the top-k after it) runs at that bound.
    """
    return expand_auto_bound(pcoll, wiring, fn, auto, fn, release=release_selection_at_choice)


# ----------------------------------------------------------------------------- the transform


class SelectCandidates:
    """DP key selection alone: release the sorted list of labels enough privacy units hold.

    Privacy:
        (ε, δ)-DP under add/remove (:mod:`beam_dp.mechanisms.partition_selection`). The value
        is the sorted list of selected labels; using it as public candidates of another
        transform (e.g. as a PCollection side input) is post-processing.
    """

    class Globally(PrivateTransform):
        """Select labels over the whole (windowed) input; one release per window.

        Args:
            candidate_column: the field holding the labels.
            unit_column: the privacy-unit field (or ``record_level=True``: each record is its
                own unit and holds one label).
            epsilon: a float, or a ``BudgetShare`` of mechanism ``"partition_selection"``.
            delta: > 0 (required); taken from the share when one is given.
            max_candidates_per_unit, bound_share, bound_cap, bound_alpha, max_labels: as in
                :class:`KeySelection`.
            name: release name (default ``"candidate_selection"``).
            **options: the other options of every transform
                (:class:`~beam_dp.beam._transform.PrivateOptions` but ``method`` and
                ``relation``: key selection is defined under add/remove only); each window's
                selection runs at ``(ε / w, δ / w)`` with ``max_windows_per_unit = w``.
        """

        NAMESPACE = "SelectCandidates"
        VARIANT = "Globally"
        HAS_PER_KEY = False

        def __init__(self, **options: Unpack[SelectCandidatesOptions]) -> None:
            super().__init__()
            self._build(options, _select_candidates)


def _select_candidates(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    """``SelectCandidates.Globally`` from its keywords (:meth:`PrivateTransform._build`)."""
    unit_column = own.get("unit_column")
    options = take_options(variant, shared, unit_column=unit_column)
    selection = KeySelection(
        options.epsilon,
        own.get("delta"),
        own.get("max_candidates_per_unit", 1),
        options.name,
        bound_share=own.get("bound_share"),
        bound_cap=own.get("bound_cap"),
        bound_alpha=own.get("bound_alpha"),
        max_labels=own.get("max_labels", DEFAULT_MAX_LABELS),
    )
    wiring, spec = key_selection_wiring(
        selection,
        candidate_column=own["candidate_column"],
        unit_column=unit_column,
        options=options,
        top=None,
    )
    return Built(
        wiring,
        release_name=spec.name,
        keys_per_unit=1,
        display={
            "name": spec.name,
            "mechanism": "partition_selection",
            "epsilon": spec.epsilon,
            "delta": spec.delta,
            "max_candidates_per_unit": (
                "auto" if selection.auto() else spec.max_candidates_per_unit
            ),
            "max_windows_per_unit": spec.max_windows_per_unit,
            "privacy_unit": "record" if wiring.bounds is None else "unit_column",
        },
        mechanism="partition_selection",
        rounds=1,
        shares=selection.shares(),
        spec=spec,
    )
