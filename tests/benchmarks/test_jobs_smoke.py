"""Smoke run of benchmarks/jobs.py at --quick: the jobs and both baselines run (no timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import jobs  # noqa: E402


def test_quick_run_prints_a_row_per_job_with_both_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = jobs.main(["--quick", "--data-dir", str(tmp_path)])

    rows = [line for line in lines if line.startswith(("| quantiles |", "| top_candidates |"))]
    assert len(rows) == len(jobs.JOBS)
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2] == "direct"
        # every process ran to the end: seconds, rates and ratios are numbers, not "exit 1"
        for cell in (cells[3], cells[4], cells[5], cells[7], cells[8], cells[11], cells[12]):
            assert float(cell.replace(",", "")) > 0
    assert "PipelineDP: skipped" in capsys.readouterr().out


def test_generated_data_has_ten_rows_per_unit_and_public_sites(tmp_path: Path) -> None:
    path, candidates = jobs.make_data(tmp_path, 1000)

    table = pq.read_table(path)
    labels = set(candidates.read_text(encoding="utf-8").split())
    assert table.num_rows == 1000 and table.column_names == ["user_id", "value", "site"]
    assert len(set(table.column("user_id").to_pylist())) == 100
    assert set(table.column("site").to_pylist()) <= labels and len(labels) == jobs.NUM_CANDIDATES
