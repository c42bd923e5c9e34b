"""Per-key (and per-window) budgets: the releases one unit can reach cost the share, no more
and no less, under basic composition and under zCDP."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.beam._transform import ResolvedBudget, divide_budget
from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.beam.selection import TopCandidates
from beam_dp.release import Release, ledger_entries_to_record

KEYS = ["k0", "k1", "k2", "k3"]
ROWS = pa.table(
    {
        "u": [f"u{i}" for i in range(12)],
        "c": ["a", "b", "a"] * 4,
        "key": [KEYS[i % 4] for i in range(12)],
        "v": [float(i) for i in range(12)],
    }
)


def _check_zcdp_split(releases: list[Release], share: Any, reach: int) -> None:
    """Each key runs at ε/√m (rounded down) and the m keys' ρ add up to the share's ρ."""
    assert len(releases) == len(KEYS)
    rho = Fraction(share.rho)
    for release in releases:
        epsilon = Fraction(release.ledger.epsilon)
        assert epsilon**2 * reach <= Fraction(share.epsilon) ** 2 * (1 + Fraction(1, 10**12))
        assert release.ledger.epsilon == pytest.approx(share.epsilon / math.sqrt(reach), rel=1e-12)
        assert release.ledger.epsilon > 1.5 * share.epsilon / reach  # not ε/m
        assert release.ledger.contribution_bounds["max_keys_per_unit"] == reach
    spent = sum((Fraction(r.ledger.rho) for r in releases[:reach]), Fraction(0))
    assert spent <= rho  # exactly
    assert spent >= rho * (1 - Fraction(1, 10**12))  # and all of it


def test_top_candidates_per_key_under_zcdp_spends_the_share(collect: Any) -> None:
    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("top", mechanism="exponential", epsilon=0.8)
    found = collect(
        lambda p: (
            p
            | beam.Create([ROWS])
            | TopCandidates.PerKey(
                candidate_column="c",
                candidates=["a", "b"],
                unit_column="u",
                key_column="key",
                keys=KEYS,
                max_keys_per_unit=None,  # m = 4
                epsilon=share,
                method="exponential",
            )
        )
    )
    releases = [release for release, _ in found]
    _check_zcdp_split(releases, share, reach=4)
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)  # the m entries fit the share exactly


def test_quantiles_per_key_under_zcdp_spends_the_share(collect: Any) -> None:
    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("median", mechanism="permute_and_flip", epsilon=0.5, rounds=3)
    found = collect(
        lambda p: (
            p
            | beam.Create([ROWS])
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=12.0,
                epsilon=share,
                unit_column="u",
                value_column="v",
                key_column="key",
                keys=KEYS,
                max_keys_per_unit=3,  # m = 3
                num_points=13,
            )
        )
    )
    releases = [release for release, _ in found]
    _check_zcdp_split(releases, share, reach=3)
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)


@pytest.mark.parametrize("mechanism", ["exponential", "permute_and_flip", "exponential_top_k"])
@pytest.mark.parametrize(("keys", "windows"), [(1, 1), (2, 1), (3, 5), (7, 2), (1, 9)])
def test_split_share_is_exact_under_zcdp(mechanism: str, keys: int, windows: int) -> None:
    rounds = 3 if mechanism.endswith("top_k") else 1
    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("s", mechanism=mechanism, epsilon=0.7, rounds=rounds)
    whole = ResolvedBudget("s", share.epsilon, share.rho, mechanism, rounds)
    part = divide_budget(whole, keys_per_unit=keys, windows_per_unit=windows)
    parts = keys * windows
    assert part.rho is not None and share.rho is not None
    assert Fraction(part.rho) * parts <= Fraction(share.rho)
    rate = Fraction(1, 8) if mechanism.startswith("exponential") else Fraction(1, 2)
    assert rate * Fraction(part.epsilon) ** 2 / rounds <= Fraction(part.rho)  # what record checks
    assert part.epsilon == pytest.approx(share.epsilon / math.sqrt(parts), rel=1e-12)


@pytest.mark.parametrize(("keys", "windows"), [(1, 1), (3, 1), (3, 7), (1, 10)])
def test_split_share_divides_epsilon_under_basic_composition(keys: int, windows: int) -> None:
    part = divide_budget(
        ResolvedBudget("s", 0.3, None, "permute_and_flip", 1),
        keys_per_unit=keys,
        windows_per_unit=windows,
    )
    assert part.rho is None
    assert Fraction(part.epsilon) * keys * windows <= Fraction(0.3)
    assert part.epsilon == pytest.approx(0.3 / (keys * windows), rel=1e-15)
