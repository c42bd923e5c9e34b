"""A budget share is spent once: taken by the transform built with it (issue 22, item 2)."""

from __future__ import annotations

import pytest

from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.accounting.shares import take_shares


def entry_for(name: str, epsilon: float) -> LedgerEntry:
    return LedgerEntry(
        name=name,
        statistic=name,
        mechanism="exponential",
        epsilon=epsilon,
        sensitivity=1.0,
        neighbouring="replace",
        monotone=False,
        num_candidates=2,
    )


def test_a_share_is_taken_once_and_spent_counts_it_in_full() -> None:
    budget = PrivacyBudget(1.0)
    share = budget.request("m", mechanism="permute_and_flip")
    budget.finalize()
    assert budget.spent() == (0.0, 0.0) and share.spent_by is None
    take_shares([share], by="PrivateMedian.Globally('m')")
    assert share.spent_by == "PrivateMedian.Globally('m')"
    assert budget.spent() == (1.0, 0.0)  # taken: its releases may spend all of it
    with pytest.raises(ValueError, match=r"share 'm' is already spent by PrivateMedian"):
        take_shares([share], by="PrivateMedian.Globally('m')")
    document = budget.to_json()
    assert document["epsilon_spent"] == 1.0
    assert document["shares"][0]["spent_by"] == "PrivateMedian.Globally('m')"
    assert document["shares"][0]["epsilon_spent"] == 1.0


def test_taking_several_shares_takes_all_or_none() -> None:
    budget = PrivacyBudget(1.0, delta=1e-6)
    keys = budget.spend("keys", mechanism="partition_selection", epsilon=0.5, delta=1e-6)
    top = budget.spend("top", mechanism="permute_and_flip", epsilon=0.5)
    take_shares([top], by="first")
    with pytest.raises(ValueError, match="'top' is already spent by first"):
        take_shares([keys, top], by="second")
    assert keys.spent_by is None  # nothing taken by the refused transform
    assert budget.spent() == (0.5, 0.0)


def test_a_share_without_an_epsilon_cannot_be_taken() -> None:
    budget = PrivacyBudget(1.0)
    share = budget.request("m", mechanism="exponential")
    with pytest.raises(RuntimeError, match="finalize"):
        take_shares([share], by="t")
    assert share.spent_by is None


def test_a_share_no_transform_took_counts_what_was_recorded() -> None:
    budget = PrivacyBudget(1.0)
    budget.request("a", mechanism="exponential", epsilon=0.5)
    taken = budget.request("b", mechanism="exponential", epsilon=0.5)
    budget.finalize()
    budget.record(entry_for("a", 0.25))
    take_shares([taken], by="t")
    budget.record(entry_for("b", 0.5))
    assert budget.spent() == (0.75, 0.0)
