"""On Flink, bounded input is read one file per key and bounded through keyed state (issue 25).

Flink's batch runner keeps a stage's whole output on the TaskManager's heap until the stage's
bundle ends, and a stage without state gets one bundle for its whole share of the input; a
keyed stage with state gets one bundle per key. So on Flink the export is read as a keyed
step (one file per bundle) and each bounding shard is gathered in state and bounded when its
input has ended, instead of after a ``GroupByKey``. These tests run both paths on the
in-process runner, which supports state and timers, and check they keep the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.flink_runner import FlinkRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from export_helpers import write_export

import beam_dp.beam._contributions as contributions
import beam_dp.io.readers as readers
from beam_dp.batching import UNIT, VALUE, ContributionBounds
from beam_dp.beam._contributions import BoundContributions, EncodeBatches
from beam_dp.io import ReadExport


def _batches(seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            UNIT: rng.integers(0, 300, 4_000).astype(np.uint64),
            VALUE: rng.normal(size=4_000),
        }
        for _ in range(12)
    ]


def _rows(found: list[tuple[Any, Any]]) -> tuple[np.ndarray, np.ndarray]:
    units = np.concatenate([batch[UNIT] for batch, _ in found])
    values = np.concatenate([batch[VALUE] for batch, _ in found])
    order = np.lexsort((values, units))
    return units[order], values[order]


@pytest.mark.parametrize("bound", [1, 3])
def test_bounding_through_state_keeps_the_rows_the_shuffle_keeps(
    collect: Any, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    data = _batches(bound)
    bounds = ContributionBounds(max_contributions_per_unit=bound)

    def build(pipeline: beam.Pipeline) -> Any:
        return (
            pipeline
            | beam.Create(data, reshuffle=False)
            | BoundContributions(bounds, num_shards=8, salt=11)
        )

    monkeypatch.setattr(contributions, "groups_with_state", lambda pipeline: False)
    shuffled = _rows(collect(build))
    monkeypatch.setattr(contributions, "groups_with_state", lambda pipeline: True)
    monkeypatch.setattr(contributions, "PIECE_ROWS", 10)  # several pieces per shard
    found = collect(build)
    with_state = _rows(found)

    # every unit's rows leave in one batch, as the steps after bounding require
    assert len(found) > 8
    units_per_batch = [np.unique(batch[UNIT]) for batch, _ in found]
    every = np.concatenate(units_per_batch)
    assert every.size == np.unique(every).size

    units_seen = np.unique(np.concatenate([batch[UNIT] for batch in data]))
    assert with_state[0].size == units_seen.size * bound  # every unit has more rows than that
    assert np.bincount(with_state[0].astype(np.int64)).max() == bound
    np.testing.assert_array_equal(with_state[0], shuffled[0])
    np.testing.assert_array_equal(with_state[1], shuffled[1])


@pytest.mark.parametrize("max_rows", [1, 7, 50, 10_000])
def test_pieces_are_cut_only_between_units(max_rows: int) -> None:
    rng = np.random.default_rng(max_rows)
    units = rng.integers(0, 60, 900).astype(np.uint64)
    batch = {UNIT: units, VALUE: np.arange(900, dtype=np.float64)}
    pieces = list(contributions.split_between_units(batch, max_rows))
    seen = np.concatenate([np.unique(piece[UNIT]) for piece in pieces])
    assert seen.size == np.unique(seen).size == np.unique(units).size
    values = np.sort(np.concatenate([piece[VALUE] for piece in pieces]))
    np.testing.assert_array_equal(values, batch[VALUE])
    largest_unit = int(np.bincount(units.astype(np.int64)).max())
    assert max(piece[UNIT].size for piece in pieces) < max_rows + largest_unit
    if max_rows < 900:
        assert len(pieces) > 1


def test_the_keyed_paths_are_taken_on_flink_only() -> None:
    flink = beam.Pipeline(runner=FlinkRunner())
    in_process = beam.Pipeline(runner=FnApiRunner())
    assert contributions.groups_with_state(flink)
    assert readers.reads_by_file_key(flink)
    assert not contributions.groups_with_state(in_process)
    assert not readers.reads_by_file_key(in_process)
    assert not contributions.groups_with_state(beam.Pipeline())


@pytest.mark.parametrize("fmt", ["parquet", "csv", "avro"])
def test_reading_by_file_key_reads_what_the_spread_read_reads(
    collect: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fmt: str
) -> None:
    rows = [{"user": f"u{i % 7}", "price": float(i)} for i in range(40)]
    pattern = write_export(tmp_path / fmt, fmt, rows, shards=4)

    def build(pipeline: beam.Pipeline) -> Any:
        return (
            pipeline
            | ReadExport(pattern, columns=["user", "price"], avro_split_bytes=200)
            | EncodeBatches(unit_column="user", value_column="price", on_bad_record="fail")
        )

    monkeypatch.setattr(readers, "reads_by_file_key", lambda pipeline: False)
    spread = sorted(np.concatenate([batch[VALUE] for batch, _ in collect(build)]).tolist())
    monkeypatch.setattr(readers, "reads_by_file_key", lambda pipeline: True)
    keyed = collect(build)
    assert sorted(np.concatenate([batch[VALUE] for batch, _ in keyed]).tolist()) == spread
    assert spread == [float(i) for i in range(40)]
