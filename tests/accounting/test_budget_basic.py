"""PrivacyBudget with basic (sequential) composition: planner, direct spending, ledger."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.accounting import TOLERANCE, LedgerEntry, PrivacyBudget

bad_positive = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0]),
    st.floats(max_value=0.0, allow_nan=False),
)


def entry_for(name: str, mechanism: str, epsilon: float, **overrides: Any) -> LedgerEntry:
    fields: dict[str, Any] = {
        "name": name,
        "statistic": name,
        "mechanism": mechanism,
        "epsilon": epsilon,
        "sensitivity": 1.0,
        "neighbouring": "replace",
        "monotone": False,
        "num_candidates": 2,
        "accuracy": {"confidence": 0.95, "score_loss": 3.0},
    }
    fields.update(overrides)
    return LedgerEntry(**fields)


SEED_003 = [  # (name, mechanism, ε): the three publications of seed 003's composition theorem
    ("average_weight", "laplace", 0.1),
    ("minimum_weight", "exponential", 0.2),
    ("standard_deviation", "laplace", 0.3),
]


def test_seed_003_three_releases_compose_to_the_sum() -> None:
    budget = PrivacyBudget(0.6)
    shares = [
        budget.request(name, mechanism=mechanism, epsilon=epsilon)
        for name, mechanism, epsilon in SEED_003
    ]
    budget.finalize()
    assert [share.epsilon for share in shares] == [0.1, 0.2, 0.3]
    assert budget.remaining() == (0.0, 0.0)
    assert budget.spent() == (0.0, 0.0)
    for name, mechanism, epsilon in SEED_003:
        budget.record(entry_for(name, mechanism, epsilon))
    # ε1 + ε2 + ε3 (the binary floats sum to 0.6 + 5.6e-18, which rounds to 0.6).
    assert budget.spent() == (0.6, 0.0)
    assert [entry.name for entry in budget.ledger] == [name for name, _, _ in SEED_003]
    as_json = budget.to_json()
    assert as_json["epsilon_total"] == 0.6
    assert as_json["epsilon_spent"] == 0.6
    assert as_json["delta_total"] == 0.0
    assert as_json["delta_spent"] == 0.0
    assert as_json["composition"] == "basic"
    assert [share["epsilon_spent"] for share in as_json["shares"]] == [0.1, 0.2, 0.3]
    assert json.loads(json.dumps(as_json, allow_nan=False)) == as_json


def test_seed_003_by_direct_spending() -> None:
    budget = PrivacyBudget(0.6)
    for name, mechanism, epsilon in SEED_003:
        share = budget.spend(name, mechanism=mechanism, epsilon=epsilon)
        assert share.epsilon == epsilon
        budget.record(entry_for(name, mechanism, epsilon))
    assert budget.spent() == (0.6, 0.0)
    assert budget.remaining() == (0.0, 0.0)


def test_planner_over_asking_raises_at_finalize_naming_shares_and_totals() -> None:
    budget = PrivacyBudget(1.0)
    first = budget.request("a", mechanism="exponential", epsilon=0.6)
    budget.request("b", mechanism="permute_and_flip", epsilon=0.5)
    with pytest.raises(ValueError, match=r"epsilon=1\.1.*epsilon=1\.0.*'a' \(epsilon=0\.6\)"):
        budget.finalize()
    # Nothing was fixed: the shares still have no epsilon, so no release can run.
    assert not budget.finalized
    with pytest.raises(RuntimeError, match="finalize"):
        _ = first.epsilon
    with pytest.raises(RuntimeError, match="finalize"):
        budget.record(entry_for("a", "exponential", 0.6))


def test_planner_rejects_deltas_over_the_total() -> None:
    budget = PrivacyBudget(1.0, delta=1e-6)
    budget.request("p", mechanism="partition_selection", delta=6e-7)
    budget.request("g", mechanism="gaussian", delta=6e-7)
    with pytest.raises(ValueError, match=r"deltas add up to 1\.2e-06.*delta=1e-06"):
        budget.finalize()


def test_planner_rejects_weighted_shares_with_nothing_left() -> None:
    budget = PrivacyBudget(1.0)
    budget.request("a", mechanism="exponential", epsilon=1.0)
    budget.request("b", mechanism="exponential")
    with pytest.raises(ValueError, match=r"nothing is left for the weighted shares \['b'\]"):
        budget.finalize()


def test_spend_over_asking_raises_and_changes_nothing() -> None:
    budget = PrivacyBudget(1.0)
    budget.spend("a", mechanism="exponential", epsilon=0.7)
    with pytest.raises(ValueError, match=r"spending 'b'.*epsilon=1\.2.*remaining epsilon=0\.3"):
        budget.spend("b", mechanism="exponential", epsilon=0.5)
    assert [share.name for share in budget.shares] == ["a"]
    assert budget.remaining() == pytest.approx((0.3, 0.0), abs=1e-15)
    # The same name can be spent with an amount that fits.
    assert budget.spend("b", mechanism="exponential", epsilon=0.3).epsilon == 0.3
    with pytest.raises(ValueError, match="'c'"):
        budget.spend("c", mechanism="laplace", epsilon=1e-9)


def test_spend_rejects_delta_over_the_total() -> None:
    budget = PrivacyBudget(1.0, delta=1e-6)
    budget.spend("p", mechanism="partition_selection", epsilon=0.1, delta=8e-7)
    with pytest.raises(ValueError, match=r"delta=1\.6e-06"):
        budget.spend("q", mechanism="partition_selection", epsilon=0.1, delta=8e-7)


def test_weights_split_exactly() -> None:
    budget = PrivacyBudget(1.0)
    a = budget.request("a", mechanism="exponential", weight=1)
    b = budget.request("b", mechanism="exponential", weight=2)
    c = budget.request("c", mechanism="laplace")  # default weight 1
    explicit = budget.request("explicit", mechanism="permute_and_flip", epsilon=0.2)
    budget.finalize()
    assert (a.epsilon, b.epsilon, c.epsilon, explicit.epsilon) == (0.2, 0.4, 0.2, 0.2)
    assert (a.weight, c.weight, explicit.weight) == (1.0, 1.0, None)


@given(
    st.floats(min_value=1e-3, max_value=100.0),
    st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=12),
)
def test_weights_split_in_proportion_and_never_exceed(total: float, weights: list[float]) -> None:
    budget = PrivacyBudget(total)
    shares = [
        budget.request(f"s{i}", mechanism="exponential", weight=weight)
        for i, weight in enumerate(weights)
    ]
    budget.finalize()
    # Each share is its exact part of the total, rounded to the nearest float ...
    weight_sum = sum(Fraction(weight) for weight in weights)
    for share, weight in zip(shares, weights, strict=True):
        exact = Fraction(total) * Fraction(weight) / weight_sum
        assert share.epsilon == float(exact)
    # ... so together they exceed the total by float rounding at most (within TOLERANCE).
    exact_sum = sum(Fraction(share.epsilon) for share in shares)
    assert exact_sum <= Fraction(total) * (1 + Fraction(TOLERANCE))
    assert exact_sum >= Fraction(total) * (1 - Fraction(TOLERANCE))
    # Recording every share in full fits the budget.
    for share in shares:
        budget.record(entry_for(share.name, "exponential", share.epsilon))
    assert budget.spent()[0] == pytest.approx(total, rel=1e-12)


def test_rounds_split_a_share() -> None:
    budget = PrivacyBudget(1.0)
    top = budget.request("top_k", mechanism="permute_and_flip_top_k", epsilon=0.5, rounds=5)
    quantiles = budget.request("quartiles", mechanism="exponential", rounds=3)
    budget.finalize()
    assert (top.rounds, top.epsilon, top.epsilon_per_round) == (5, 0.5, 0.1)
    assert quantiles.epsilon == 0.5
    assert quantiles.epsilon_per_round == pytest.approx(0.5 / 3, rel=1e-15)
    assert quantiles.epsilon_per_round * 3 <= 0.5
    assert top.rho is None and top.delta == 0.0


def test_record_checks_the_share() -> None:
    budget = PrivacyBudget(1.0, delta=1e-6)
    budget.request("median", mechanism="exponential", epsilon=0.4, rounds=2)
    budget.request("keys", mechanism="partition_selection", epsilon=0.5, delta=1e-6)
    budget.finalize()
    with pytest.raises(ValueError, match=r"matches no share; known shares: \['median', 'keys'\]"):
        budget.record(entry_for("mean", "exponential", 0.1))
    with pytest.raises(ValueError, match="used mechanism 'permute_and_flip'"):
        budget.record(entry_for("median", "permute_and_flip", 0.4))
    with pytest.raises(ValueError, match="leave 'rho' as None"):
        budget.record(entry_for("median", "exponential", 0.4, rho=0.02))
    # One entry per round is fine; together they may not exceed the share.
    budget.record(entry_for("median", "exponential", 0.2))
    budget.record(entry_for("median", "exponential", 0.2))
    with pytest.raises(ValueError, match=r"brings the share's epsilon to 0\.4\d*, more than"):
        budget.record(entry_for("median", "exponential", 1e-6))
    with pytest.raises(ValueError, match="brings the share's delta"):
        budget.record(entry_for("keys", "partition_selection", 0.5, delta=2e-6))
    budget.record(entry_for("keys", "partition_selection", 0.5, delta=1e-6))
    assert budget.spent() == (0.9, 1e-6)
    assert len(budget.ledger) == 3
    with pytest.raises(TypeError, match="must be a LedgerEntry"):
        budget.record({"name": "median"})  # type: ignore[arg-type]


def test_record_allows_float_rounding_only() -> None:
    budget = PrivacyBudget(1.0)
    share = budget.request("top", mechanism="exponential_top_k", epsilon=0.3, rounds=3)
    budget.finalize()
    per_round = share.epsilon_per_round
    for _ in range(3):  # per-round ε summed in floats may land an ulp over the share
        budget.record(entry_for("top", "exponential_top_k", per_round))
    assert budget.spent()[0] == pytest.approx(0.3, rel=1e-15)


def test_planner_and_direct_modes_do_not_mix() -> None:
    planned = PrivacyBudget(1.0)
    planned.request("a", mechanism="exponential")
    with pytest.raises(RuntimeError, match="cannot be mixed"):
        planned.spend("b", mechanism="exponential", epsilon=0.1)
    with pytest.raises(RuntimeError, match="known after finalize"):
        planned.remaining()
    planned.finalize()
    with pytest.raises(RuntimeError, match="finalize\\(\\) was already called"):
        planned.request("c", mechanism="exponential")
    with pytest.raises(RuntimeError, match="already called"):
        planned.finalize()

    direct = PrivacyBudget(1.0)
    direct.spend("a", mechanism="exponential", epsilon=0.1)
    with pytest.raises(RuntimeError, match="used through spend"):
        direct.request("b", mechanism="exponential")
    with pytest.raises(RuntimeError, match="used through spend"):
        direct.finalize()


def test_request_validation() -> None:
    budget = PrivacyBudget(1.0, delta=1e-6)
    budget.request("a", mechanism="exponential")
    with pytest.raises(ValueError, match="'a' was already requested"):
        budget.request("a", mechanism="laplace")
    with pytest.raises(ValueError, match="either 'epsilon' or 'weight', not both"):
        budget.request("b", mechanism="exponential", epsilon=0.1, weight=1.0)
    with pytest.raises(ValueError, match="'mechanism' must be one of"):
        budget.request("b", mechanism="noisy_max")
    with pytest.raises(ValueError, match="'delta' must be 0 for mechanism 'exponential'"):
        budget.request("b", mechanism="exponential", delta=1e-7)
    with pytest.raises(ValueError, match="'delta' must be > 0 for mechanism 'gaussian'"):
        budget.request("b", mechanism="gaussian")
    with pytest.raises(ValueError, match="'delta' must be > 0 for mechanism 'partition_sel"):
        budget.request("b", mechanism="partition_selection", epsilon=0.1)
    with pytest.raises(ValueError, match="exceeds the budget's delta=1e-06"):
        budget.request("b", mechanism="partition_selection", epsilon=0.1, delta=1e-5)
    with pytest.raises(ValueError, match="'rounds' must be an integer >= 1"):
        budget.request("b", mechanism="exponential", rounds=0)
    with pytest.raises(TypeError, match="'rounds' must be an integer"):
        budget.request("b", mechanism="exponential", rounds=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'name' must be a non-empty string"):
        budget.request("", mechanism="exponential")
    assert [share.name for share in budget.shares] == ["a"]


@given(bad_positive)
def test_validators_reject_nan_inf_and_non_positive(value: float) -> None:
    with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite; received"):
        PrivacyBudget(value)
    budget = PrivacyBudget(1.0)
    with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite; received"):
        budget.request("a", mechanism="exponential", epsilon=value)
    with pytest.raises(ValueError, match="'weight' must be > 0 and finite; received"):
        budget.request("a", mechanism="exponential", weight=value)
    with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite; received"):
        PrivacyBudget(1.0).spend("a", mechanism="exponential", epsilon=value)


def test_nan_message_is_explicit() -> None:
    with pytest.raises(ValueError, match=r"^'epsilon' must be > 0 and finite; received nan$"):
        PrivacyBudget(math.nan)


@given(st.one_of(st.sampled_from([math.nan, math.inf, 1.0, 1.5]), st.floats(max_value=-1e-300)))
def test_budget_rejects_bad_delta(value: float) -> None:
    with pytest.raises(ValueError, match="'delta' must be"):
        PrivacyBudget(1.0, delta=value)


def test_budget_rejects_unknown_composition() -> None:
    with pytest.raises(ValueError, match=r"'composition' must be one of \['basic', 'zcdp'\]"):
        PrivacyBudget(1.0, composition="advanced")  # type: ignore[arg-type]


def test_to_json_before_finalize_and_share_repr() -> None:
    budget = PrivacyBudget(2.0)
    share = budget.request("a", mechanism="exponential", weight=3)
    assert budget.to_json()["shares"][0]["epsilon"] is None
    assert "weight=3.0" in repr(share)
    budget.finalize()
    assert budget.to_json()["shares"][0] == {
        "name": "a",
        "mechanism": "exponential",
        "rounds": 1,
        "weight": 3.0,
        "epsilon": 2.0,
        "epsilon_per_round": 2.0,
        "delta": 0.0,
        "rho": None,
        "spent_by": None,
        "epsilon_spent": 0.0,
        "delta_spent": 0.0,
    }
    assert "epsilon=2.0" in repr(share)
    assert "PrivacyBudget(epsilon=2.0" in repr(budget)


def test_finalize_with_no_shares_and_explicit_leftover() -> None:
    empty = PrivacyBudget(1.0)
    empty.finalize()
    assert empty.remaining() == (1.0, 0.0)
    partial = PrivacyBudget(1.0)
    partial.request("a", mechanism="exponential", epsilon=0.25)
    partial.finalize()
    assert partial.remaining() == (0.75, 0.0)


def test_record_refuses_mixed_neighbouring_relations() -> None:
    budget = PrivacyBudget(1.0)
    budget.request("a", mechanism="exponential")
    budget.request("b", mechanism="exponential")
    budget.finalize()
    budget.record(entry_for("a", "exponential", 0.5, neighbouring="replace"))
    with pytest.raises(ValueError, match=r"neighbouring='add_remove'.*used 'replace'"):
        budget.record(entry_for("b", "exponential", 0.5, neighbouring="add_remove"))
