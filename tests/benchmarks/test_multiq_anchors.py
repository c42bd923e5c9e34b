"""Smoke run of benchmarks/multiq.py at --quick, and checks of the two anchors it runs against."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import anchors_quantiles, multiq  # noqa: E402


def test_quick_run_prints_every_method_on_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    multiq.main(["--quick"])
    out = capsys.readouterr().out
    assert "## beam-dp's stated bound" in out and "## Against the anchors" in out
    for column in ("47% tie", "continuous", "bimodal"):
        for m in (10, 50):
            for method in (*multiq.METHODS, "ratio"):
                assert f"| {column} | 1 | {m} | {method} |" in out
    assert "beam-dp's max error > 0.8x the best anchor's:" in out


def test_strided_levels_are_among_the_250_levels() -> None:
    for m in (10, 50, 100, 200):
        levels = multiq.strided_levels(m)
        assert len(set(levels)) == m and levels == sorted(levels)
        assert all(
            abs(q * 251 - round(q * 251)) < 1e-9 and 1 <= round(q * 251) <= 250 for q in levels
        )


def test_spread_ties_makes_values_distinct_and_rounds_back() -> None:
    values = np.array([1.0, 1.0, 2.0, 3.0, 3.0, 3.0])
    spread = anchors_quantiles.spread_ties(values)
    assert np.all(np.diff(spread) > 0)
    np.testing.assert_array_equal(np.round(spread), values)


def test_tree_noise_of_a_prefix_sums_its_dyadic_blocks() -> None:
    noise = anchors_quantiles.tree_prefix_noise(8, 1.0, np.random.default_rng(7))
    source = np.random.default_rng(7)
    nodes = [source.laplace(scale=1.0, size=(8 >> level) + 1) for level in range(4)]
    assert noise[7] == pytest.approx(nodes[3][0])  # prefix 1..8: the root
    assert noise[4] == pytest.approx(nodes[2][0] + nodes[0][4])  # 1..4 and 5
    assert noise[6] == pytest.approx(nodes[2][0] + nodes[1][2] + nodes[0][6])  # 1..4, 5..6, 7


@pytest.mark.parametrize("anchor", ["kaplan_quantiles", "slice_quantiles"])
def test_anchors_are_accurate_on_distinct_data(anchor: str) -> None:
    rng = np.random.default_rng(3)
    values = np.sort(rng.uniform(0.0, 100.0, 50_000))
    quantiles = multiq.strided_levels(10)
    released = getattr(anchors_quantiles, anchor)(values, quantiles, 5.0, 0.0, 100.0, rng)
    errors = [
        multiq.tie_aware_error(values, q, v) for q, v in zip(quantiles, released, strict=True)
    ]
    assert all(0.0 <= v <= 100.0 for v in released)
    assert max(errors) < 100  # about 10 expected at epsilon 5; a wrong target is off by thousands


def test_anchors_release_the_tie_value_after_spreading() -> None:
    values = multiq.dominant_tie(20_000)
    spread = anchors_quantiles.spread_ties(values)
    rng = np.random.default_rng(5)
    for anchor in (anchors_quantiles.kaplan_quantiles, anchors_quantiles.slice_quantiles):
        released = anchor(spread, [0.3, 0.5, 0.6], 1.0, -0.5, 100.5, rng)
        assert [round(v) for v in released] == [40, 40, 40]
