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
   relation, the contribution bounds and ``accuracy`` (DESIGN §7).

Privacy, common to every transform here:

* **Sensitivity and monotonicity come from the score objects** of :mod:`beam_dp.scores`
  (``DistinctUnitCount``, ``Revenue``, ``PluralityVote``, ``VoteMargin``), for the chosen
  relation (``"add_remove"``, the default, or ``"replace"``) and the bounds the pipeline
  enforces. Only :class:`ExponentialSelect` takes a declared sensitivity, for a user's score.
* **``unit_column=None`` is record-level privacy**: every record is its own privacy unit and
  nothing is shuffled or bounded. It protects single records, *not* people: someone with
  ``r`` records in the data is protected only at ``r·ε`` (group privacy). Use it only when
  each person contributes one record (a survey with one row per respondent), or knowingly.
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
  bounding; the rule, :func:`~beam_dp.beam.selection_core.window_markers`, is the quantile
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
  over the releases a unit can reach otherwise (:func:`~beam_dp.beam.selection_spec.split_share`).
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
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection

from beam_dp._validation import Relation, check_positive_finite
from beam_dp.batching import ContributionBounds, PublicIndex
from beam_dp.beam.key_selection import KeySelection, SelectCandidates, top_after_key_selection
from beam_dp.beam.selection_combiners import CandidateCountsFn, CustomScoreFn, RevenueFn
from beam_dp.beam.selection_core import (
    KeyOptions,
    Plan,
    SelectionTransform,
    check_column,
    describe,
    resolve_candidates,
    static_labels,
)
from beam_dp.beam.selection_spec import CommonOptions, EpsilonLike, SelectionSpec, nearest_float
from beam_dp.mechanisms import Method, RandomSource
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
PublicList = Sequence[Any] | str | os.PathLike[str]

_Built = tuple[Plan, str, int, dict[str, Any]]


def _record_level_bounds(record_level: bool) -> dict[str, int]:
    return {"record_level_privacy": 1} if record_level else {}


# --------------------------------------------------------------------------- top candidates


def _top_candidates(
    options: CommonOptions,
    keys: KeyOptions,
    *,
    candidate_column: str,
    candidates: Candidates | None,
    unit_column: str | None,
    max_candidates_per_unit: int | None,
    key_selection: KeySelection | None,
) -> _Built:
    check_column(candidate_column, "candidate_column")
    check_column(unit_column, "unit_column", optional=True)
    if max_candidates_per_unit is not None:
        DistinctUnitCount(1, max_candidates_per_unit)  # validates the bound
    if candidates is None:
        if key_selection is None:
            raise ValueError(
                "'candidates' is None: pass the public candidates, or key_selection="
                "KeySelection(epsilon=..., delta=..., max_candidates_per_unit=...) to select "
                "them privately from the data first"
            )
        if keys.keys is not None:
            raise ValueError("DP key selection is available with .Globally only")
        plan, name, display = top_after_key_selection(
            key_selection,
            candidate_column=candidate_column,
            unit_column=unit_column,
            options=options,
        )
        return plan, name, 1, display
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
    ledger = {
        **_record_level_bounds(record_level),
        **keys.ledger_bounds(record_level),
        "max_windows_per_unit": windows,
    }
    if record_level:
        bounds = None
        ledger["max_candidates_per_unit"] = 1
    else:
        bounds = ContributionBounds(
            max_contributions_per_unit=max_candidates_per_unit,
            max_keys_per_unit=keys.max_keys_per_unit,
            distinct_candidates=True,
        )
        ledger["distinct_candidates"] = 1
        if max_candidates_per_unit is not None:
            ledger["max_candidates_per_unit"] = max_candidates_per_unit
    spec = SelectionSpec.for_score(
        DistinctUnitCount(num_candidates=len(labels) if labels else 1),
        budget=keys.split(budget, record_level, windows),
        statistic="top_candidates",
        options=options,
        bounds=ledger,
    )
    encode = {
        "unit_column": unit_column,
        "candidate_column": candidate_column,
        "on_bad_record": options.on_bad_record,
        **keys.encode_options(),
    }
    plan = Plan(
        encode=encode if side is not None else {**encode, "candidates": _index(labels)},
        combine_fn=CandidateCountsFn(spec, labels),
        bounds=bounds,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
        side_candidates=side,
        keys=keys.keys,
    )
    display = describe(spec, labels=labels, bounds=bounds, keys=keys, epsilon_total=budget.epsilon)
    return plan, budget.name, keys.keys_per_unit(record_level), display


def _index(labels: tuple[Any, ...] | None) -> PublicIndex | None:
    return None if labels is None else PublicIndex(labels)


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
        unit_column: the privacy-unit field; None for record-level privacy.
        epsilon: a float or an allocated ``BudgetShare`` (its mechanism must be ``method``,
            with ``_top_k`` and ``rounds=k`` when ``k > 1``).
        k: how many candidates to release.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        relation: ``"add_remove"`` (default) or ``"replace"``.
        max_candidates_per_unit: distinct candidates kept per unit (None: no bound).
        key_selection: a :class:`KeySelection` when ``candidates`` is None.
        name: release name (default ``"top_candidates"``; the share's name with a share).
        confidence: confidence level of ``accuracy.score_loss``.
        num_shards: parallelism of contribution bounding.
        salt: decides which rows survive a bound (random per pipeline by default).
        on_bad_record: ``"fail"`` or ``"skip"``.
        rng: None (the OS CSPRNG); a seeded source for tests only (it is copied to every
            worker, so workers repeat each other's draws).
        key_column, keys, max_keys_per_unit (``.PerKey``): the key field, the public keys
            (a sequence or a file path) and the keys kept per unit (None: no bound).
        max_windows_per_unit: on windowed input, the windows a unit keeps rows in (enforced;
            default 1); each window's release runs at ``ε / max_windows_per_unit``.

    Privacy:
        Sensitivity 1 under both relations, whatever ``max_candidates_per_unit`` (each
        candidate's count moves by at most one); monotone under ``add_remove`` only. Releases
        the chosen label(s). With ``key_selection``, the labels are first selected privately
        from the data (an extra (ε, δ) release, recorded separately), then the top-k among
        them. See the module docstring for windows, ``.PerKey`` and record-level privacy.
    """

    class Globally(SelectionTransform):
        """Top candidate(s) over the whole input, one release per window."""

        NAMESPACE = "TopCandidates"
        VARIANT = "Globally"

        def __init__(
            self,
            *,
            candidate_column: str,
            candidates: Candidates | None,
            unit_column: str | None,
            epsilon: EpsilonLike,
            k: int = 1,
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            max_candidates_per_unit: int | None = None,
            key_selection: KeySelection | None = None,
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                k=k,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _top_candidates(
                options,
                KeyOptions(),
                candidate_column=candidate_column,
                candidates=candidates,
                unit_column=unit_column,
                max_candidates_per_unit=max_candidates_per_unit,
                key_selection=key_selection,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)

    class PerKey(SelectionTransform):
        """Top candidate(s) per public key (e.g. per country), one release per key."""

        NAMESPACE = "TopCandidates"
        VARIANT = "PerKey"

        def __init__(
            self,
            *,
            candidate_column: str,
            candidates: Candidates,
            unit_column: str | None,
            key_column: str,
            keys: PublicList,
            epsilon: EpsilonLike,
            max_keys_per_unit: int | None = None,
            k: int = 1,
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            max_candidates_per_unit: int | None = None,
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                k=k,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            if candidates is None:
                raise ValueError("TopCandidates.PerKey needs public 'candidates'")
            plan, release_name, reach, display = _top_candidates(
                options,
                KeyOptions.per_key(key_column, keys, max_keys_per_unit),
                candidate_column=candidate_column,
                candidates=candidates,
                unit_column=unit_column,
                max_candidates_per_unit=max_candidates_per_unit,
                key_selection=None,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)


# --------------------------------------------------------------------------- best price


def _best_price(
    options: CommonOptions,
    keys: KeyOptions,
    *,
    value_column: str,
    unit_column: str | None,
    prices: Sequence[Any] | None,
    per_unit: str,
) -> _Built:
    check_column(value_column, "value_column")
    check_column(unit_column, "unit_column", optional=True)
    if per_unit not in PER_UNIT_RULES:
        raise ValueError(f"'per_unit' must be one of {list(PER_UNIT_RULES)}; received {per_unit!r}")
    score = Revenue.default() if prices is None else Revenue(tuple(prices))
    record_level = unit_column is None
    windows = options.windows_per_unit(record_level)
    budget = options.budget("best_price")
    exact = [Fraction(price) for price in score.prices]
    labels = tuple(nearest_float(price) for price in exact)
    # The nearest float of each price: for decimal prices, x >= price exactly when
    # x >= threshold (see Revenue); the integer score step is Revenue.unit.
    thresholds = np.array([float(price) for price in exact], dtype=np.float64)
    scaled = np.array([int(price / score.unit) for price in exact], dtype=np.int64)
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
        bounds={
            **score.contribution_bounds,
            **_record_level_bounds(record_level),
            **keys.ledger_bounds(record_level),
            "max_windows_per_unit": windows,
        },
    )
    rule = None if record_level else per_unit
    plan = Plan(
        encode={
            "unit_column": unit_column,
            "value_column": value_column,
            "on_bad_record": options.on_bad_record,
            **keys.encode_options(),
        },
        combine_fn=RevenueFn(spec, labels, thresholds, scaled, rule),
        bounds=bounds,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
        keys=keys.keys,
    )
    display = describe(spec, labels=labels, bounds=bounds, keys=keys, epsilon_total=budget.epsilon)
    display["per_unit"] = "record" if rule is None else rule
    return plan, budget.name, keys.keys_per_unit(record_level), display


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
        unit_column: the privacy-unit field; None for record-level privacy (each record is
            one buyer).
        epsilon: a float or an allocated ``BudgetShare``.
        prices: the public grid: exact decimals, strictly increasing (default 0.01 ... 1.99).
        per_unit: ``"max"`` (default), ``"min"`` or ``"mean"``.
        method, relation, name, confidence, num_shards, salt, on_bad_record, rng,
        key_column, keys, max_keys_per_unit, max_windows_per_unit: as in
        :class:`TopCandidates`.

    Privacy:
        Sensitivity ``max(prices)`` under both relations, monotone under both (one value per
        unit: every count moves the same way). Releases one price. See the module docstring
        for windows, ``.PerKey`` and record-level privacy.
    """

    class Globally(SelectionTransform):
        """The best price over the whole input, one release per window."""

        NAMESPACE = "BestPrice"
        VARIANT = "Globally"

        def __init__(
            self,
            *,
            value_column: str,
            unit_column: str | None,
            epsilon: EpsilonLike,
            prices: Sequence[Any] | None = None,
            per_unit: str = "max",
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _best_price(
                options,
                KeyOptions(),
                value_column=value_column,
                unit_column=unit_column,
                prices=prices,
                per_unit=per_unit,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)

    class PerKey(SelectionTransform):
        """The best price per public key (e.g. per country), one release per key."""

        NAMESPACE = "BestPrice"
        VARIANT = "PerKey"

        def __init__(
            self,
            *,
            value_column: str,
            unit_column: str | None,
            key_column: str,
            keys: PublicList,
            epsilon: EpsilonLike,
            max_keys_per_unit: int | None = None,
            prices: Sequence[Any] | None = None,
            per_unit: str = "max",
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _best_price(
                options,
                KeyOptions.per_key(key_column, keys, max_keys_per_unit),
                value_column=value_column,
                unit_column=unit_column,
                prices=prices,
                per_unit=per_unit,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)


# --------------------------------------------------------------------------- election


def _election(
    options: CommonOptions,
    keys: KeyOptions,
    *,
    candidate_column: str,
    candidates: Candidates,
    unit_column: str | None,
    score: str,
) -> _Built:
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
        bounds={
            **score_object.contribution_bounds,
            **_record_level_bounds(record_level),
            **keys.ledger_bounds(record_level),
            "max_windows_per_unit": windows,
        },
    )
    encode = {
        "unit_column": unit_column,
        "candidate_column": candidate_column,
        "on_bad_record": options.on_bad_record,
        **keys.encode_options(),
    }
    plan = Plan(
        encode=encode if side is not None else {**encode, "candidates": _index(labels)},
        combine_fn=CandidateCountsFn(spec, labels, "margin" if score == "margin" else "counts"),
        bounds=bounds,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
        side_candidates=side,
        keys=keys.keys,
    )
    display = describe(spec, labels=labels, bounds=bounds, keys=keys, epsilon_total=budget.epsilon)
    display["score"] = score
    return plan, budget.name, keys.keys_per_unit(record_level), display


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
        epsilon: a float or an allocated ``BudgetShare``.
        score: ``"plurality"`` (default) or ``"margin"``.
        method, relation, name, confidence, num_shards, salt, on_bad_record, rng,
        key_column, keys, max_keys_per_unit, max_windows_per_unit: as in
        :class:`TopCandidates`.

    Privacy:
        Plurality: sensitivity 1, monotone under ``add_remove`` only. Margin: sensitivity 1
        (``add_remove``) or 2 (``replace``), never monotone. Releases the winner's label. See
        the module docstring for windows, ``.PerKey`` and record-level privacy.
    """

    class Globally(SelectionTransform):
        """The winner over the whole input, one release per window."""

        NAMESPACE = "Election"
        VARIANT = "Globally"

        def __init__(
            self,
            *,
            candidate_column: str,
            candidates: Candidates,
            unit_column: str | None,
            epsilon: EpsilonLike,
            score: str = "plurality",
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _election(
                options,
                KeyOptions(),
                candidate_column=candidate_column,
                candidates=candidates,
                unit_column=unit_column,
                score=score,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)

    class PerKey(SelectionTransform):
        """One winner per public key (e.g. per village), one release per key."""

        NAMESPACE = "Election"
        VARIANT = "PerKey"

        def __init__(
            self,
            *,
            candidate_column: str,
            candidates: Candidates,
            unit_column: str | None,
            key_column: str,
            keys: PublicList,
            epsilon: EpsilonLike,
            max_keys_per_unit: int | None = None,
            score: str = "plurality",
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _election(
                options,
                KeyOptions.per_key(key_column, keys, max_keys_per_unit),
                candidate_column=candidate_column,
                candidates=candidates,
                unit_column=unit_column,
                score=score,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)


# --------------------------------------------------------------------------- custom scores


def _custom(
    options: CommonOptions,
    keys: KeyOptions,
    *,
    score_fn: beam.CombineFn,
    candidates: PublicList,
    sensitivity: float | Fraction,
    monotone: bool,
    unit_column: str | None,
    candidate_column: str | None,
    value_column: str | None,
    bounds: ContributionBounds | None,
    statistic: str,
) -> _Built:
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
    for column, field in (
        (unit_column, "unit_column"),
        (candidate_column, "candidate_column"),
        (value_column, "value_column"),
    ):
        check_column(column, field, optional=True)
    labels = static_labels(candidates)
    options.check_k(len(labels))
    record_level = unit_column is None
    windows = options.windows_per_unit(record_level)
    budget = options.budget(statistic)
    one_key = keys.split(budget, record_level, windows)
    enforced = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=requested.max_contributions_per_unit,
            max_keys_per_unit=keys.max_keys_per_unit,
            distinct_candidates=requested.distinct_candidates,
        )
    )
    ledger = {} if record_level else requested.to_dict()
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
        contribution_bounds={
            **ledger,
            **_record_level_bounds(record_level),
            **keys.ledger_bounds(record_level),
            "max_windows_per_unit": windows,
        },
        confidence=options.confidence,
        rng=options.rng,
    )
    plan = Plan(
        encode={
            "unit_column": unit_column,
            "candidate_column": candidate_column,
            "candidates": None if candidate_column is None else _index(labels),
            "value_column": value_column,
            "on_bad_record": options.on_bad_record,
            **keys.encode_options(),
        },
        combine_fn=CustomScoreFn(spec, labels, score_fn),
        bounds=enforced,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
        keys=keys.keys,
    )
    display = describe(
        spec, labels=labels, bounds=enforced, keys=keys, epsilon_total=budget.epsilon
    )
    display["score_fn"] = type(score_fn).__name__
    return plan, budget.name, keys.keys_per_unit(record_level), display


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
        epsilon: a float or an allocated ``BudgetShare``.
        sensitivity: the declared sensitivity in the score's units (> 0, finite).
        monotone: the declared monotonicity under ``relation``.
        unit_column: the privacy-unit field; None for record-level privacy.
        candidate_column, value_column: fields encoded for ``score_fn``.
        bounds: the contribution bounds to enforce (default: one row per unit; its
            ``max_keys_per_unit`` is replaced by the ``.PerKey`` argument).
        statistic: the ledger's statistic name (default ``"custom"``).
        k, method, relation, name, confidence, num_shards, salt, on_bad_record, rng,
        key_column, keys, max_keys_per_unit, max_windows_per_unit: as in
        :class:`TopCandidates`.

    Privacy:
        The caller declares ``sensitivity`` (the largest change of any candidate's score
        between neighbours under ``relation``, given ``bounds``) and ``monotone``; the
        guarantee is only as good as that declaration. Releases the chosen label(s).
    """

    class Globally(SelectionTransform):
        """Select over the whole input, one release per window."""

        NAMESPACE = "ExponentialSelect"
        VARIANT = "Globally"

        def __init__(
            self,
            score_fn: beam.CombineFn,
            *,
            candidates: PublicList,
            epsilon: EpsilonLike,
            sensitivity: float | Fraction,
            monotone: bool,
            unit_column: str | None,
            candidate_column: str | None = None,
            value_column: str | None = None,
            bounds: ContributionBounds | None = None,
            k: int = 1,
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            statistic: str = "custom",
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                k=k,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _custom(
                options,
                KeyOptions(),
                score_fn=score_fn,
                candidates=candidates,
                sensitivity=sensitivity,
                monotone=monotone,
                unit_column=unit_column,
                candidate_column=candidate_column,
                value_column=value_column,
                bounds=bounds,
                statistic=statistic,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)

    class PerKey(SelectionTransform):
        """One selection per public key, one release per key."""

        NAMESPACE = "ExponentialSelect"
        VARIANT = "PerKey"

        def __init__(
            self,
            score_fn: beam.CombineFn,
            *,
            candidates: PublicList,
            epsilon: EpsilonLike,
            sensitivity: float | Fraction,
            monotone: bool,
            unit_column: str | None,
            key_column: str,
            keys: PublicList,
            max_keys_per_unit: int | None = None,
            candidate_column: str | None = None,
            value_column: str | None = None,
            bounds: ContributionBounds | None = None,
            k: int = 1,
            method: Method = "permute_and_flip",
            relation: Relation = "add_remove",
            name: str | None = None,
            statistic: str = "custom",
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            options = CommonOptions(
                epsilon=epsilon,
                method=method,
                relation=relation,
                k=k,
                name=name,
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
            )
            plan, release_name, reach, display = _custom(
                options,
                KeyOptions.per_key(key_column, keys, max_keys_per_unit),
                score_fn=score_fn,
                candidates=candidates,
                sensitivity=sensitivity,
                monotone=monotone,
                unit_column=unit_column,
                candidate_column=candidate_column,
                value_column=value_column,
                bounds=bounds,
                statistic=statistic,
            )
            self._finish(plan, release_name=release_name, keys_per_unit=reach, display=display)


# --------------------------------------------------------------------------- accounting
