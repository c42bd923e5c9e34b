"""Private selection on Beam: heavy hitters, best price, elections and a user's own score.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms, as Beam's own
combiners (``Count.Globally``, ``Top.PerKey``)::

    releases = batches | TopCandidates.Globally(
        candidate_column="site", candidates=sites, unit_column="user_id", epsilon=0.5)

The transforms take **batches** (pyarrow RecordBatches or Tables, mappings of columns, lists of
dicts). A release is planned without Beam (:mod:`beam_dp.summaries.selection`: the
:class:`~beam_dp.summaries.selection.SelectionSpec` with its sensitivity, monotonicity, budget
and rounds, the bounds the pipeline enforces, the exact sampler run once on the merged scores,
the release record); this module reads the keywords, resolves the budget and wires the plan
into a combiner (:mod:`beam_dp.beam.selection_combiners`: each batch reduced with numpy into an
integer vector indexed by candidate; vectors merge by addition). Read top to bottom: the
options of each statistic, the wiring, and the transforms. Only :class:`ExponentialSelect`
takes a declared sensitivity, for a user's score.

Candidates (``candidates=``) are public: a sequence of labels, a path to a text file (one
label per line), or a PCollection of labels used as a side input (for counts-based scores;
every worker sorts it, so labels must be mutually comparable). When the candidates are not
public, ``TopCandidates.Globally(candidates=None, key_selection=KeySelection(...))`` runs DP
key selection first (:mod:`beam_dp.beam.key_selection`: besides its own combiners, the one
family module this one imports).

Privacy: a budget share names the mechanism ``method`` (``method + "_top_k"`` with
``rounds=k`` for top-k); ``Release.ledger.rho`` is set when it is accounted by zCDP. Units
(``record_level=True``), keys, windows and the budget division:
``docs/privacy_rules.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, Required, TypedDict, Unpack

import apache_beam as beam
from apache_beam.pvalue import PCollection

from beam_dp.batching import (
    ContributionBounds,
    PublicIndex,
)
from beam_dp.batching.columns import LabelMatch
from beam_dp.beam._transform import (
    Built,
    CommonOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    PublicList,
    check_column,
    divide_budget,
    static_labels,
    take_options,
)
from beam_dp.beam.key_selection import KeySelection, key_selection_wiring
from beam_dp.beam.selection_combiners import (
    CandidateCountsFn,
    CustomScoreFn,
    EncodeWithSideCandidatesFn,
    RevenueFn,
)
from beam_dp.scores import Revenue
from beam_dp.summaries.selection import (
    Labels,
    SelectionPlan,
    check_declared_score,
    check_election_score,
    check_key_selection_relation,
    check_max_candidates_per_unit,
    check_per_unit_rule,
    check_release_names,
    describe,
    election_score,
    plan_best_price,
    plan_custom,
    plan_election,
    plan_top_after_key_selection,
    plan_top_candidates,
    revenue_score,
)

__all__ = [
    "BestPrice",
    "Election",
    "ExponentialSelect",
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
    plan: SelectionPlan,
    *,
    options: CommonOptions,
    unit_column: str | None,
    encode: dict[str, Any],
    combine_fn: beam.CombineFn,
    labels: Labels | None,
    side: PCollection | None = None,
    epsilon_total: float,
) -> Built:
    """A selection over ``plan``: encode with the keys, bound, combine."""
    record_level = unit_column is None
    encode = options.encode_options(unit_column, encode)
    if side is not None:  # the encoder reads the candidates from the side input
        del encode["candidates"]
    wiring = options.wiring(
        combine_fn,
        record_level=record_level,
        encode=encode,
        bounds=plan.bounds,
        encode_fn=None if side is None else EncodeWithSideCandidatesFn(encode, options.label_match),
        side_candidates=side,
    )
    display = describe(
        plan.spec,
        labels=labels,
        bounds=plan.bounds,
        keys=options.keys,
        epsilon_total=epsilon_total,
    )
    return Built(
        wiring,
        release_name=plan.spec.name,
        keys_per_unit=options.keys_per_unit(record_level),
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=options.shares(),
        spec=plan.spec,
    )


def public_index(labels: tuple[Any, ...] | None, match: LabelMatch) -> PublicIndex | None:
    return None if labels is None else PublicIndex(labels, match)


# ---------------------------------------------------------------------------- top candidates


def _top_candidates(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    options = take_options(variant, shared, unit_column=own.get("unit_column"), k=own.get("k", 1))
    candidate_column, candidates = own["candidate_column"], own["candidates"]
    unit_column, key_selection = own.get("unit_column"), own.get("key_selection")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    check_max_candidates_per_unit(own.get("max_candidates_per_unit"))
    if candidates is None:
        if options.keys is not None:
            raise ValueError("TopCandidates.PerKey needs public 'candidates'")
        if key_selection is None:
            raise ValueError(
                "'candidates' is None: pass the public candidates, or key_selection="
                "KeySelection(epsilon=..., delta=..., max_candidates_per_unit=...) to select "
                "them privately from the data first"
            )
        return _top_after_key_selection(key_selection, candidate_column, unit_column, options)
    if key_selection is not None:
        raise ValueError(
            "'key_selection' applies only when the candidates are not public "
            "(candidates=None); public candidates need no key selection"
        )
    labels, side = resolve_candidates(candidates, side_input_ok=True)
    options.check_k(None if labels is None else len(labels))
    record_level = unit_column is None
    budget = options.budget("top_candidates")
    plan = plan_top_candidates(
        options,
        options.per_release(budget, record_level),
        labels=labels,
        record_level=record_level,
        max_candidates_per_unit=own.get("max_candidates_per_unit"),
    )
    return selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(plan.spec, labels),
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


def _top_after_key_selection(
    selection: KeySelection,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
) -> Built:
    """``TopCandidates.Globally(candidates=None, key_selection=...)``: DP key selection, then
    the top-k among the selected labels, on the same counts, in one pass."""
    if not isinstance(selection, KeySelection):
        raise TypeError("'key_selection' must be a KeySelection")
    check_key_selection_relation(options.relation)
    budget = options.budget("top_candidates")
    check_release_names(budget.name, selection.resolve()[0])
    record_level = unit_column is None
    labels_per_unit = 1 if record_level else selection.held_per_unit()
    top = plan_top_after_key_selection(
        options,
        divide_budget(budget, windows_per_unit=options.windows_per_unit(record_level)),
        labels_per_unit=labels_per_unit,
        record_level=record_level,
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
    value_column, unit_column = own["value_column"], own.get("unit_column")
    per_unit = own.get("per_unit", "max")
    check_column(value_column, "value_column")
    check_column(unit_column, "unit_column", optional=True)
    check_per_unit_rule(per_unit)
    score = revenue_score(own.get("prices"))
    record_level = unit_column is None
    budget = options.budget("best_price")
    plan = plan_best_price(
        options, options.per_release(budget, record_level), score=score, record_level=record_level
    )
    # The nearest float of each price is both the release label and the threshold: for
    # decimal prices, x >= price exactly when x >= threshold (see Revenue); the integer score
    # step is Revenue.unit. Labels stay an array: a 10^6-price grid pickles as one buffer.
    thresholds = score.thresholds
    rule = None if record_level else per_unit
    built = selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={"value_column": value_column},
        combine_fn=RevenueFn(plan.spec, thresholds, thresholds, score.scaled_prices, rule),
        labels=thresholds,
        epsilon_total=budget.epsilon,
    )
    built.display["per_unit"] = "record" if rule is None else rule
    return built


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
    candidate_column, candidates = own["candidate_column"], own["candidates"]
    unit_column, score = own.get("unit_column"), own.get("score", "plurality")
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    check_election_score(score)
    labels, side = resolve_candidates(candidates, side_input_ok=score == "plurality")
    score_object = election_score(score, labels)
    record_level = unit_column is None
    budget = options.budget("election")
    plan = plan_election(
        options,
        options.per_release(budget, record_level),
        score=score_object,
        record_level=record_level,
    )
    return selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": public_index(labels, options.label_match),
        },
        combine_fn=CandidateCountsFn(
            plan.spec, labels, "margin" if score == "margin" else "counts"
        ),
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
    unit_column, candidate_column = own.get("unit_column"), own.get("candidate_column")
    value_column, statistic = own.get("value_column"), own.get("statistic", "custom")
    if not isinstance(score_fn, beam.CombineFn):
        raise TypeError(
            f"'score_fn' must be a beam.CombineFn; received type {type(score_fn).__name__}"
        )
    requested = check_declared_score(
        own["sensitivity"], own["monotone"], own.get("bounds"), statistic
    )
    for column, name in (
        (unit_column, "unit_column"),
        (candidate_column, "candidate_column"),
        (value_column, "value_column"),
    ):
        check_column(column, name, optional=True)
    labels = static_labels(own["candidates"])
    options.check_k(len(labels))
    record_level = unit_column is None
    budget = options.budget(statistic)
    plan = plan_custom(
        options,
        options.per_release(budget, record_level),
        statistic=statistic,
        sensitivity=own["sensitivity"],
        monotone=own["monotone"],
        requested=requested,
        record_level=record_level,
    )
    index = None if candidate_column is None else public_index(labels, options.label_match)
    built = selection_built(
        plan,
        options=options,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": index,
            "value_column": value_column,
        },
        combine_fn=CustomScoreFn(plan.spec, labels, score_fn),
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
