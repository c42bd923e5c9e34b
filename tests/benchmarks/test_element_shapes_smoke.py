"""Smoke run of benchmarks/element_shapes.py at --quick: every pipeline runs and both ratios
print (no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import element_shapes  # noqa: E402


def test_quick_run_prints_every_pipeline_and_both_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    element_shapes.main(["--quick"])
    out = capsys.readouterr().out
    for name in element_shapes.pipelines("unused"):
        assert name in out
    assert out.count("x, CPU") == 2
    assert "target: per-record release" in out
