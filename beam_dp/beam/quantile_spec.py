"""The public half of a quantile transform: its plan, its budget split and its auto-bound spec.

What :class:`~beam_dp.beam.quantiles.PrivateQuantiles` and its siblings compute at
construction, before any data is read, from the public options only
(:class:`~beam_dp.beam.quantile_options.ValueParams`): the rounds of the recursive split (from
the quantiles and the split alone), the budget share and its split over keys and windows
(:meth:`~beam_dp.beam.options.KeyOptions.split`), the selection plan (one pass, or the coarse
and fine passes of ``refine=True``), and with ``max_contributions="auto"`` the split between the
bound choice and the statistic with a plan per candidate bound.

**Privacy**: nothing here reads data. Each release's epsilon (or rho) is what its budget share
gives one key and window. Coarse to fine spends ``refine_fraction`` of it on the coarse cells
and the rest on the fine candidates (basic composition). With ``"auto"``, the choice of the
bound and the statistic share the release's epsilon by ``bound_share``
(:func:`~beam_dp.summaries.contribution_bounds.split_epsilon`); the choice's sensitivity is
multiplied by the ``m`` keys a unit reaches, since each unit holds ``m`` of the counts it
selects on; under zCDP the statistic keeps ``1 - bound_share`` of the epsilon and the choice
gets the rest of the ``m`` keys' rho, at the largest epsilon that rest pays for (rounded down).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from beam_dp._validation import check_positive_int, check_probability_open
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho
from beam_dp.beam.options import ResolvedBudget, split_share
from beam_dp.beam.plan import Built
from beam_dp.beam.quantile_combiners import (
    AutoBoundSpec,
    KeyShare,
    QuantileCombineFn,
    QuantileSpec,
)
from beam_dp.beam.quantile_options import ValueParams
from beam_dp.summaries.contribution_bounds import split_epsilon
from beam_dp.summaries.histogram import MAX_GRID_POINTS
from beam_dp.summaries.quantiles import (
    DEFAULT_REFINE_FRACTION,
    DEFAULT_SPLIT,
    MeanPlan,
    QuantilePlan,
    parse_quantiles,
    plan_cells,
    plan_quantiles,
    quantile_rounds,
)

__all__ = ["auto_bound_spec", "build_quantiles"]


def build_quantiles(
    values: ValueParams,
    quantiles: object,
    *,
    statistic: str,
    scalar: bool,
    split: str = DEFAULT_SPLIT,
    refine: bool = False,
    refine_fraction: float = DEFAULT_REFINE_FRACTION,
    refine_points: int | None = None,
) -> tuple[Built, QuantileSpec]:
    """The plan and spec of a quantile transform from its public options (see the module doc)."""
    common, the_grid = values.common, values.grid
    parsed = parse_quantiles(quantiles)
    if not isinstance(refine, bool):
        raise TypeError(f"'refine' must be a bool; received {refine!r}")
    distinct = len(set(parsed))
    fine_points = 0
    if refine:
        check_probability_open(refine_fraction, "refine_fraction")
        fine_points = the_grid.num_points if refine_points is None else refine_points
        check_positive_int(fine_points, "refine_points")
        if fine_points < 2 or distinct * fine_points > MAX_GRID_POINTS:
            raise ValueError(
                f"'refine_points' must be >= 2 and at most {MAX_GRID_POINTS:,} divided by "
                f"the number of quantiles ({distinct}); received {fine_points!r}"
            )
    elif refine_points is not None:
        raise ValueError("'refine_points' applies only with refine=True")
    rounds = quantile_rounds(parsed, split)  # the quantiles and the split decide them
    budget = common.budget(statistic, rounds=rounds)
    share = values.keys.split(budget, values.record_level, values.windows)
    per_key_epsilon = Fraction(share.epsilon)
    options: dict[str, Any] = {
        "relation": common.relation,
        "max_contributions": values.max_contributions,
        "method": common.method,
        "split": split,
        "confidence": common.confidence,
    }
    cell_plan = None
    auto: AutoBoundSpec | None = None
    if refine and values.auto is not None:
        option = "max_contributions" if values.auto.target == "rows" else "max_keys_per_unit"
        raise ValueError(
            f"{option}='auto' does not combine with refine=True yet; give an integer "
            f"{option} or leave refine off"
        )
    if refine:
        beta = (1.0 - common.confidence) / 2
        coarse_epsilon = per_key_epsilon * Fraction(refine_fraction)
        cell_plan = plan_cells(
            parsed,
            epsilon=coarse_epsilon,
            num_cells=the_grid.num_points - 1,
            relation=common.relation,
            max_contributions=values.max_contributions,
            method=common.method,
            failure_probability=beta,
        )
        plan = plan_quantiles(
            parsed,
            epsilon=per_key_epsilon - coarse_epsilon,
            num_candidates=distinct * fine_points,
            failure_probability=beta,
            **options,
        )
    elif values.auto is not None:

        def plan_at(bound: int, epsilon: Fraction) -> QuantilePlan:
            return plan_quantiles(
                parsed,
                epsilon=epsilon,
                num_candidates=the_grid.num_points,
                **{**options, "max_contributions": bound},
            )

        auto = auto_bound_spec(
            values,
            share.rho,
            per_key_epsilon,
            rounds=rounds,
            plan_at=plan_at,
            window=split_share(budget, windows_per_unit=values.windows),
        )
        at_cap = auto.plans[auto.cap]
        assert isinstance(at_cap, QuantilePlan)
        plan = at_cap
    else:
        plan = plan_quantiles(
            parsed, epsilon=per_key_epsilon, num_candidates=the_grid.num_points, **options
        )
    spec = QuantileSpec(
        **values.spec_fields(budget.name, per_key_epsilon, share.rho),
        statistic=statistic,
        grid=the_grid,
        plan=plan,
        cell_plan=cell_plan,
        refine_points=fine_points,
        scalar=scalar,
        auto=auto,
    )
    rank_error = plan.rank_error + (0.0 if cell_plan is None else max(cell_plan.loss_bounds))
    display = {
        **values.display(budget.name, statistic, budget.epsilon),
        "max_contributions": "auto" if auto is not None else values.max_contributions,
        "quantiles": str([float(q) for q in parsed]),
        "split": plan.split,
        "rounds": plan.rounds,
        "refine": refine,
        "privacy_unit": "record" if values.record_level else "unit_column",
        "contribution_bounds": str(values.ledger_bounds()),
        "rank_error_bound": rank_error,
    }
    if values.keys.keys is not None:
        display["epsilon_per_key"] = float(per_key_epsilon)
    built = Built(
        values.plan(QuantileCombineFn(spec)),
        release_name=budget.name,
        keys_per_unit=values.keys_per_unit,
        display=display,
        mechanism=common.method,
        rounds=rounds,
        shares=common.shares(),
    )
    return built, spec


def _choice_split(
    values: ValueParams,
    rho: float | None,
    key_epsilon: Fraction,
    *,
    rounds: int,
    counts_per_unit: int,
) -> tuple[Fraction, KeyShare]:
    """``(choice_epsilon, key share)``: one key's epsilon split between its part of the one
    bound choice and its statistic, the choice charged to the ``counts_per_unit`` keys' parts.

    Basic composition: the choice gets ``share`` of each key's epsilon, times the keys.
    zCDP: the statistic runs at ``(1 - share)`` of the key's epsilon and costs
    ``rate * eps_s^2 / rounds``; the choice gets the rest of the rho of each key a unit
    reaches: ``rate * eps_b^2 <= counts_per_unit * (rho - that cost)``.
    """
    auto = values.auto
    assert auto is not None
    bound_epsilon, statistic_epsilon = split_epsilon(key_epsilon, auto.share)
    bound_rho = statistic_rho = None
    choice_epsilon = bound_epsilon * counts_per_unit
    if rho is not None:
        rate = ZCDP_RATE[privacy_kind(values.common.method)]
        statistic_rho = rate * statistic_epsilon**2 / rounds
        bound_rho = Fraction(rho) - statistic_rho
        if bound_rho <= 0:  # pragma: no cover - rho >= rate * eps^2 / rounds by construction
            raise ValueError("the zCDP share leaves nothing for the bound choice")
        choice_epsilon = Fraction(
            epsilon_per_round_for_rho(float(bound_rho * counts_per_unit), rate, 1)
        )
        while rate * choice_epsilon**2 > bound_rho * counts_per_unit:  # float rounding
            choice_epsilon = Fraction(math.nextafter(float(choice_epsilon), 0.0))
        bound_epsilon = choice_epsilon / counts_per_unit
    share = KeyShare(
        key_epsilon=key_epsilon,
        bound_epsilon=bound_epsilon,
        statistic_epsilon=statistic_epsilon,
        bound_rho=bound_rho,
        statistic_rho=statistic_rho,
        key_rho=None if rho is None else Fraction(rho),
    )
    return choice_epsilon, share


def auto_bound_spec(
    values: ValueParams,
    rho: float | None,
    key_epsilon: Fraction,
    *,
    rounds: int,
    plan_at: Callable[[int, Fraction], QuantilePlan | MeanPlan],
    window: ResolvedBudget | None = None,
) -> AutoBoundSpec:
    """The public half of an ``"auto"`` bound: the epsilon split and a plan per candidate.

    Args:
        values: the statistic's value options (``values.auto`` set).
        rho: each key's rho under zCDP, else None.
        key_epsilon: each release's epsilon (one key's, after the split over keys).
        rounds: the statistic's rounds (its zCDP cost is ``rate * eps^2 / rounds``).
        plan_at: the statistic's plan at a row bound and an epsilon (quantiles or mean).
        window: with ``max_keys_per_unit="auto"``, the budget of one window (before the split
            over keys): each candidate ``K`` splits it over ``K`` keys
            (:func:`~beam_dp.beam.options.split_share`), and the one choice runs at the
            smallest epsilon any ``K`` leaves it, so every ``K``'s account covers it.
    """
    auto = values.auto
    assert auto is not None
    if auto.target == "rows":
        choice_epsilon, share = _choice_split(
            values, rho, key_epsilon, rounds=rounds, counts_per_unit=values.keys_per_unit
        )
        per_bound = None
        plans = {bound: plan_at(bound, share.statistic_epsilon) for bound in auto.candidates}
    else:
        if window is None:
            raise ValueError("max_keys_per_unit='auto' needs the window's budget")
        per_bound = {}
        choices = []
        for bound in auto.candidates:
            key_budget = split_share(window, keys_per_unit=bound)
            choice, per_bound[bound] = _choice_split(
                values,
                key_budget.rho,
                Fraction(key_budget.epsilon),
                rounds=rounds,
                counts_per_unit=bound,
            )
            choices.append(choice)
        choice_epsilon = min(choices)
        share = per_bound[auto.candidates[-1]]
        plans = {
            bound: plan_at(values.max_contributions, per_bound[bound].statistic_epsilon)
            for bound in auto.candidates
        }
    return AutoBoundSpec(
        candidates=auto.candidates,
        cap=auto.candidates[-1],
        rule=auto.rule,
        alpha=auto.alpha,
        # Each of the unit's keys spends its share on the one choice.
        choice_epsilon=choice_epsilon,
        key_epsilon=share.key_epsilon,
        bound_epsilon=share.bound_epsilon,
        statistic_epsilon=share.statistic_epsilon,
        counts_per_unit=values.keys_per_unit if auto.target == "rows" else 1,
        method=values.common.method,
        relation=values.common.relation,
        plans=plans,
        bound_rho=share.bound_rho,
        statistic_rho=share.statistic_rho,
        target=auto.target,
        per_bound=per_bound,
    )
