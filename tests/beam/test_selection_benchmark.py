"""Smoke run of benchmarks/top_candidates.py at --quick: it runs and prints its table."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from benchmarks import top_candidates  # noqa: E402


def test_quick_run_measures_every_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = top_candidates.main(["--quick", "--skip-pipelinedp", "--data-dir", str(tmp_path)])

    out = capsys.readouterr().out
    assert set(results) == {"numpy", "numpy_distinct", "beam", "beam_bounded"}
    assert all(m.rows == top_candidates.QUICK.rows and m.rate > 0 for m in results.values())
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(results)
    assert "with bounding:" in out and "of the numpy rate" in out
    # The Zipf-like data has a clear winner that both pipelines find.
    assert results["beam"].note.startswith("chose site-00000; true top site-00000")
    assert results["beam_bounded"].note.startswith("chose site-00000; true top site-00000")


def test_generated_data_has_the_requested_shape(tmp_path: Path) -> None:
    path = top_candidates.generate(tmp_path / "data.parquet", 5_000, 400, 50)
    table = pq.read_table(path)
    assert table.num_rows == 5_000 and table.column_names == ["user_id", "site"]
    users = table.column("user_id").to_numpy()
    assert users.min() >= 0 and users.max() < 400
    labels = set(top_candidates.candidate_labels(50))
    assert set(table.column("site").to_pylist()) <= labels
    counts = top_candidates.numpy_counts(path, sorted(labels))
    distinct = top_candidates.numpy_distinct_counts(path, sorted(labels))
    assert counts.sum() == 5_000 and np.all(distinct <= counts) and counts.argmax() == 0
    assert top_candidates.generate(path, 1, 1, 1) == path  # reused, not regenerated
