"""The selection family's plans, without Beam (:mod:`beam_dp.summaries.selection`).

A plan reads the shared options and the budget through two protocols; here they are plain
frozen dataclasses, not the Beam layer's ``CommonOptions``, so each test shows the pure layer
plans a release on its own: the spec (sensitivity, monotonicity, ε, ρ, rounds), the bounds the
pipeline enforces and those the ledger records. The transforms' own tests check the same
numbers through Beam (``test_selection_pipelines``, ``test_options``, ``test_privacy_unit``).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from beam_dp._validation import Relation
from beam_dp.batching import ContributionBounds
from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, Method, RandomSource
from beam_dp.scores import Revenue
from beam_dp.summaries.selection import (
    SelectionPlan,
    check_declared_score,
    check_election_score,
    check_key_selection_relation,
    check_max_candidates_per_unit,
    check_per_unit_rule,
    check_release_names,
    election_score,
    plan_best_price,
    plan_custom,
    plan_election,
    plan_top_after_key_selection,
    plan_top_candidates,
    revenue_score,
)


@dataclass(frozen=True)
class Options:
    """The shared options a plan reads (what ``CommonOptions`` gives the Beam layer)."""

    method: Method = "permute_and_flip"
    relation: Relation = "add_remove"
    k: int = 1
    confidence: float = 0.95
    rng: RandomSource | None = None
    max_keys_per_unit: int | None = None
    keys: tuple[str, ...] | None = None
    max_windows_per_unit: int = 1

    def check_k(self, num_candidates: int | None) -> None:
        if num_candidates is not None and self.k > num_candidates:
            raise ValueError("'k' must be at most the number of candidates")

    def unit_bounds(self, record_level: bool) -> dict[str, int]:
        return {"record_level_privacy": 1} if record_level else {}

    def key_bounds(self, record_level: bool) -> dict[str, int]:
        if self.keys is None:
            return {}
        return {"max_keys_per_unit": 1 if record_level else len(self.keys)}

    def windows_per_unit(self, record_level: bool) -> int:
        return self.max_windows_per_unit


@dataclass(frozen=True)
class Budget:
    name: str
    epsilon: float
    rho: float | None = None


def test_top_candidates_at_record_level_enforces_nothing_and_records_one_label() -> None:
    plan = plan_top_candidates(
        Options(),
        Budget("top", 0.5),
        labels=("a", "b", "c"),
        record_level=True,
        max_candidates_per_unit=None,
    )
    assert isinstance(plan, SelectionPlan)
    assert plan.bounds is None
    assert dict(plan.spec.contribution_bounds) == {
        "max_candidates_per_unit": 1,
        "record_level_privacy": 1,
        "max_windows_per_unit": 1,
    }
    assert (plan.spec.name, plan.spec.epsilon, plan.spec.rho) == ("top", 0.5, None)
    assert plan.spec.selection_sensitivity == 1
    assert plan.spec.monotone  # add_remove
    assert plan.spec.accuracy_kind == "distinct_count"


def test_top_candidates_per_unit_bounds_distinct_labels_and_the_keys() -> None:
    options = Options(relation="replace", k=2, keys=("x", "y", "z"), max_keys_per_unit=2)
    plan = plan_top_candidates(
        options, Budget("top", 1.0), labels=None, record_level=False, max_candidates_per_unit=3
    )
    assert plan.bounds == ContributionBounds(
        max_contributions_per_unit=3, max_keys_per_unit=2, distinct_candidates=True
    )
    assert dict(plan.spec.contribution_bounds) == {
        "distinct_candidates": 1,
        "max_candidates_per_unit": 3,
        "max_keys_per_unit": 3,
        "max_windows_per_unit": 1,
    }
    assert not plan.spec.monotone  # replace
    assert plan.spec.k == 2 and plan.spec.mechanism == "permute_and_flip_top_k"


def test_a_bound_on_labels_per_unit_takes_no_auto_and_is_checked() -> None:
    with pytest.raises(ValueError, match="'max_candidates_per_unit' takes no 'auto'"):
        check_max_candidates_per_unit("auto")
    with pytest.raises(ValueError, match="max_candidates_per_unit"):
        check_max_candidates_per_unit(0)
    check_max_candidates_per_unit(None)
    check_max_candidates_per_unit(4)


def test_top_after_key_selection_records_the_labels_a_unit_keeps() -> None:
    check_key_selection_relation("add_remove")
    with pytest.raises(ValueError, match="relation='add_remove'"):
        check_key_selection_relation("replace")
    with pytest.raises(ValueError, match="both named 'sites'"):
        check_release_names("sites", "sites")
    spec = plan_top_after_key_selection(
        Options(max_windows_per_unit=4), Budget("top", 0.25), labels_per_unit=5, record_level=False
    )
    assert dict(spec.contribution_bounds) == {
        "max_candidates_per_unit": 5,
        "distinct_candidates": 1,
        "max_windows_per_unit": 4,
    }
    assert spec.epsilon == 0.25 and spec.selection_sensitivity == 1


def test_best_price_has_the_top_price_as_sensitivity_and_one_value_per_unit() -> None:
    check_per_unit_rule("mean")
    with pytest.raises(ValueError, match="'per_unit' must be one of"):
        check_per_unit_rule("median")
    score = revenue_score([1, 2, 3])
    assert revenue_score(score) is score
    assert revenue_score(None).prices == Revenue.default().prices
    plan = plan_best_price(
        Options(relation="replace"), Budget("price", 1.0), score=score, record_level=False
    )
    assert plan.bounds == ContributionBounds(max_contributions_per_unit=None)
    assert plan.spec.sensitivity == 3.0 and plan.spec.monotone  # monotone under both
    assert dict(plan.spec.contribution_bounds) == {"values_per_unit": 1, "max_windows_per_unit": 1}
    assert plan.spec.accuracy_kind == "revenue"


def test_election_margin_needs_two_labels_and_doubles_under_replace() -> None:
    with pytest.raises(ValueError, match="'score' must be 'plurality' or 'margin'"):
        check_election_score("borda")
    with pytest.raises(ValueError, match="exactly 2 candidates; received 3"):
        election_score("margin", ("a", "b", "c"))
    margin = election_score("margin", ("yes", "no"))
    plan = plan_election(
        Options(relation="replace"), Budget("vote", 1.0), score=margin, record_level=False
    )
    assert plan.bounds == ContributionBounds(max_contributions_per_unit=1)
    assert plan.spec.selection_sensitivity == 2 and not plan.spec.monotone
    assert plan.spec.accuracy_kind == "margin"
    plurality = plan_election(
        Options(),
        Budget("vote", 1.0),
        score=election_score("plurality", None),
        record_level=True,
    )
    assert plurality.bounds is None and plurality.spec.monotone


def test_a_declared_score_keeps_its_sensitivity_and_the_keys_bound_of_the_options() -> None:
    with pytest.raises(TypeError, match="'monotone' must be a bool"):
        check_declared_score(1.0, 1, None, "custom")
    with pytest.raises(ValueError, match="'statistic' must be a non-empty string"):
        check_declared_score(1.0, True, None, "")
    requested = check_declared_score(
        Fraction(1, 3), True, ContributionBounds(max_contributions_per_unit=2), "mine"
    )
    plan = plan_custom(
        Options(max_keys_per_unit=7),
        Budget("mine", 2.0, rho=0.5),
        statistic="mine",
        sensitivity=Fraction(1, 3),
        monotone=True,
        requested=requested,
        record_level=False,
    )
    assert plan.bounds == ContributionBounds(max_contributions_per_unit=2, max_keys_per_unit=7)
    assert plan.spec.selection_sensitivity == Fraction(1, 3)
    assert (plan.spec.statistic, plan.spec.epsilon, plan.spec.rho) == ("mine", 2.0, 0.5)
    assert plan.spec.accuracy_kind == "score"


def test_a_planned_spec_releases_without_beam() -> None:
    with pytest.warns(InsecureRandomWarning):
        source = InsecureSeededRandom(7)
    plan = plan_top_candidates(
        Options(rng=source),
        Budget("top", 50.0),
        labels=("a", "b", "c"),
        record_level=True,
        max_candidates_per_unit=None,
    )
    release = plan.spec.release(np.array([0, 40, 0], dtype=np.int64), ("a", "b", "c"))
    assert release.value == "b"  # the ε = 50 choice at a gap of 40: all but certain
    assert release.ledger.epsilon == 50.0


def test_importing_the_selection_plans_does_not_load_beam() -> None:
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from beam_dp.summaries.selection import election_score\n"
        "assert 'apache_beam' not in sys.modules, 'apache_beam was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
