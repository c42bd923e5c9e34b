"""Smoke run of the JointExp protocol in benchmarks/jointexp.py at --quick."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import jointexp  # noqa: E402


def test_quick_run_prints_cells_ranges_and_times(capsys: pytest.CaptureFixture[str]) -> None:
    lines = jointexp.main(["--quick"])
    out = capsys.readouterr().out
    assert "reimplementation" in out  # no --original: the report names its peer
    cells = [line for line in lines if line.startswith(("| gaussian |", "| uniform |"))]
    assert len(cells) == 2 * 2  # m = 1 and 4, two distributions
    ranges = [
        line.split(" | ")[0] for line in lines if line.startswith("| 1-2 ") or "| 3-12 " in line
    ]
    assert ranges == ["| 1-2", "| 3-12"]
    assert any(line.startswith("| 1-29 |") for line in lines)


def test_range_ratio_and_its_standard_error() -> None:
    ours = [2.0, 4.0, 6.0, 8.0]
    ratio, se = jointexp.range_ratio(ours, [1.0, 2.0, 3.0, 4.0])
    assert ratio == pytest.approx(2.0) and se == pytest.approx(0.0, abs=1e-12)  # exactly 2x
    rng = np.random.default_rng(3)
    a, b = rng.exponential(2.0, 4000), rng.exponential(1.0, 4000)
    ratio, se = jointexp.range_ratio(a, b)
    assert abs(ratio - 2.0) < 5 * se and 0 < se < 0.1
    with pytest.raises(ValueError, match="paired"):
        jointexp.range_ratio([1.0, 2.0], [1.0])


def test_original_snapshot_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--original"):
        jointexp.load_original(str(tmp_path / "missing"))
