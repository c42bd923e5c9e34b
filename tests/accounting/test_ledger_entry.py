"""LedgerEntry: validation, immutability, and the JSON round trip."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.accounting import MECHANISMS, FrozenMapping, LedgerEntry, privacy_kind

positive = st.floats(min_value=0.0, exclude_min=True, allow_nan=False, allow_infinity=False)
bad_positive = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0]),
    st.floats(max_value=0.0, allow_nan=False),
)


def make_entry(**overrides: Any) -> LedgerEntry:
    fields: dict[str, Any] = {
        "name": "minimum_weight",
        "statistic": "minimum",
        "mechanism": "exponential",
        "epsilon": 0.5,
        "sensitivity": 1.0,
        "neighbouring": "replace",
        "monotone": False,
        "num_candidates": 11,
        "contribution_bounds": {"max_contributions": 1},
        "accuracy": {"confidence": 0.99, "score_loss": 12.5},
    }
    fields.update(overrides)
    return LedgerEntry(**fields)


names = st.text(min_size=1, max_size=20)
accuracies = st.one_of(
    st.just({}),
    st.builds(
        lambda confidence, others: {"confidence": confidence, **others},
        st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True),
        st.dictionaries(
            st.sampled_from(["score_loss", "rank_error", "cell_width"]),
            st.floats(min_value=0.0, allow_nan=False, allow_infinity=False),
        ),
    ),
)
entries = st.builds(
    LedgerEntry,
    name=names,
    statistic=names,
    mechanism=st.sampled_from(list(MECHANISMS)),
    epsilon=positive,
    delta=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    rho=st.one_of(st.none(), positive),
    sensitivity=positive,
    neighbouring=st.sampled_from(["add_remove", "replace"]),
    monotone=st.booleans(),
    num_candidates=st.integers(min_value=1, max_value=10**15),
    contribution_bounds=st.dictionaries(names, st.integers(min_value=1, max_value=10**9)),
    accuracy=accuracies,
)


def _plain_json_types(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json_types(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_json_types(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


@given(entries)
def test_json_round_trip(entry: LedgerEntry) -> None:
    as_dict = entry.to_dict()
    assert _plain_json_types(as_dict)
    text = json.dumps(as_dict, allow_nan=False)
    restored = LedgerEntry.from_dict(json.loads(text))
    assert restored == entry
    assert restored.to_dict() == as_dict
    assert hash(restored) == hash(entry)


@given(entries)
def test_pickle_round_trip(entry: LedgerEntry) -> None:
    assert pickle.loads(pickle.dumps(entry)) == entry


def test_release_record_with_value_reads_back() -> None:
    entry = make_entry()
    release = {**entry.to_dict(), "value": 42}
    assert LedgerEntry.from_dict(release) == entry


def test_from_dict_names_missing_keys() -> None:
    data = make_entry().to_dict()
    del data["sensitivity"], data["rho"]
    with pytest.raises(ValueError, match=r"missing required keys \['rho', 'sensitivity'\]"):
        LedgerEntry.from_dict(data)


def test_numbers_are_normalised() -> None:
    entry = make_entry(epsilon=Fraction(1, 2), sensitivity=2, accuracy={"confidence": 0.9})
    assert type(entry.epsilon) is float and entry.epsilon == 0.5
    assert type(entry.sensitivity) is float
    assert entry.accuracy == {"confidence": 0.9}


def test_frozen_and_read_only() -> None:
    entry = make_entry()
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.epsilon = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        entry.contribution_bounds["max_contributions"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        entry.accuracy["confidence"] = 0.5  # type: ignore[index]
    assert isinstance(entry.contribution_bounds, FrozenMapping)
    assert entry.contribution_bounds == {"max_contributions": 1}
    assert len({entry, make_entry()}) == 1


def test_caller_dict_is_copied() -> None:
    bounds = {"max_contributions": 1}
    entry = make_entry(contribution_bounds=bounds)
    bounds["max_contributions"] = 5
    assert entry.contribution_bounds == {"max_contributions": 1}


@given(bad_positive)
def test_rejects_bad_epsilon(value: float) -> None:
    with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite; received"):
        make_entry(epsilon=value)


@given(bad_positive)
def test_rejects_bad_sensitivity_and_rho(value: float) -> None:
    with pytest.raises(ValueError, match="'sensitivity' must be > 0 and finite"):
        make_entry(sensitivity=value)
    with pytest.raises(ValueError, match="'rho' must be > 0 and finite"):
        make_entry(rho=value)


@given(st.one_of(st.sampled_from([math.nan, math.inf, 1.0, 2.0]), st.floats(max_value=-1e-300)))
def test_rejects_bad_delta(value: float) -> None:
    with pytest.raises(ValueError, match="'delta' must be"):
        make_entry(delta=value)


@given(st.one_of(st.sampled_from([math.nan, 0.0, 1.0, math.inf]), st.floats(min_value=1.0)))
def test_rejects_bad_confidence(value: float) -> None:
    with pytest.raises(ValueError, match=r"'accuracy\['confidence'\]' must be strictly between"):
        make_entry(accuracy={"confidence": value, "score_loss": 1.0})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mechanism": "laplacian"}, "'mechanism' must be one of"),
        ({"neighbouring": "swap"}, "'neighbouring' must be one of"),
        ({"num_candidates": 0}, "'num_candidates' must be an integer >= 1"),
        ({"name": ""}, "'name' must be a non-empty string"),
        ({"statistic": ""}, "'statistic' must be a non-empty string"),
        ({"contribution_bounds": {"k": 0}}, r"'contribution_bounds\['k'\]' must be an integer"),
        ({"accuracy": {"score_loss": 1.0}}, "'accuracy' must include 'confidence'"),
        ({"accuracy": {"confidence": 0.9, "score_loss": -1.0}}, "must be >= 0 and finite"),
        ({"accuracy": {"confidence": 0.9, "rank_error": math.nan}}, "must be >= 0 and finite"),
    ],
)
def test_rejects_bad_fields(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_entry(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"monotone": 1},
        {"num_candidates": 3.0},
        {"epsilon": "0.5"},
        {"contribution_bounds": [("k", 1)]},
        {"epsilon": True},
    ],
)
def test_rejects_wrong_types(overrides: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        make_entry(**overrides)


def test_mechanism_kinds() -> None:
    assert set(MECHANISMS) == {
        "exponential",
        "permute_and_flip",
        "exponential_top_k",
        "permute_and_flip_top_k",
        "laplace",
        "gaussian",
        "partition_selection",
    }
    # Only the exponential mechanism (and its peeling top-k) is bounded range.
    assert {name for name, kind in MECHANISMS.items() if kind == "bounded_range"} == {
        "exponential",
        "exponential_top_k",
    }
    assert privacy_kind("permute_and_flip") == "pure"
    assert privacy_kind("permute_and_flip_top_k") == "pure"
    assert privacy_kind("partition_selection") == "approximate"
    with pytest.raises(TypeError):
        MECHANISMS["permute_and_flip"] = "bounded_range"  # type: ignore[index]
