"""Price grids of the jobs: START:STOP:STEP made with numpy exactly, read once per job."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.accounting import PrivacyBudget
from pipelines.statistics import MAX_CANDIDATES, parse_prices, spec_from_config


def _decimal_loop(spec: str) -> list[float]:
    """The grid price by price in exact decimals (the reference)."""
    start, stop, step = (Decimal(part) for part in spec.split(":"))
    count = int((stop - start) / step)
    return [float(p) for p in (start + i * step for i in range(count + 1)) if p < stop]


@pytest.mark.parametrize(
    "spec",
    [
        "0.01:2.00:0.01",
        "0.1:1:0.07",
        "0.001:5:0.0007",
        "1:100000:1",
        "3:4:0.3333333",
        "1e-3:2e-1:1e-3",
        "0.5:0.5000001:0.00000001",
        "0.01:10000:0.01",
        "5:7:2",
    ],
)
def test_grid_is_the_nearest_float_of_each_decimal(spec: str) -> None:
    assert parse_prices(spec) == _decimal_loop(spec)


@given(
    start=st.decimals(min_value="0.0001", max_value="1000", places=4),
    step=st.decimals(min_value="0.0001", max_value="10", places=4),
    count=st.integers(min_value=1, max_value=300),
)
def test_grid_matches_exact_decimals(start: Decimal, step: Decimal, count: int) -> None:
    spec = f"{start}:{start + step * count}:{step}"
    assert parse_prices(spec) == _decimal_loop(spec)


def test_a_million_prices_are_accepted_and_ten_million_refused_naming_the_limit() -> None:
    assert len(parse_prices("0.01:10000.01:0.01")) == MAX_CANDIDATES
    with pytest.raises(ValueError, match="more than the 1,000,000"):
        parse_prices("0.01:100000:0.01")


@pytest.mark.parametrize("spec", ["0.01:inf:0.01", "nan:2:0.01", "0.01:2:Infinity"])
def test_non_finite_bounds_are_refused_in_our_words(spec: str) -> None:
    with pytest.raises(ValueError, match="finite START, STOP and STEP"):
        parse_prices(spec)


def test_check_and_transform_share_one_grid() -> None:
    spec = spec_from_config(
        {"name": "price", "type": "best_price", "value": "wtp", "prices": "0.01:1000:0.01"}
    )
    options = {"unit_column": "u", "relation": "add_remove", "on_bad_record": "fail"}
    spec.check(**options)
    budget = PrivacyBudget(1.0)
    spec.request(budget)
    budget.finalize()
    transform = spec.transform(**options)
    grid = spec._grid
    assert grid is not None and grid.num_candidates == 99_999
    fn = transform._wiring.combine_fn
    assert np.shares_memory(fn._thresholds, grid.thresholds)  # read once, not per build
    assert spec.params["prices"] == parse_prices("0.01:1000:0.01")  # the config is untouched
