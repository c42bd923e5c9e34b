"""``max_candidates_per_unit="auto"`` in DP key selection (``KeySelection``,
``SelectCandidates``): there the bound sets the threshold, so a chosen one pays off. The
wiring (one count of distinct labels per unit, the budget split), the release at the chosen
bound, the ledger, the exact pmf of the choice over neighbours, and the refusals."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from choice_helpers import spy_on_choices, worst_loss_over_one_count

from beam_dp.beam.key_selection import KeySelection, SelectCandidates
from beam_dp.beam.selection import TopCandidates
from beam_dp.mechanisms.partition_selection import key_selection_threshold
from beam_dp.release import ledger_entries_to_record


@pytest.fixture
def run(collect: Any) -> Any:
    """``run(build)``: the releases ``build(pipeline)`` outputs (in-process runner)."""
    return lambda build: [element for element, _ in collect(build)]


def _sites(seed: int = 0) -> list[pa.RecordBatch]:
    """4 000 people naming 1-3 of 30 sites (popular ones more often), 1-3 rows per site."""
    rng = np.random.default_rng(seed)
    users, sites = [], []
    weights = np.arange(30, 0, -1) / 465
    for user in range(4000):
        for site in rng.choice(30, size=int(rng.integers(1, 4)), replace=False, p=weights):
            for _ in range(int(rng.integers(1, 4))):
                users.append(user)
                sites.append(f"site{site}")
    order = rng.permutation(len(users))
    columns = {"user": np.array(users), "site": np.array(sites)}
    return [
        pa.record_batch({name: column[order[i : i + 700]] for name, column in columns.items()})
        for i in range(0, len(users), 700)
    ]


def test_auto_chooses_the_labels_per_unit_and_the_threshold_follows_it(
    run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    seen = spy_on_choices(monkeypatch, tmp_path / "spy")
    batches = _sites()
    transform = SelectCandidates.Globally(
        candidate_column="site",
        unit_column="user",
        epsilon=1.0,
        delta=1e-6,
        max_candidates_per_unit="auto",
        bound_cap=64,
    )
    (release,) = run(lambda p: p | beam.Create(batches) | transform)
    ((counts, kwargs),) = seen()
    assert counts.size == 65 and counts.sum() == 4000  # one count per person
    assert counts[1:4].sum() == 4000 and counts[4:].sum() == 0  # 1-3 distinct sites each
    assert kwargs["counts_per_unit"] == 1
    # bound_share of the window's epsilon, rounded down to a float
    assert Fraction(1, 10) - Fraction(1, 10**15) < kwargs["epsilon"] <= Fraction(1, 10)
    bounds = release.ledger.contribution_bounds
    assert bounds["max_candidates_per_unit"] == 4 and bounds["max_candidates_cap"] == 64
    assert release.ledger.epsilon == 1.0 and release.ledger.delta == 1e-6
    accuracy = release.ledger.accuracy
    assert accuracy["epsilon_bound_choice"] + accuracy["epsilon_statistic"] <= 1.0
    assert accuracy["epsilon_statistic"] == pytest.approx(0.9)
    # The threshold is the one at the chosen bound and the statistic's part of epsilon ...
    assert accuracy["release_threshold"] == float(
        key_selection_threshold(accuracy["epsilon_statistic"], 1e-6, 4)
    )
    # ... far below the cap's (the least named sites, ~17 people each, stay out either way).
    assert accuracy["release_threshold"] < 0.25 * float(key_selection_threshold(1.0, 1e-6, 64))
    assert 20 <= len(release.value) <= 30 and set(release.value) <= {f"site{i}" for i in range(30)}
    assert sum(entry.epsilon for entry in ledger_entries_to_record([release])) == 1.0

    worst = worst_loss_over_one_count(counts, kwargs)
    assert 0 < worst <= float(kwargs["epsilon"]) + 1e-9


def test_top_candidates_after_an_auto_key_selection(run: Any) -> None:
    batches = _sites(1)
    selection = KeySelection(1.0, 1e-6, "auto", bound_cap=16)
    transform = TopCandidates.Globally(
        candidate_column="site",
        candidates=None,
        unit_column="user",
        epsilon=1e4,
        key_selection=selection,
        k=3,
    )
    releases = {r.ledger.name: r for r in run(lambda p: p | beam.Create(batches) | transform)}
    assert releases["top_candidates"].value == ["site0", "site1", "site2"]
    chosen = releases["candidate_selection"].ledger.contribution_bounds
    assert chosen["max_candidates_per_unit"] == 4 and chosen["max_candidates_cap"] == 16


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bound_cap": 16}, "'bound_cap' applies only with max_candidates_per_unit='auto'"),
        ({"max_candidates_per_unit": "auto", "bound_cap": 1}, "'bound_cap' must be >= 2"),
        ({"max_candidates_per_unit": "auto", "bound_share": 1.5}, "'bound_share'"),
        ({"max_candidates_per_unit": "many"}, "max_candidates_per_unit"),
    ],
)
def test_key_selection_auto_options_are_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        KeySelection(1.0, 1e-6, **options)


def test_auto_needs_a_unit_column() -> None:
    with pytest.raises(ValueError, match="needs a 'unit_column'"):
        SelectCandidates.Globally(
            candidate_column="site",
            record_level=True,
            epsilon=1.0,
            delta=1e-6,
            max_candidates_per_unit="auto",
        )
