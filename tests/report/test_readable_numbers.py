"""Numbers a person reads (issue 40, item 4): one rule for the report and the terminal.

A value prints at its grid's resolution (a decimal grid: its decimals; a float grid: the
decimals that tell neighbouring grid points apart), ε and shares as short decimals, and the
terminal table wraps a long cell instead of cutting it with ``...``. The exact values stay in
``release.json``'s numbers.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.release import ReleaseInterval, make_release, release_document
from beam_dp.report import render_report
from beam_dp.report.formatting import (
    format_number,
    format_share,
    grid_decimals,
    separating_decimals,
)
from pipelines.summary import print_summary

# the issue's grids: 10^6 points over [0, 3558.388558388559] and over [0, 100]
UPPER = 3558.388558388559
STEP = UPPER / 999_999
FINE_STEP = 100 / 999_999  # 0.0001000001...


def _point(index: int, step: float = STEP) -> float:
    return index * step


@pytest.mark.parametrize(
    ("value", "step", "shown"),
    [
        (1918.261918261918, STEP, "1918.262"),
        (0.0, STEP, "0.000"),
        (UPPER, STEP, "3558.389"),
        (54.32109876543, FINE_STEP, "54.32110"),
        (70.30000000000001, 0.1, "70.3"),  # a decimal grid: its decimals
        (12.5, 0.01, "12.50"),  # cents: 2 decimals
        (1200.0, 1.0, "1200"),  # integers as integers
        (7.5, 5.0, "7.5"),  # a grid offset by half a step keeps its digit
    ],
)
def test_a_value_prints_at_its_grid_resolution(value: float, step: float, shown: str) -> None:
    assert format_number(value, step) == shown


def test_neighbouring_points_of_a_float_grid_print_differently() -> None:
    for step in (STEP, FINE_STEP, 1 / 3, 2.0 / 7.0, 1234.5678):
        for start in (0, 17, 539_075, 999_990):
            shown = [format_number(_point(i, step), step) for i in range(start, start + 9)]
            assert len(set(shown)) == len(shown), (step, shown)
            assert all(len(text.replace("-", "").replace(".", "")) <= 15 for text in shown)
    assert grid_decimals(FINE_STEP) is None  # a float grid, not "10 decimals"
    assert separating_decimals(FINE_STEP) == 5 and separating_decimals(STEP) == 3


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1 / 3, "0.333"), (2 / 3, "0.667"), (0.5, "0.5"), (2.125, "2.125"), (1e-6, "0.000001"),
     (4.0, "4"), (0.1 + 0.2, "0.3"), (FINE_STEP, "0.0001"), (None, "–")],
)  # fmt: skip
def test_epsilon_and_shares_print_as_short_decimals(value: Any, shown: str) -> None:
    assert format_share(value) == shown


def _document(step: float, value: float, lower: float, upper: float) -> dict[str, Any]:
    release = make_release(
        name="median_weight",
        statistic="median",
        value=value,
        mechanism="permute_and_flip",
        epsilon=1 / 3,
        sensitivity=0.5,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=1_000_000,
        contribution_bounds={"max_contributions_per_unit": 1},
        rounds=3,
        extra_accuracy={"rank_error": 81.6, "cell_width": step},
        interval=ReleaseInterval(
            quantiles=(0.5,),
            lower=(lower,),
            upper=(upper,),
            confidence=0.95,
            method="rank_bracket",
            epsilon=1 / 9,
            share=1 / 3,
            scalar=True,
        ),
    )
    budget = PrivacyBudget(3.0)
    budget.spend("median_weight", mechanism="permute_and_flip", epsilon=1 / 3)
    budget.record(release.ledger)
    return release_document([release], budget.to_json())


def test_the_report_prints_the_issues_numbers_at_the_grids_resolution() -> None:
    page = render_report(_document(STEP, 1918.261918261918, 0.0, UPPER))
    noises = ("1918.261918261918", "0.000000000000", "3558.388558388559", "0.333333", "0.11111")
    for noise in noises:
        assert noise not in page, noise
    assert "1918.262 [0.000, 3558.389]" in page
    assert "ε 0.111 of the release" in page and "ε 0.333 spent of 3" in page
    fine = render_report(_document(FINE_STEP, 54.32109876543, 54.3, 54.4))
    assert "grid step 0.0001000001" not in fine and "grid step 0.0001<" in fine
    assert "54.32110 [54.30000, 54.40000]" in fine


def _terminal(document: dict[str, Any]) -> str:
    out = io.StringIO()
    print_summary(document, file=out)
    return out.getvalue()


def test_the_terminal_tells_neighbouring_grid_points_apart() -> None:
    # 2868.9145 and its neighbour 2868.9181 printed "2868.91" both (6 significant digits)
    below, above = _point(806_209), _point(806_210)
    shown = {
        re.search(r"median_weight\s+(\S+)", _terminal(_document(STEP, v, 0.0, UPPER)))[1]  # type: ignore[index]
        for v in (below, above)
    }
    assert shown == {format_number(below, STEP), format_number(above, STEP)}
    assert len(shown) == 2
    text = _terminal(_document(STEP, below, 0.0, UPPER))
    assert "epsilon 0.333 of 3 spent" in text


def test_the_terminal_wraps_a_long_value_and_never_cuts_it() -> None:
    document = _document(STEP, 1.0, 0.0, 1.0)
    release = document["releases"][0]
    release["value"] = [_point(539_075 + 9_973 * i) for i in range(12)]
    release["interval"] = None
    text = _terminal(document)
    assert "..." not in text
    table = text.split("\n\n", 1)[0]
    joined = " ".join(table.split())
    for value in release["value"]:
        assert format_number(value, STEP) in joined  # every value whole, in order
    assert max(len(line) for line in table.splitlines()) <= 120
