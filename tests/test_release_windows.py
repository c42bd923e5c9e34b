"""Charging a budget for one transform's releases over several windows and keys."""

from __future__ import annotations

import pytest

from beam_dp.release import Release, ledger_entries_to_record, make_release


def _release(window: str | None, key: object, bounds: dict[str, int], epsilon: float) -> Release:
    return make_release(
        value=1.0,
        name="m",
        statistic="median",
        mechanism="permute_and_flip",
        epsilon=epsilon,
        sensitivity=1.0,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=10,
        contribution_bounds=bounds,
        key=key,
        window=window,
    )


def test_windows_cost_as_many_windows_as_a_unit_can_reach() -> None:
    windows = [f"[2026-01-0{day}, 2026-01-0{day + 1})" for day in range(1, 6)]
    releases = [
        _release(w, None, {"max_contributions_per_unit": 1, "max_windows_per_unit": 2}, 0.5)
        for w in windows
    ]
    entries = ledger_entries_to_record(releases)
    assert sum(entry.epsilon for entry in entries) == pytest.approx(1.0)
    assert len(entries) == 2


def test_windows_and_keys_compose_to_the_share() -> None:
    bounds = {"max_keys_per_unit": 2, "max_windows_per_unit": 3}
    releases = [
        _release(f"w{w}", key, bounds, 1.0 / 6) for w in range(4) for key in ("a", "b", "c")
    ]
    entries = ledger_entries_to_record(releases)
    assert len(entries) == 6
    assert sum(entry.epsilon for entry in entries) == pytest.approx(1.0)


def test_several_windows_without_a_window_bound_are_refused() -> None:
    releases = [_release(w, None, {"max_contributions_per_unit": 1}, 0.5) for w in ("a", "b")]
    with pytest.raises(ValueError, match="max_windows_per_unit"):
        ledger_entries_to_record(releases)


def test_one_window_keeps_the_key_rule() -> None:
    releases = [_release(None, key, {"max_keys_per_unit": 1}, 1.0) for key in "abcd"]
    assert len(ledger_entries_to_record(releases)) == 1
