"""Smoke run of benchmarks/quantiles.py at --quick: every section runs and prints its table."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import jointexp, quantiles  # noqa: E402


def test_quick_run_prints_every_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = quantiles.main(["--quick", "--data-dir", str(tmp_path)])

    out = capsys.readouterr().out
    for title in ("Median accuracy", "Many quantiles", "Coarse-to-fine", "Throughput"):
        assert any(line.startswith(f"### {title}") for line in lines), title
    assert "| beam-dp, 10,000 points |" in out
    assert any(line.startswith("| gaussian | 3 |") for line in lines)
    assert list(tmp_path.glob("*.parquet"))


def test_metrics_match_their_definitions() -> None:
    data = np.array([1.0, 2.0, 2.0, 3.0, 4.0])
    assert quantiles.rank_error(data, 2.0) == 0.0  # ranks [1, 3] hold 2.5
    assert quantiles.rank_error(data, 3.5) == 1.5  # 4 values below: 4 - 2.5
    assert quantiles.misclassified(data, np.array([2.0]), np.array([3.5])) == 1.0  # 3 only


def test_jointexp_is_accurate_and_sorted_with_a_large_epsilon() -> None:
    rng = np.random.default_rng(3)
    data = np.sort(rng.uniform(-5, 5, 400))
    qs = np.array([0.1, 0.5, 0.9])

    estimates = jointexp.joint_exp(data, qs, lower=-100, upper=100, epsilon=500.0, rng=rng)

    assert list(estimates) == sorted(estimates)
    assert quantiles.misclassified(data, np.quantile(data, qs, method="lower"), estimates) <= 2
    assert jointexp.sensitivity(qs, swap=False) == pytest.approx(2 * (1 - 0.1))
    assert jointexp.sensitivity(qs, swap=True) == 2.0
