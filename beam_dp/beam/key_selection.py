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

from dataclasses import dataclass

from beam_dp.accounting import BudgetShare
from beam_dp.batching import (
    ContributionBounds,
)
from beam_dp.beam.key_selection_combiners import EncodeLabelsFn, KeySelectionFn, KeySelectionSpec
from beam_dp.beam.options import (
    CommonOptions,
    EpsilonLike,
    KeyOptions,
    ResolvedBudget,
    check_column,
    split_share,
)
from beam_dp.beam.plan import Built, Plan, PrivateTransform
from beam_dp.beam.selection_spec import SelectionSpec, describe
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.partition_selection import (
    check_key_selection,
)
from beam_dp.scores import DistinctUnitCount

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
            every record is its own unit).
        name: release name (default ``"candidate_selection"``; a share's name otherwise).

    Privacy:
        (epsilon, delta)-DP under add/remove. Composed with the selection that follows by basic
        composition: the two releases together cost (key selection ε + selection ε, delta).
        On windowed input with ``max_windows_per_unit = w`` (an argument of the transform),
        each window's key selection runs at ``(epsilon / w, delta / w)`` (basic composition
        over the ``w`` windows a unit reaches).
    """

    epsilon: EpsilonLike
    delta: float | None = None
    max_candidates_per_unit: int = 1
    name: str | None = None

    def __post_init__(self) -> None:
        self.resolve()

    def resolve(self) -> tuple[str, float, float]:
        """``(name, epsilon, delta)``, validated."""
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
            check_key_selection(share.epsilon, share.delta, self.max_candidates_per_unit)
            return share.name, float(share.epsilon), float(share.delta)
        check_key_selection(self.epsilon, self.delta, self.max_candidates_per_unit)
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
        """The parameters of one window's key selection (ε and δ split over the windows)."""
        name, epsilon, delta = self.resolve()
        # (ε, δ)-DP releases compose by basic composition over the windows a unit reaches.
        whole = ResolvedBudget(name, epsilon, None, "partition_selection", delta=delta)
        one = split_share(whole, windows_per_unit=windows_per_unit)
        assert one.delta is not None
        return KeySelectionSpec(
            name=name,
            epsilon=one.epsilon,
            delta=one.delta,
            max_candidates_per_unit=1 if record_level else self.max_candidates_per_unit,
            confidence=confidence,
            rng=rng,
            max_windows_per_unit=windows_per_unit,
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
    plan = Plan(
        encode=None,
        encode_fn=EncodeLabelsFn(
            {
                "unit_column": unit_column,
                "candidate_column": candidate_column,
                "on_bad_record": options.on_bad_record,
                "source": "input",
            }
        ),
        combine_fn=KeySelectionFn(spec, top, candidate_column),
        bounds=bounds,
        num_shards=options.num_shards,
        salt=options.salt,
        max_windows_per_unit=windows,
    )
    return plan, spec


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
    per_unit = 1 if unit_column is None else selection.max_candidates_per_unit
    windows = options.windows_per_unit(unit_column is None)
    bounds = {
        "max_candidates_per_unit": per_unit,
        "distinct_candidates": 1,
        "max_windows_per_unit": windows,
    }
    if unit_column is None:
        bounds["record_level_privacy"] = 1
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
        max_candidates_per_unit=spec.max_candidates_per_unit,
    )
    return Built(
        plan,
        release_name=budget.name,
        keys_per_unit=1,
        display=display,
        mechanism=options.mechanism,
        rounds=options.k,
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
            unit_column: the privacy-unit field; None for record-level privacy (each unit
                then holds one label and ``max_candidates_per_unit`` is 1).
            epsilon: a float, or a ``BudgetShare`` of mechanism ``"partition_selection"``.
            delta: > 0 (required); taken from the share when one is given.
            max_candidates_per_unit: distinct labels kept per unit (enforced).
            name: release name (default ``"candidate_selection"``).
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
            unit_column: str | None,
            epsilon: EpsilonLike,
            delta: float | None = None,
            max_candidates_per_unit: int = 1,
            name: str | None = None,
            confidence: float = 0.95,
            num_shards: int = 32,
            salt: int | None = None,
            on_bad_record: str = "fail",
            rng: RandomSource | None = None,
            max_windows_per_unit: int = 1,
        ) -> None:
            super().__init__()
            selection = KeySelection(epsilon, delta, max_candidates_per_unit, name)
            options = CommonOptions(
                epsilon=1.0,  # unused: the key selection carries its own budget
                confidence=confidence,
                num_shards=num_shards,
                salt=salt,
                on_bad_record=on_bad_record,
                rng=rng,
                max_windows_per_unit=max_windows_per_unit,
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
                        "max_candidates_per_unit": spec.max_candidates_per_unit,
                        "max_windows_per_unit": spec.max_windows_per_unit,
                        "privacy_unit": "record" if plan.bounds is None else "unit_column",
                    },
                    mechanism="partition_selection",
                    rounds=1,
                )
            )
