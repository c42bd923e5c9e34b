"""Private selection on Beam: heavy hitters, best price, elections and custom scores.

Each statistic is a namespace with ``.Globally`` and ``.PerKey`` transforms, as Beam's own
combiners (``Count.Globally``, ``Top.PerKey``)::

    releases = (
        batches  # pyarrow RecordBatches / Tables (ReadFromParquetBatched) or lists of dicts
        | TopCandidates.Globally(
            candidate_column="site", candidates=sites, unit_column="user_id", epsilon=0.5)
    )

The transforms take **batches**, never single rows: pyarrow RecordBatches or Tables (as
``ReadFromParquetBatched`` yields them), mappings of columns, or lists of dicts. Inside:

1. ``EncodeBatches``: the privacy unit becomes a stable 64-bit hash, candidates and keys
   their position in the public lists (records naming anything else are dropped).
2. ``BoundContributions`` (when ``unit_column`` is given): batches, not rows, are shuffled by
   the unit hash so that every row of a unit meets on one shard, whatever file or worker it
   came from; the shard is bounded with numpy.
3. A ``CombineFn`` reduces each batch with numpy into an integer vector indexed by candidate
   (:mod:`beam_dp.summaries.counts`); vectors merge by addition.
4. ``extract_output`` runs the exact sampler (:mod:`beam_dp.mechanisms`) **once** on the merged
   accumulator and returns a :class:`~beam_dp.release.Release` whose ledger holds ε, Δ, the
   relation, the contribution bounds and ``accuracy`` (DESIGN §7). ``.PerKey`` with ``k = 1``
   (top candidates, best price, elections) merges each key's scores the same way and then
   releases keys in batches, one vectorised exact draw per batch
   (:func:`~beam_dp.mechanisms.select_per_key`: the same law per key, a few microseconds per
   key instead of a few hundred); top-k and :class:`ExponentialSelect` draw once per key.

Privacy, common to every transform here:

* **Sensitivity and monotonicity come from the score objects** of :mod:`beam_dp.scores`
  (``DistinctUnitCount``, ``Revenue``, ``PluralityVote``, ``VoteMargin``), for the chosen
  relation (``"add_remove"``, the default, or ``"replace"``) and the bounds the pipeline
  enforces. Only :class:`ExponentialSelect` takes a declared sensitivity, for a user's score.
* **``record_level=True`` (no ``unit_column``) is record-level privacy**, and must be asked
  for: a transform given neither a ``unit_column`` nor ``record_level=True`` is refused.
  Every record is then its own privacy unit and nothing is shuffled or bounded. It protects
  single records, *not* people: someone with ``r`` records in the data is protected only at
  ``r·ε`` (group privacy). Use it only when each person contributes one record (a survey
  with one row per respondent), or knowingly.
* **Empty input** still yields a release in the global window (all scores zero).
* **Windows**: on a windowed PCollection (e.g. ``beam.WindowInto(FixedWindows(...))``,
  bounded or unbounded) each window gets its own release (``Release.window`` gives its
  bounds). Contribution bounding also bounds the windows a unit reaches: each unit keeps rows
  in at most ``max_windows_per_unit`` (default 1) of its windows (on bounded input chosen by
  a salted priority over its own windows; on unbounded, streaming input the first ones its
  rows arrive in, kept as per-unit state for the life of the job, see
  :mod:`beam_dp.beam.bounding`), and each window's release runs at
  ``ε / max_windows_per_unit`` (recorded with ``max_windows_per_unit`` in its
  ``contribution_bounds``), so the releases of all windows together are ε-DP per unit.
  Refused, when the pipeline is built: merging windows (``Sessions``), windows other than
  ``FixedWindows`` with record-level privacy, and ``max_windows_per_unit > 1`` in the global
  window
  (:func:`~beam_dp.beam.bounding.check_windowing`). A window releases if and only if it holds
  at least one input element (even if all its records are dropped as bad, unknown or by
  bounding; the rule, :func:`~beam_dp.beam.plan.window_markers`, is the quantile
  transforms' too); a window without any element releases nothing, so *which windows exist*
  is not protected: if it must be, feed one empty batch (``{}``) per window as a heartbeat.
* **``.PerKey``**: one selection per public key (``keys``; records with other keys are
  dropped), and every public key gets a release, with or without data. A unit influences at
  most ``m = min(max_keys_per_unit, len(keys))`` keys (``m = len(keys)`` when
  ``max_keys_per_unit`` is None, and ``m = 1`` with record-level privacy, where a record has
  one key), in at most ``w = max_windows_per_unit`` windows. Under basic composition each
  key's selection runs at ``ε / (m·w)``; with a budget share accounted by zCDP each gets
  ``ρ / (m·w)`` and runs at ``ε / √(m·w)`` (rounded down, exactly). So the whole ``.PerKey``
  release is ε-DP (or costs the share's ρ): parallel composition when ``m·w = 1``, composition
  over the releases a unit can reach otherwise (:func:`~beam_dp.beam.options.split_share`).
* **``replace`` with keys or windows**: the number of records in each key and window is
  public, as the dataset size is under ``replace``; a neighbour changes a unit's records
  within the keys and windows they are in (the seed's villages: a vote is switched, the voter
  stays in the village). A unit that may move between keys or windows is protected under
  ``add_remove``, where a move is two steps (2ε).
  Each per-key ledger entry records its own ε (and ρ) and ``max_keys_per_unit: m``; to charge
  a :class:`~beam_dp.accounting.PrivacyBudget` record ``m`` of them per window
  (:func:`ledger_entries_to_record`).
* Budget: ``epsilon`` is a float or an allocated :class:`~beam_dp.accounting.BudgetShare`
  whose mechanism matches the transform (``method`` and ``k`` decide it:
  ``"permute_and_flip"``, ``"exponential"``, or their ``_top_k`` forms with ``rounds=k``).
  ``Release.ledger.rho`` is set when the share is accounted by zCDP.
* No record value ever reaches a log, an exception or a metric, and no exact
  data-dependent count does either unless the operator switched exact counts on
  (:mod:`beam_dp.telemetry`).

Candidates (``candidates=``) are public: a sequence of labels, a path to a text file (one
label per line), or a PCollection of labels used as a side input (for counts-based scores;
every worker sorts it, so labels must be mutually comparable). When the candidates are not
public, :class:`TopCandidates` runs DP key selection first (:class:`KeySelection`), and
:class:`SelectCandidates` runs it alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, Required, TypedDict, Unpack

import numpy as np
from apache_beam.pvalue import PCollection

from beam_dp.batching import ContributionBounds
from beam_dp.beam.custom_selection import ExponentialSelect
from beam_dp.beam.key_selection import KeySelection, SelectCandidates, top_after_key_selection
from beam_dp.beam.options import (
    CommonOptions,
    KeyOptions,
    PerKeyOptions,
    PrivateOptions,
    check_column,
)
from beam_dp.beam.plan import Built, PrivateTransform
from beam_dp.beam.selection_combiners import (
    CandidateCountsFn,
    RevenueFn,
    public_index,
    resolve_candidates,
    selection_plan,
)
from beam_dp.beam.selection_spec import SelectionSpec, ledger_bounds
from beam_dp.release import ledger_entries_to_record
from beam_dp.scores import DistinctUnitCount, PluralityVote, Revenue, Score, VoteMargin
from beam_dp.summaries.counts import PER_UNIT_RULES

__all__ = [
    "BestPrice",
    "Election",
    "ExponentialSelect",
    "KeySelection",
    "SelectCandidates",
    "TopCandidates",
    "ledger_entries_to_record",
]

Candidates = Sequence[Any] | str | os.PathLike[str] | PCollection


# --------------------------------------------------------------------------- top candidates


# A statistic's own keywords are declared once, in a TypedDict of the functional form (its
# Required[...] stays visible at run time, __required_keys__, which a class body under
# ``from __future__ import annotations`` would hide), and
# combined with PrivateOptions / PerKeyOptions into each variant's ``**options``; its build
# function reads them and applies their defaults (PrivateTransform._build).
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


def _top_candidates(options: CommonOptions, keys: KeyOptions, args: TopCandidatesArgs) -> Built:
    candidate_column = args["candidate_column"]
    candidates = args["candidates"]
    unit_column = args.get("unit_column")
    max_candidates_per_unit = args.get("max_candidates_per_unit")
    key_selection = args.get("key_selection")
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
        if keys.keys is not None:
            raise ValueError("TopCandidates.PerKey needs public 'candidates'")
        if key_selection is None:
            raise ValueError(
                "'candidates' is None: pass the public candidates, or key_selection="
                "KeySelection(epsilon=..., delta=..., max_candidates_per_unit=...) to select "
                "them privately from the data first"
            )
        return top_after_key_selection(
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
    windows = options.windows_per_unit(record_level)
    budget = options.budget("top_candidates")
    # The count's sensitivity is 1 whatever a unit names; no bound on the candidates per
    # unit is needed, and an absent bound is left out of the ledger.
    own: dict[str, int] = {}
    if record_level:
        bounds = None
        own["max_candidates_per_unit"] = 1
    else:
        bounds = ContributionBounds(
            max_contributions_per_unit=max_candidates_per_unit,
            max_keys_per_unit=keys.max_keys_per_unit,
            distinct_candidates=True,
        )
        own["distinct_candidates"] = 1
        if max_candidates_per_unit is not None:
            own["max_candidates_per_unit"] = max_candidates_per_unit
    spec = SelectionSpec.for_score(
        DistinctUnitCount(num_candidates=len(labels) if labels else 1),
        budget=keys.split(budget, record_level, windows),
        statistic="top_candidates",
        options=options,
        bounds=ledger_bounds(own, keys, options, record_level, windows),
    )
    return selection_plan(
        spec,
        options=options,
        keys=keys,
        unit_column=unit_column,
        encode={"candidate_column": candidate_column, "candidates": public_index(labels)},
        combine_fn=CandidateCountsFn(spec, labels),
        bounds=bounds,
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


class TopCandidates:
    """Heavy hitters (seed 002): the candidate(s) that most distinct privacy units contributed.

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
        **options: the options every private transform takes
            (:class:`~beam_dp.beam.options.PrivateOptions`: ``epsilon`` (required),
            ``method``, ``relation``, ``name`` (default ``"top_candidates"``), ``confidence``,
            ``num_shards``, ``salt``, ``on_bad_record``, ``rng``, ``max_windows_per_unit``),
            and for ``.PerKey`` the keys (:class:`~beam_dp.beam.options.PerKeyOptions`:
            ``key_column``, ``keys``, ``max_keys_per_unit``).

    Privacy:
        Sensitivity 1 under both relations, whatever ``max_candidates_per_unit`` (each
        candidate's count moves by at most one); monotone under ``add_remove`` only. Releases
        the chosen label(s). With ``key_selection``, the labels are first selected privately
        from the data (an extra (ε, δ) release, recorded separately), then the top-k among
        them. See the module docstring for windows, ``.PerKey`` and record-level privacy.
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


# --------------------------------------------------------------------------- best price


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


def _best_price(options: CommonOptions, keys: KeyOptions, args: BestPriceArgs) -> Built:
    value_column = args["value_column"]
    unit_column = args.get("unit_column")
    prices = args.get("prices")
    per_unit = args.get("per_unit", "max")
    check_column(value_column, "value_column")
    check_column(unit_column, "unit_column", optional=True)
    if per_unit not in PER_UNIT_RULES:
        raise ValueError(f"'per_unit' must be one of {list(PER_UNIT_RULES)}; received {per_unit!r}")
    score = _revenue(prices)
    record_level = unit_column is None
    windows = options.windows_per_unit(record_level)
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
            max_contributions_per_unit=None, max_keys_per_unit=keys.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score,
        budget=keys.split(budget, record_level, windows),
        statistic="best_price",
        options=options,
        bounds=ledger_bounds(score.contribution_bounds, keys, options, record_level, windows),
    )
    rule = None if record_level else per_unit
    built = selection_plan(
        spec,
        options=options,
        keys=keys,
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
    """The posted price that maximises revenue (seed 002, pricing a digital good).

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
        unit: every count moves the same way). Releases one price. See the module docstring
        for windows, ``.PerKey`` and record-level privacy.
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


# --------------------------------------------------------------------------- election


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


def _election(options: CommonOptions, keys: KeyOptions, args: ElectionArgs) -> Built:
    candidate_column = args["candidate_column"]
    candidates = args["candidates"]
    unit_column = args.get("unit_column")
    score = args.get("score", "plurality")
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
    windows = options.windows_per_unit(record_level)
    budget = options.budget("election")
    # One vote per unit: a unit with several vote records keeps one (a per-unit rule).
    bounds = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=1, max_keys_per_unit=keys.max_keys_per_unit
        )
    )
    spec = SelectionSpec.for_score(
        score_object,
        budget=keys.split(budget, record_level, windows),
        statistic="election",
        options=options,
        bounds=ledger_bounds(
            score_object.contribution_bounds, keys, options, record_level, windows
        ),
    )
    return selection_plan(
        spec,
        options=options,
        keys=keys,
        unit_column=unit_column,
        encode={"candidate_column": candidate_column, "candidates": public_index(labels)},
        combine_fn=CandidateCountsFn(spec, labels, "margin" if score == "margin" else "counts"),
        bounds=bounds,
        labels=labels,
        side=side,
        epsilon_total=budget.epsilon,
    )


class Election:
    """An election among public candidates (seed 003): one vote per privacy unit.

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
        (``add_remove``) or 2 (``replace``), never monotone. Releases the winner's label. See
        the module docstring for windows, ``.PerKey`` and record-level privacy.
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
