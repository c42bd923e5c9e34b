"""Smoke run of benchmarks/cdf_timing.py at --quick: every section prints, the work is equal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import cdf_timing  # noqa: E402


def test_quick_run_prints_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    cdf_timing.main(["--quick"])
    out = capsys.readouterr().out
    for heading in ("## Small case", "## Acceptance of the plan", "## Other samplers"):
        assert heading in out
    assert "work equal: True" in out
    assert "ratio of medians D'/D" in out


def test_the_reported_pair_differs_by_one_person() -> None:
    d, neighbour = cdf_timing.reported_pair(3, 11)
    assert d[-1] == 6 and neighbour[-1] == 7
    assert [b - a for a, b in zip(d, neighbour, strict=True)] == [0] * 5 + [1] * 6
