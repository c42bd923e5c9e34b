"""Smoke run of benchmarks/id_hashing.py at --quick: it runs, and both rules agree on ids
that are already canonical."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is not installed; plain `pytest` may not see it
    sys.path.insert(0, str(ROOT))

from beam_dp.batching.hashing import canonical_hash64  # noqa: E402
from benchmarks import id_hashing  # noqa: E402


def test_quick_run_prints_one_row_per_column(capsys: pytest.CaptureFixture[str]) -> None:
    results = id_hashing.main(["--quick"])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(results) == 1 + len(id_hashing.columns(10))
    assert all(exact > 0 and normal > 0 for exact, normal in results.values())


def test_the_rules_agree_where_ids_are_canonical() -> None:
    data = id_hashing.columns(1_000)
    for name in ("int64", "digits as text", "u%08x", "uuid4 hex"):
        exact, normal = canonical_hash64(data[name], "exact"), canonical_hash64(data[name])
        assert np.array_equal(exact[0], normal[0]) and not normal[1].any(), name
