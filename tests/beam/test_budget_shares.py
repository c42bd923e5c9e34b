"""A budget share pays for one transform (issue 22, item 2).

Before: ``share = budget.request("m", ...)`` given to three ``PrivateMedian.Globally``
transforms gave three releases at the share's ε, and ``budget.spent()`` stayed (0, 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam
import pytest

from beam_dp.accounting import BudgetShare, PrivacyBudget
from beam_dp.beam.cdf import PrivateCDF
from beam_dp.beam.key_selection import KeySelection, SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMax, PrivateMedian, PrivateMin, PrivateQuantiles
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates

Build = Callable[[Any], beam.PTransform]
UNIT: dict[str, Any] = {"unit_column": "u"}
VALUES: dict[str, Any] = {"lower": 0.0, "upper": 1.0, "value_column": "v", **UNIT}
BUILDS: dict[str, Build] = {
    "TopCandidates.Globally": lambda e: TopCandidates.Globally(
        candidate_column="c", candidates=["a", "b"], epsilon=e, **UNIT
    ),
    "TopCandidates.PerKey": lambda e: TopCandidates.PerKey(
        candidate_column="c", candidates=["a"], key_column="k", keys=["x"], epsilon=e, **UNIT
    ),
    "BestPrice.Globally": lambda e: BestPrice.Globally(value_column="v", epsilon=e, **UNIT),
    "Election.Globally": lambda e: Election.Globally(
        candidate_column="c", candidates=["a", "b"], epsilon=e, **UNIT
    ),
    "ExponentialSelect.Globally": lambda e: ExponentialSelect.Globally(
        beam.combiners.CountCombineFn(),
        candidates=["a"],
        sensitivity=1,
        monotone=True,
        epsilon=e,
        **UNIT,
    ),
    "PrivateQuantiles.Globally": lambda e: PrivateQuantiles.Globally(
        [0.25, 0.75], epsilon=e, **VALUES
    ),
    "PrivateMedian.Globally": lambda e: PrivateMedian.Globally(epsilon=e, **VALUES),
    "PrivateMedian.PerKey": lambda e: PrivateMedian.PerKey(epsilon=e, keys=["x"], **VALUES),
    "PrivateMin.Globally": lambda e: PrivateMin.Globally(epsilon=e, **VALUES),
    "PrivateMax.Globally": lambda e: PrivateMax.Globally(epsilon=e, **VALUES),
    "PrivateMean.Globally": lambda e: PrivateMean.Globally(epsilon=e, **VALUES),
    "PrivateCDF.Globally": lambda e: PrivateCDF.Globally(epsilon=e, **VALUES),
}


def _share_for(build: Build, budget: PrivacyBudget, name: str) -> BudgetShare:
    """Request the share a transform needs, as the jobs do: its mechanism and rounds come
    from a build with a float epsilon (which takes no share)."""
    probe: Any = build(1.0)
    return budget.spend(name, mechanism=probe.mechanism, epsilon=0.5, rounds=probe.rounds)


def test_three_medians_cannot_share_one_share() -> None:
    # the case, word for word
    budget = PrivacyBudget(1.0)
    share = budget.request("m", mechanism="permute_and_flip", rounds=3)  # and its interval
    budget.finalize()
    PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=share)
    assert budget.spent() == (1.0, 0.0)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"budget share 'm' is already spent by Private"):
            PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=share)
    assert budget.spent() == (1.0, 0.0)
    assert share.spent_by == "PrivateMedian.Globally('m')"


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_transform_takes_its_share_once(name: str) -> None:
    build = BUILDS[name]
    budget = PrivacyBudget(2.0)
    share = _share_for(build, budget, "s")
    other = _share_for(build, budget, "t")
    assert budget.spent() == (0.0, 0.0)  # spend() fixes shares; no transform took them yet
    build(1.0)  # a float epsilon takes nothing (the jobs' check build)
    build(share)
    assert share.spent_by is not None and other.spent_by is None
    with pytest.raises(ValueError, match="budget share 's' is already spent by"):
        build(share)
    build(other)  # another share is fine
    assert budget.spent() == (1.0, 0.0)
    assert {s["name"]: s["spent_by"] for s in budget.to_json()["shares"]} == {
        "s": share.spent_by,
        "t": other.spent_by,
    }


def test_spent_counts_the_transforms_built() -> None:
    budget = PrivacyBudget(1.0)
    # a median: one selection and its interval's two ends
    shares = [budget.request(n, mechanism="permute_and_flip", rounds=3) for n in ("a", "b", "c")]
    budget.finalize()
    assert budget.spent() == (0.0, 0.0)
    PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=shares[0])
    assert budget.spent()[0] == pytest.approx(1 / 3)
    PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=shares[1])
    assert budget.spent()[0] == pytest.approx(2 / 3)


def test_a_transform_refused_for_a_parameter_takes_nothing() -> None:
    budget = PrivacyBudget(1.0)
    share = budget.spend("m", mechanism="permute_and_flip", epsilon=1.0, rounds=3)
    with pytest.raises(ValueError, match="lower"):
        PrivateMedian.Globally(lower=1.0, upper=0.0, unit_column="u", epsilon=share)
    with pytest.raises(ValueError, match="no privacy unit"):
        PrivateMedian.Globally(lower=0.0, upper=1.0, epsilon=share)
    assert share.spent_by is None and budget.spent() == (0.0, 0.0)
    PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=share)


def test_key_selection_and_top_candidates_take_both_shares() -> None:
    budget = PrivacyBudget(2.0, delta=1e-6)
    keys = budget.spend("keys", mechanism="partition_selection", epsilon=1.0, delta=1e-6)
    top = budget.spend("top", mechanism="permute_and_flip", epsilon=1.0)

    def build(keys_share: Any, top_share: Any) -> TopCandidates.Globally:
        return TopCandidates.Globally(
            candidate_column="c",
            candidates=None,
            key_selection=KeySelection(keys_share),
            unit_column="u",
            epsilon=top_share,
        )

    build(keys, top)
    assert keys.spent_by == top.spent_by == "TopCandidates.Globally('top')"
    assert budget.spent() == (2.0, 1e-6)
    fresh = PrivacyBudget(1.0).spend("top2", mechanism="permute_and_flip", epsilon=1.0)
    with pytest.raises(ValueError, match="'keys' is already spent"):
        build(keys, fresh)
    assert fresh.spent_by is None  # all or nothing
    with pytest.raises(ValueError, match="'keys' is already spent"):
        SelectCandidates.Globally(candidate_column="c", unit_column="u", epsilon=keys)


def test_a_transform_with_a_share_is_applied_once() -> None:
    budget = PrivacyBudget(1.0)
    share = budget.spend("m", mechanism="permute_and_flip", epsilon=1.0, rounds=3)
    median = PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=share)
    pipeline = beam.Pipeline()  # built, never run
    rows = pipeline | beam.Create([{"u": [1], "v": [0.5]}])
    _ = rows | "first" >> median
    with pytest.raises(ValueError, match=r"already applied: its budget share\(s\) 'm' pay"):
        _ = rows | "second" >> median
    # with a float epsilon the caller accounts for each application
    floating = PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=1.0)
    _ = rows | "third" >> floating
    _ = rows | "fourth" >> floating
