"""Quantile and mean plan parameters: quantiles as exact decimals, checks, shared options."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import (
    MAX_QUANTILE_DENOMINATOR,
    parse_quantiles,
    plan_cells,
    plan_mean,
    plan_quantiles,
)

# ------------------------------------------------------------------------------ parameters


def test_quantiles_are_read_as_decimals_and_bounded() -> None:
    assert parse_quantiles([0.5, 0.9, Fraction(1, 7)]) == (
        Fraction(1, 2),
        Fraction(9, 10),
        Fraction(1, 7),
    )
    assert parse_quantiles([1 / 3]) == (Fraction(1, 3),)
    (near,) = parse_quantiles([0.123456789123])
    assert near.denominator <= MAX_QUANTILE_DENOMINATOR
    assert abs(near - Fraction("0.123456789123")) < Fraction(1, MAX_QUANTILE_DENOMINATOR)
    assert parse_quantiles(np.array([0.25, 0.75])) == (Fraction(1, 4), Fraction(3, 4))


@pytest.mark.parametrize(
    ("quantiles", "error", "message"),
    [
        ([], ValueError, "at least one"),
        ([0.0], ValueError, r"quantiles\[0\]"),
        ([0.5, 1.0], ValueError, r"quantiles\[1\]"),
        ([math.nan], ValueError, r"quantiles\[0\]"),
        ([True], TypeError, "bool"),
        ("0.5", TypeError, "sequence"),
        (0.5, TypeError, "sequence"),
    ],
)
def test_bad_quantiles_are_named(quantiles: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_quantiles(quantiles)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 0.0}, "'epsilon' must be > 0"),
        ({"epsilon": math.nan}, "'epsilon' must be > 0"),
        ({"epsilon": math.inf}, "'epsilon' must be > 0"),
        ({"relation": "swap"}, "'relation'"),
        ({"method": "laplace"}, "'method'"),
        ({"split": "jiont"}, "'split'"),
        ({"confidence": 1.0}, "'confidence'"),
        ({"max_contributions": 0}, "'max_contributions'"),
        ({"num_candidates": 0}, "'num_candidates'"),
    ],
)
def test_bad_plan_parameters_are_named(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"epsilon": 1.0, "num_candidates": 10}
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        plan_quantiles([0.5], **arguments)


def test_plans_refuse_an_unknown_option_before_anything_runs() -> None:
    # The options shared by every plan are declared once (PlanOptions); a typo is an error.
    grid = Grid.uniform(0.0, 1.0, 11)
    for call in (
        lambda: plan_quantiles([0.5], epsilon=1.0, num_candidates=11, max_contribution=2),
        lambda: plan_cells([0.5], epsilon=1.0, num_cells=10, relations="replace"),
        lambda: plan_mean(grid, epsilon=1.0, methods="exponential"),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()
    plan = plan_quantiles(
        [0.5], epsilon=1.0, num_candidates=11, relation="replace", max_contributions=2
    )
    assert (plan.relation, plan.max_contributions, plan.method) == (
        "replace",
        2,
        "permute_and_flip",
    )
