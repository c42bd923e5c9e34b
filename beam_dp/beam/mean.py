"""A private mean on Beam: noisy sums (default), or a selection over a public grid.

``PrivateMean.Globally`` / ``.PerKey`` release one mean per window (and key)::

    releases = batches | PrivateMean.Globally(
        lower=0.0, upper=500.0, epsilon=1.0, unit_column="user_id", value_column="amount")

Read top to bottom: the options (:class:`MeanOptions`), the spec of a release
(:class:`MeanSpec`), the combiner (:class:`MeanCombineFn`: the exact sum and count of the
clamped values; ``extract_output`` runs :func:`~beam_dp.summaries.quantiles.mean.release_mean`:
exact discrete Laplace noise on the centred sum and the count, or the exact selection), the
construction and the transforms. What
every grid statistic shares is :mod:`beam_dp.beam._grid`; the construction path
:mod:`beam_dp.beam._transform`.

Privacy: epsilon-DP under ``relation``, the sensitivities from
:func:`~beam_dp.summaries.quantiles.plan_mean`; only the mean is released, with
``value_error`` (``replace``) or ``sum_error`` and ``count_error`` (``add_remove``)
(:func:`beam_dp.release.mean_statement`). Units, keys and windows: ``docs/privacy_rules.md``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Unpack

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection

from beam_dp.beam._grid import (
    AutoBoundSpec,
    GridReleaseSpec,
    auto_bound_spec,
    expand_auto_bound,
    merge_into_first,
    take_grid_options,
    values_of,
)
from beam_dp.beam._transform import (
    Built,
    GridOptions,
    PerKeyOptions,
    PrivateOptions,
    PrivateTransform,
    divide_budget,
    resolve_budget,
)
from beam_dp.release import Release, bound_notes, mean_statement
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles.mean import (
    DEFAULT_MEAN_ESTIMATOR,
    MEAN_ESTIMATORS,
    MEAN_RESOLUTION,
    MeanEstimator,
    MeanPlan,
    MeanSelection,
    NoisyMean,
    plan_mean,
    release_mean,
)

__all__ = [
    "DEFAULT_NUM_POINTS",
    "MeanCombineFn",
    "MeanOptions",
    "MeanPerKeyOptions",
    "MeanSpec",
    "PrivateMean",
    "grid_error",
]

#: Default grid size of the mean (uniform over ``[lower, upper]``).
DEFAULT_NUM_POINTS = 10_000


# ------------------------------------------------------------------------------- options


class _MeanArgs(GridOptions, total=False):
    """The mean's own options.

    Attributes:
        n: the public number of values (``relation="replace"`` only; per key for ``.PerKey``).
        estimator: ``"noisy_sums"`` (default) or ``"selection"`` (the grid selection).
        sum_share: the sum's share of epsilon (``"noisy_sums"`` under ``add_remove``).
    """

    n: int | None
    estimator: MeanEstimator
    sum_share: float


class MeanOptions(_MeanArgs, PrivateOptions, total=False):
    """Keyword options of ``PrivateMean.Globally`` (``epsilon``: ``rounds=1``)."""


class MeanPerKeyOptions(_MeanArgs, PerKeyOptions, total=False):
    """Keyword options of ``PrivateMean.PerKey``."""


# ---------------------------------------------------------------------------------- the spec


@functools.lru_cache(maxsize=8)
def grid_error(grid: Grid) -> float:
    """The farthest any point of ``[lower, upper]`` is from its nearest grid point (public).

    The statistic a mean estimates lies in ``[lower, upper]``, so the best grid point is at
    most this far from it: the grid-resolution part of the mean's ``value_error``.
    """
    points = grid.points
    ends = max(float(points[0]) - grid.lower, grid.upper - float(points[-1]))
    inner = float(np.max(np.diff(points))) / 2.0 if points.size > 1 else 0.0
    return max(ends, inner)


@dataclass(frozen=True, kw_only=True)
class MeanSpec(GridReleaseSpec):
    """Everything a mean release needs after the merge (public; fixed at construction)."""

    plan: MeanPlan

    def release_merged(self, accumulator: ExactSum) -> Release:
        return self.release(release_mean(accumulator, self.plan, rng=self.rng))

    def release(self, selection: MeanSelection | NoisyMean) -> Release:
        if isinstance(selection, NoisyMean):
            return self._release_noisy(selection)
        return self.record(
            selection,
            statistic="mean",
            value=selection.value,
            mechanism=self.plan.method,
            notes=bound_notes(
                [("the mean", selection.value)],
                lower=self.plan.grid.lower,
                upper=self.plan.grid.upper,
            ),
            extra_accuracy={
                "score_loss": selection.score_loss,
                "cell_width": selection.cell_width,
            },
            statement=mean_statement(
                relation=self.relation,
                score_loss=selection.score_loss,
                # One step of the integer scores (they are rounded down to it).
                rounding_error=float(self.plan.sensitivity) / MEAN_RESOLUTION,
                grid_error=grid_error(self.plan.grid),
                confidence=self.confidence,
                n=self.plan.n,
            ),
        )

    def _release_noisy(self, released: NoisyMean) -> Release:
        plan = self.plan
        step = float(plan.step)
        if plan.n is not None:  # replace: the centred sum over the public n
            noise, rounding, count_error = plan.sum_bound * step / plan.n, step / (2 * plan.n), None
        else:  # add_remove: the sum's noise and the count's, in value units x rows
            half_width = (plan.grid.upper - plan.grid.lower) / 2
            noise = plan.sum_bound * step + half_width * plan.count_bound
            rounding, count_error = step / 2, plan.count_bound
        return self.record(
            released,
            statistic="mean",
            value=released.value,
            mechanism="laplace",
            notes=bound_notes(
                [("the mean", released.value)], lower=plan.grid.lower, upper=plan.grid.upper
            ),
            extra_accuracy={"score_loss": plan.score_loss, "step": step},
            statement=mean_statement(
                relation=self.relation,
                score_loss=noise,
                rounding_error=rounding,
                grid_error=0.0,
                confidence=self.confidence,
                n=plan.n,
                count_error=count_error,
            ),
        )


# ----------------------------------------------------------------------------- the combiners


class MeanCombineFn(beam.CombineFn):
    """Exact sum and count of the clamped values; ``extract_output`` releases the mean."""

    def __init__(self, spec: MeanSpec) -> None:
        super().__init__()
        self._spec = spec

    def create_accumulator(self) -> ExactSum:
        grid = self._spec.plan.grid
        return ExactSum(grid.lower, grid.upper)

    def add_input(self, accumulator: ExactSum, element: Any) -> ExactSum:
        values = values_of(element)
        if values.size:
            accumulator.add(values)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[ExactSum]) -> ExactSum:
        return merge_into_first(accumulators)

    def extract_output(self, accumulator: ExactSum) -> Release:
        return self._spec.release_merged(accumulator)

    def display_data(self) -> dict[str, Any]:
        return {"statistic": "mean", "grid": repr(self._spec.plan.grid)}


class AutoMeanCombineFn(MeanCombineFn):
    """:class:`MeanCombineFn` whose output is the merged exact sum, released later by
    :func:`release_at_choice` at the chosen bound (as :class:`AutoQuantileCombineFn`)."""

    def extract_output(self, accumulator: ExactSum) -> ExactSum:  # type: ignore[override]
        return accumulator


# ---------------------------------------------------------------------------- the transforms


def _build_mean(
    variant: PrivateTransform, own: Mapping[str, Any], shared: Mapping[str, Any]
) -> Built:
    """A mean transform from its keywords (:meth:`PrivateTransform._build`): the plan (one per
    candidate bound with ``"auto"``) and the epsilon of every release, before any data."""
    values, specific = take_grid_options(variant, own, shared, DEFAULT_NUM_POINTS)
    estimator = specific.get("estimator", DEFAULT_MEAN_ESTIMATOR)
    if estimator not in MEAN_ESTIMATORS:
        raise ValueError(
            f"'estimator' must be one of {list(MEAN_ESTIMATORS)}; received {estimator!r}"
        )
    mechanism: str = values.options.method
    if estimator == "noisy_sums":
        # Discrete Laplace is pure epsilon-DP: its budget (and its division over keys and
        # windows under zCDP, at epsilon^2 / 2) is a "laplace" one, and an "auto" bound choice
        # runs permute-and-flip, pure as well, so both compose at the one rate.
        mechanism = "laplace"
        values = dataclasses.replace(
            values, options=dataclasses.replace(values.options, method="permute_and_flip")
        )
    options = values.options
    budget = resolve_budget(
        options.epsilon, name=options.name, default_name="mean", mechanism=mechanism, rounds=1
    )
    release = options.per_release(budget, values.record_level)  # one key in one window
    epsilon = Fraction(release.epsilon)

    def plan_at(bound: int, statistic_epsilon: Fraction) -> MeanPlan:
        return plan_mean(
            values.grid,
            epsilon=statistic_epsilon,
            relation=options.relation,
            n=specific.get("n"),
            max_contributions=bound,
            method=options.method,
            confidence=options.confidence,
            estimator=estimator,
            sum_share=specific.get("sum_share"),
        )

    auto: AutoBoundSpec | None = None
    if values.auto is not None:
        window = divide_budget(budget, windows_per_unit=options.max_windows_per_unit)
        auto = auto_bound_spec(
            values, release.rho, epsilon, rounds=1, plan_at=plan_at, window=window
        )
        at_cap = auto.plans[auto.cap]
        assert isinstance(at_cap, MeanPlan)
        plan = at_cap
    else:
        plan = plan_at(values.max_contributions, epsilon)
    spec = MeanSpec(**values.spec_fields(release), plan=plan, auto=auto)
    display = {
        **values.display(budget.name, "mean", budget.epsilon),
        "estimator": estimator,
        "max_contributions": "auto" if auto is not None else values.max_contributions,
        "privacy_unit": "record" if values.record_level else "unit_column",
        "contribution_bounds": str(values.ledger_bounds()),
    }
    return Built(
        values.wiring(MeanCombineFn(spec)),
        release_name=budget.name,
        keys_per_unit=values.keys_per_unit,
        display=display,
        mechanism=mechanism,
        rounds=1,
        shares=options.shares(),
        spec=spec,
    )


class _MeanTransform(PrivateTransform):
    """A private mean: noisy sums (default) or the exponential mechanism over a public grid.

    Args:
        **options: :class:`MeanOptions` (``.PerKey``: :class:`MeanPerKeyOptions`): the grid
            options (default uniform, 10^4 points; ``epsilon``: ``rounds=1``), plus ``n``,
            ``estimator`` and ``sum_share``.
            ``estimator="noisy_sums"`` (default): the clamped values' centred sum in a public
            integer unit plus exact discrete Laplace noise, and under ``add_remove`` the
            count plus its own (``sum_share`` of epsilon to the sum, default 0.6), the mean
            their ratio clamped to ``[lower, upper]``; under ``replace`` the public ``n`` is
            the denominator and the whole epsilon goes to the sum. Sensitivities
            ``k (upper - lower) / 2`` (sum) and ``k`` (count) under ``add_remove``,
            ``k (upper - lower)`` (sum) under ``replace``. The ledger's mechanism is
            ``"laplace"`` (pure epsilon-DP: a budget share for it names ``"laplace"``); an
            ``"auto"`` bound choice then runs permute-and-flip, whatever ``method`` says.
            No grid point is searched: the grid options only set the bounds. See
            :mod:`beam_dp.summaries.quantiles.mean` (and :mod:`beam_dp.mechanisms.noise`
            for why discrete Laplace pays no factor 2 where the selection does).
            ``estimator="selection"``: a grid point by ``method``.
            ``relation="replace"`` with the public number of values ``n`` uses the seed's
            utility ``-|mean - r|`` (sensitivity ``k (upper - lower) / n``), with the mean
            read as the centred sum ``mid + sum(x - mid) / n`` over the public ``n``: the true
            mean when ``n`` values are kept, and defined (never an error) for any other count,
            so whether the release succeeds never depends on the data. ``"add_remove"``
            (default) needs no ``n``: it uses ``-|sum(x) - N r|``, sensitivity
            ``k (upper - lower)`` (see :mod:`beam_dp.summaries.quantiles`).
            ``max_contributions="auto"`` chooses ``k`` privately as for the quantiles
            (``bound_share`` of epsilon; the mean at the rest). It removes the bias of one
            value per unit when values depend on the unit, but a larger ``k`` also scales the
            noise: measured, it is not always better than 1 (benchmarks/RESULTS.md, "Mean").

    Privacy:
        epsilon-DP under ``relation``; only the mean is released. Noisy sums:
        ``accuracy.sum_error`` and ``count_error`` bound ``|mean - output|`` by
        ``sum_error / (N - count_error)`` when ``N > count_error`` (add_remove), or
        ``value_error`` (replace). Selection: ``accuracy.score_loss`` bounds ``|mean -
        output|`` (replace) or ``|sum - N output|`` (add_remove) beyond the grid term (at
        most half a cell in the mean's units).
    """

    NAMESPACE: ClassVar[str] = "PrivateMean"
    _spec: MeanSpec

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._build(options, _build_mean)

    def _expand(self, pcoll: PCollection) -> PCollection:
        spec = self._spec
        if spec.auto is None:
            return super()._expand(pcoll)
        return expand_auto_bound(pcoll, self._wiring, spec, spec.auto, AutoMeanCombineFn(spec))


class PrivateMean:
    """A private mean: ``PrivateMean.Globally(...)`` and ``.PerKey(...)``.

    See ``_MeanTransform`` for the arguments and the two relations.
    """

    class Globally(_MeanTransform):
        """The private mean of all the values, one release per window."""

        VARIANT = "Globally"

        def __init__(self, **options: Unpack[MeanOptions]) -> None:
            super().__init__(**options)

    class PerKey(_MeanTransform):
        """The private mean per public key."""

        VARIANT = "PerKey"

        def __init__(self, **options: Unpack[MeanPerKeyOptions]) -> None:
            super().__init__(**options)
