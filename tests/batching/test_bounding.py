"""Contribution bounding: every unit within its bounds, decided by its own rows only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ContributionBounds,
    bound_rows,
    num_rows,
    stable_hash64,
    take,
)


def _batch(
    units: list[int], candidates: list[int], keys: list[int] | None = None
) -> dict[str, np.ndarray]:
    batch = {
        UNIT: stable_hash64(np.array(units, dtype=np.int64)),
        CANDIDATE: np.array(candidates, dtype=np.int64),
        VALUE: np.array(candidates, dtype=np.float64) / 7.0,
    }
    if keys is not None:
        batch[KEY] = np.array(keys, dtype=np.int64)
    return batch


rows = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 5), st.integers(0, 3)), max_size=120)


@settings(deadline=None, max_examples=150)
@given(rows=rows, k=st.integers(1, 4), m=st.integers(1, 3), distinct=st.booleans())
def test_bounds_hold_for_every_unit(
    rows: list[tuple[int, int, int]], k: int, m: int, distinct: bool
) -> None:
    units = [r[0] for r in rows]
    batch = _batch(units, [r[1] for r in rows], [r[2] for r in rows])
    bounds = ContributionBounds(
        max_contributions_per_unit=k, max_keys_per_unit=m, distinct_candidates=distinct
    )
    out = bound_rows(batch, bounds, salt=99)
    for unit in set(out[UNIT].tolist()):
        mine = out[UNIT] == unit
        assert len(set(out[KEY][mine].tolist())) <= m
        for key in set(out[KEY][mine].tolist()):
            pair = mine & (out[KEY] == key)
            assert pair.sum() <= k
            if distinct:
                assert len(set(out[CANDIDATE][pair].tolist())) == pair.sum()
    # nothing is dropped from a unit that is already within its bounds
    for unit in set(units):
        mine = batch[UNIT] == stable_hash64(np.array([unit]))[0]
        keys_of_unit = set(batch[KEY][mine].tolist())
        per_key = [int((mine & (batch[KEY] == key)).sum()) for key in keys_of_unit]
        if len(keys_of_unit) <= m and max(per_key, default=0) <= k and not distinct:
            assert int((out[UNIT] == stable_hash64(np.array([unit]))[0]).sum()) == int(mine.sum())


@settings(deadline=None, max_examples=100)
@given(rows=rows, k=st.integers(1, 3), removed=st.integers(0, 8))
def test_a_units_kept_rows_do_not_depend_on_other_units(
    rows: list[tuple[int, int, int]], k: int, removed: int
) -> None:
    # Neighbouring inputs (one unit removed): every other unit keeps exactly the same rows.
    units = [r[0] for r in rows]
    batch = _batch(units, [r[1] for r in rows])
    bounds = ContributionBounds(max_contributions_per_unit=k)
    full = bound_rows(batch, bounds, salt=5)
    gone = stable_hash64(np.array([removed]))[0]
    neighbour = bound_rows(take(batch, batch[UNIT] != gone), bounds, salt=5)

    def rows_of(out: dict[str, np.ndarray]) -> list[tuple[int, int]]:
        keep = out[UNIT] != gone
        return sorted(zip(out[UNIT][keep].tolist(), out[CANDIDATE][keep].tolist(), strict=True))

    assert rows_of(full) == rows_of(neighbour)


def test_choice_is_not_the_first_rows() -> None:
    # One unit with 1000 rows bounded to 10: the survivors are spread over the input order.
    batch = _batch([1] * 1000, list(range(1000)))
    out = bound_rows(batch, ContributionBounds(max_contributions_per_unit=10), salt=123)
    assert num_rows(out) == 10
    assert out[CANDIDATE].max() > 100


def test_bounds_validation() -> None:
    with pytest.raises(ValueError, match="'max_contributions_per_unit' must be an integer >= 1"):
        ContributionBounds(max_contributions_per_unit=0)
    with pytest.raises(ValueError, match="'max_keys_per_unit'"):
        ContributionBounds(max_keys_per_unit=-1)
    assert ContributionBounds(3, 2, True).to_dict() == {
        "max_contributions_per_unit": 3,
        "max_keys_per_unit": 2,
        "distinct_candidates": 1,
    }
