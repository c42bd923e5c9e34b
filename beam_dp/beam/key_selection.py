"""DP key selection on Beam: release the labels that enough privacy units hold.

When the candidates are not public (websites in the wild), labels read from the data are
released only if their distinct-unit count plus exact discrete Laplace noise clears a
threshold (:mod:`beam_dp.mechanisms.partition_selection`), as PipelineDP's
``select_partitions``. It needs ``delta > 0`` and a bound on the distinct labels per unit,
which the pipeline enforces.

* :class:`SelectCandidates` releases the selected set alone.
* ``TopCandidates.Globally(candidates=None, key_selection=KeySelection(...))`` selects the set
  and then the top-k among it, on the same counts, in one pass.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from apache_beam.pvalue import PCollection

from beam_dp._validation import check_positive_int
from beam_dp.accounting import BudgetShare
from beam_dp.accounting.zcdp import floor_float
from beam_dp.batching import (
    ContributionBounds,
)
from beam_dp.batching.hashing import UnitIds
from beam_dp.beam.key_selection_combiners import (
    AutoKeySelectionFn,
    EncodeLabelsFn,
    KeySelectionFn,
    KeySelectionSpec,
    release_selection_at_choice,
)
from beam_dp.beam.options import (
    CommonOptions,
    EpsilonLike,
    KeyOptions,
    ResolvedBudget,
    check_column,
    check_privacy_unit,
    split_share,
)
from beam_dp.beam.plan import Built, Plan, PrivateTransform
from beam_dp.beam.quantile_combiners import AutoBoundSpec
from beam_dp.beam.quantile_graph import expand_auto_bound
from beam_dp.beam.quantile_options import AutoBound, check_auto_bound
from beam_dp.beam.selection_spec import SelectionSpec, describe
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.partition_selection import (
    check_key_selection,
)
from beam_dp.scores import DistinctUnitCount
from beam_dp.summaries.contribution_bounds import DEFAULT_CAP, split_epsilon

__all__ = ["KeySelection", "SelectCandidates"]


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

    def __post_init__(self) -> None:
        self.resolve()
        self.auto()

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
        """The parameters of one window's key selection (ε and δ split over the windows).

        With ``max_candidates_per_unit="auto"``, ``bound_share`` of the window's ε chooses the
        bound (pure ε-DP) and the key selection runs at the rest with the window's δ: the two
        compose to the window's (ε, δ).
        """
        name, epsilon, delta = self.resolve()
        # (ε, δ)-DP releases compose by basic composition over the windows a unit reaches.
        whole = ResolvedBudget(name, epsilon, None, "partition_selection", delta=delta)
        one = split_share(whole, windows_per_unit=windows_per_unit)
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


def key_selection_plan(
    selection: KeySelection,
    *,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
    top: SelectionSpec | None,
) -> tuple[Plan, KeySelectionSpec]:
    """The plan of a key selection, followed by the top-k selection ``top`` if given."""
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
    plan = Plan(
        encode=None,
        encode_fn=EncodeLabelsFn(
            {
                "unit_column": unit_column,
                "unit_ids": options.unit_ids,
                "candidate_column": candidate_column,
                "on_bad_record": options.on_bad_record,
                "source": "input",
            }
        ),
        combine_fn=fn,
        bounds=bounds,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
        graph=graph,
    )
    return plan, spec


def _expand_auto_candidates(
    pcoll: PCollection, plan: Plan, *, auto: AutoBoundSpec, fn: AutoKeySelectionFn
) -> PCollection:
    """``max_candidates_per_unit="auto"``: the graph of ``max_contributions="auto"``.

    After bounding (one row per distinct (unit, label), at most the cap per unit) a unit's
    rows are its distinct labels: their histogram per unit (one count per unit) feeds one
    exact choice per window, every unit keeps a uniform sample of the chosen number of its
    labels, and the key selection (and the top-k after it) runs at that bound.
    """
    return expand_auto_bound(pcoll, plan, fn, auto, fn, release=release_selection_at_choice)


def top_after_key_selection(
    selection: KeySelection,
    *,
    candidate_column: str,
    unit_column: str | None,
    options: CommonOptions,
) -> Built:
    """The plan of ``TopCandidates.Globally(candidates=None, key_selection=...)``."""
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
        budget=split_share(budget, windows_per_unit=windows),
        statistic="top_candidates",
        options=options,
        bounds=bounds,
    )
    plan, spec = key_selection_plan(
        selection,
        candidate_column=candidate_column,
        unit_column=unit_column,
        options=options,
        top=top,
    )
    display = describe(
        top, labels=None, bounds=plan.bounds, keys=KeyOptions(), epsilon_total=budget.epsilon
    )
    display.update(
        num_candidates="selected from the data",
        key_selection_epsilon=spec.epsilon,
        key_selection_delta=spec.delta,
        max_candidates_per_unit="auto" if selection.auto() else spec.max_candidates_per_unit,
    )
    return Built(
        plan,
        release_name=budget.name,
        keys_per_unit=1,
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
        shares=(*options.shares(), *selection.shares()),
        # the selected labels always; the top-k among them only if some label was selected
        releases=((spec.name, False), (budget.name, True)),
    )


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
            unit_column: the privacy-unit field (default None: then ``record_level=True`` is
                required).
            record_level: True for record-level privacy without a unit column (each record
                is its own unit, holds one label, and ``max_candidates_per_unit`` is 1).
            unit_ids: how unit ids are read (``"normalize"`` or ``"exact"``; see
                :class:`~beam_dp.beam.options.PrivateOptions`).
            epsilon: a float, or a ``BudgetShare`` of mechanism ``"partition_selection"``.
            delta: > 0 (required); taken from the share when one is given.
            max_candidates_per_unit: distinct labels kept per unit (enforced), or ``"auto"``:
                chosen privately per window (see :class:`KeySelection`).
            name: release name (default ``"candidate_selection"``).
            bound_share, bound_cap, bound_alpha: with ``"auto"``, as in :class:`KeySelection`.
            confidence: confidence level of the accuracy fields.
            num_shards, salt, on_bad_record, rng: as in ``TopCandidates.Globally``.
            max_windows_per_unit: on windowed input, the windows a unit keeps rows in
                (enforced); each window's selection runs at ``(ε / w, δ / w)``.
        """

        NAMESPACE = "SelectCandidates"
        VARIANT = "Globally"

        def __init__(
            self,
            *,
            candidate_column: str,
            unit_column: str | None = None,
            epsilon: EpsilonLike,
            delta: float | None = None,
            max_candidates_per_unit: int | Literal["auto"] = 1,
            name: str | None = None,
            bound_share: float | Fraction | None = None,
            bound_cap: int | None = None,
            bound_alpha: float | Fraction | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
            record_level: bool = False,
            unit_ids: UnitIds = "normalize",
        ) -> None:
            super().__init__()
            check_privacy_unit(unit_column, record_level)
            selection = KeySelection(
                epsilon,
                delta,
                max_candidates_per_unit,
                name,
                bound_share=bound_share,
                bound_cap=bound_cap,
                bound_alpha=bound_alpha,
            )
            options = CommonOptions(
                epsilon=1.0,  # unused: the key selection carries its own budget
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
                record_level=record_level,
                unit_ids=unit_ids,
            )
            plan, spec = key_selection_plan(
                selection,
                candidate_column=candidate_column,
                unit_column=unit_column,
                options=options,
                top=None,
            )
            self._finish(
                Built(
                    plan,
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
                        "privacy_unit": "record" if plan.bounds is None else "unit_column",
                    },
                    mechanism="partition_selection",
                    rounds=1,
                    shares=selection.shares(),
                )
            )
