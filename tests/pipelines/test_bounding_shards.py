"""The jobs size contribution bounding's shards from the input files' bytes (issue 25): a fixed
32 let each shard's grouped element grow with the rows until a 10^8-row job no longer fitted a
Flink TaskManager (benchmarks/SCALE.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from export_helpers import write_export

import beam_dp.beam._graph as graph
from pipelines import job_run, release, top_candidates
from pipelines.job_run import BYTES_PER_SHARD, MAX_SHARDS, MIN_SHARDS, bounding_shards


def test_one_shard_per_16_mib_of_input_a_power_of_two_within_the_limits() -> None:
    assert bounding_shards(0) == MIN_SHARDS == 32
    assert bounding_shards(32 * BYTES_PER_SHARD) == 32
    assert bounding_shards(32 * BYTES_PER_SHARD + 1) == 64
    assert bounding_shards(100 * BYTES_PER_SHARD) == 128
    assert bounding_shards(1_600_000_000) == 128  # the 10^8-row benchmark export
    assert bounding_shards(160 * 10**9) == 16384  # 10^10 rows
    assert bounding_shards(10**18) == MAX_SHARDS == 1 << 16
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="'input_bytes' must be an integer >= 0"):
            bounding_shards(bad)  # type: ignore[arg-type]


class _Recorded(graph.BoundContributions):  # type: ignore[misc]
    shards: ClassVar[list[int]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Recorded.shards.append(kwargs["num_shards"])


def _rows() -> list[dict[str, Any]]:
    return [{"user_id": f"u{i}", "website": ["a.com", "b.com"][i % 3 == 0]} for i in range(300)]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    _Recorded.shards = []
    monkeypatch.setattr(graph, "BoundContributions", _Recorded)
    return _Recorded.shards


def test_a_job_sizes_its_bounding_shards_from_the_input_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[int]
) -> None:
    pattern = write_export(tmp_path / "in", "parquet", _rows(), shards=2)
    size = sum(path.stat().st_size for path in (tmp_path / "in").iterdir())
    # 64 shards' worth of bytes and one more: the next power of two, 128
    monkeypatch.setattr(job_run, "BYTES_PER_SHARD", size // 65)
    top_candidates.run(
        ["--input", pattern, "--privacy_unit", "user_id", "--epsilon", "4",
         "--candidate", "website", "--candidates", "a.com,b.com", "--k", "1",
         "--output", str(tmp_path / "out")]
    )  # fmt: skip
    assert recorded == [128]
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    assert [r["name"] for r in document["releases"]] == ["top_candidates"]


def test_a_configs_own_num_shards_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[int]
) -> None:
    pattern = write_export(tmp_path / "in", "parquet", _rows(), shards=2)
    size = sum(path.stat().st_size for path in (tmp_path / "in").iterdir())
    monkeypatch.setattr(job_run, "BYTES_PER_SHARD", size // 65)  # 128 shards
    config = tmp_path / "job.toml"
    config.write_text(
        f'[input]\npath = "{pattern}"\nprivacy_unit = "user_id"\n\n'
        "[budget]\nepsilon = 4.0\n\n"
        '[[statistics]]\nname = "top"\ntype = "top_candidates"\ncandidate = "website"\n'
        'candidates = ["a.com", "b.com"]\nk = 1\nnum_shards = 8\n\n'
        '[[statistics]]\nname = "top2"\ntype = "top_candidates"\ncandidate = "website"\n'
        'candidates = ["a.com", "b.com"]\nk = 1\n'
    )
    release.run(["--config", str(config), "--output", str(tmp_path / "out")])
    assert sorted(recorded) == [8, 128]
