"""Smoke run of the whole-job part of benchmarks/many_keys.py (a small .PerKey job)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import many_keys  # noqa: E402


def test_quick_per_key_job_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    many_keys.main(["--quick", "--no-opendp", "--job", "--only-jobs", "--job-part", "per_key"])

    out = capsys.readouterr().out
    assert "Whole TopCandidates.PerKey job" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for d in (2, 10):
        for method in many_keys.METHODS:
            assert any(line.startswith(f"| {d} | {method} | ") for line in rows)
    assert "best_price" not in out


def test_only_jobs_needs_job() -> None:
    with pytest.raises(SystemExit):
        many_keys.main(["--quick", "--only-jobs"])
