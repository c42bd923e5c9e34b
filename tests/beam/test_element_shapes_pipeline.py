"""Per-record elements through the transforms (issue 24): a dict, a ``beam.Row``, a NamedTuple
with a RowCoder, a dataclass per element, from ``beam.Create`` and from Beam's own IO
(``ReadFromParquet``, ``ReadFromAvro(as_rows=True)``, ``beam.Select``), release exactly what the
same records release as Arrow batches: with one seeded source, identical scores give identical
draws and records. Windows are kept.
"""

from __future__ import annotations

import dataclasses
import pickle
import tempfile
import typing
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.avroio import ReadFromAvro
from apache_beam.io.parquetio import ReadFromParquet, ReadFromParquetBatched
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms import window

from beam_dp.beam._transform import BatchRecordsFn
from beam_dp.beam.quantiles import PrivateQuantiles
from beam_dp.beam.selection import TopCandidates
from beam_dp.mechanisms.randomness import InsecureRandomWarning, InsecureSeededRandom
from beam_dp.release import Release

# One seeded source per transform makes the draws a function of the scores alone (tests only).
pytestmark = pytest.mark.filterwarnings(
    f"ignore::{InsecureRandomWarning.__module__}.InsecureRandomWarning"
)


class Visit(typing.NamedTuple):
    user_id: int
    site: str
    seconds: float


beam.coders.registry.register_coder(Visit, beam.coders.RowCoder)


@dataclasses.dataclass(frozen=True)
class VisitRecord:
    user_id: int
    site: str
    seconds: float


SITES = ["a.com", "b.com", "c.com", "d.com"]
# 400 people, 3 visits each, with ties in seconds and ids that repeat across the list.
ROWS = [
    {"user_id": u, "site": SITES[(u * 7 + i) % 4 if u % 3 else 0], "seconds": float((u + i) % 50)}
    for u in range(400)
    for i in range(3)
]


def _transforms() -> list[beam.PTransform]:
    return [
        TopCandidates.Globally(
            candidate_column="site",
            candidates=SITES,
            unit_column="user_id",
            epsilon=0.5,
            rng=InsecureSeededRandom(11),
        ),
        PrivateQuantiles.Globally(
            [0.25, 0.5, 0.75],
            value_column="seconds",
            lower=0.0,
            upper=50.0,
            unit_column="user_id",
            max_contributions=3,
            epsilon=1.0,
            rng=InsecureSeededRandom(12),
        ),
    ]


def _save(release: Release, directory: str) -> None:
    (Path(directory) / uuid.uuid4().hex).write_bytes(pickle.dumps(release))


def _releases(sources: dict[str, Callable[[beam.Pipeline], Any]]) -> dict[str, list[Any]]:
    """The records of both transforms over the elements each source makes (one pipeline)."""
    folders: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            for name, source in sources.items():
                folder = Path(directory) / uuid.uuid4().hex
                folder.mkdir()
                elements = pipeline | f"{name}: source" >> _Source(source)
                for number, transform in enumerate(_transforms()):
                    _ = (
                        elements
                        | f"{name}: {number}" >> transform
                        | f"{name}: save {number}" >> beam.Map(_save, str(folder))
                    )
                folders[name] = folder
        found: dict[str, list[Any]] = {}
        for name, folder in folders.items():
            releases = [pickle.loads(p.read_bytes()) for p in folder.iterdir()]
            records = sorted((r.to_dict() for r in releases), key=lambda r: r["name"])
            for record in records:
                record.pop("released_at", None)
            found[name] = records
    return found


class _Source(beam.PTransform):  # type: ignore[misc]
    def __init__(self, make: Callable[[beam.Pipeline], Any]) -> None:
        super().__init__()
        self._make = make

    def expand(self, pbegin: Any) -> Any:
        return self._make(pbegin.pipeline)


SHAPES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "dict": dict,
    "beam.Row": lambda r: beam.Row(**r),
    "NamedTuple with RowCoder": lambda r: Visit(**r),
    "dataclass": lambda r: VisitRecord(**r),
}


def test_every_record_shape_and_beams_own_io_release_what_batches_release(
    tmp_path: Path,
) -> None:
    table = pa.Table.from_pylist(ROWS)
    parquet = tmp_path / "visits.parquet"
    pq.write_table(table, parquet, row_group_size=300)
    avro = tmp_path / "visits.avro"
    schema = {
        "type": "record",
        "name": "Visit",
        "fields": [
            {"name": "user_id", "type": "long"},
            {"name": "site", "type": "string"},
            {"name": "seconds", "type": "double"},
        ],
    }
    with open(avro, "wb") as handle:
        fastavro.writer(handle, schema, ROWS)
    sources: dict[str, Callable[[beam.Pipeline], Any]] = {
        "Arrow batches": lambda p: p | beam.Create([table.slice(0, 500), table.slice(500)]),
        **{
            shape: (lambda p, make=make: p | beam.Create([make(r) for r in ROWS]))
            for shape, make in SHAPES.items()
        },
        "ReadFromParquet": lambda p: p | ReadFromParquet(str(parquet)),
        "ReadFromParquetBatched": lambda p: p | ReadFromParquetBatched(str(parquet)),
        "ReadFromAvro(as_rows=True)": lambda p: p | ReadFromAvro(str(avro), as_rows=True),
        "beam.Select": lambda p: (
            p
            | beam.Create([Visit(**r) for r in ROWS])
            | beam.Select(user_id="user_id", site="site", seconds="seconds")
        ),
    }
    found = _releases(sources)
    expected = found.pop("Arrow batches")
    assert [r["name"] for r in expected] == ["quantiles", "top_candidates"]
    for name, records in found.items():
        assert records == expected, name


def test_records_keep_their_windows() -> None:
    def timestamped(p: beam.Pipeline) -> Any:
        early = [{**r, "site": "a.com"} for r in ROWS[:600]]
        late = [{**r, "site": "c.com"} for r in ROWS[600:]]
        elements = [window.TimestampedValue(r, 10) for r in early]
        elements += [window.TimestampedValue(r, 70) for r in late]
        return p | beam.Create(elements) | beam.WindowInto(window.FixedWindows(60))

    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                timestamped(pipeline)
                | TopCandidates.Globally(
                    candidate_column="site",
                    candidates=SITES,
                    unit_column="user_id",
                    epsilon=2.0,
                )
                | beam.Map(_save, directory)
            )
        found = [pickle.loads(p.read_bytes()) for p in Path(directory).iterdir()]
    # 200 people per window name one site: another wins with probability < 4 exp(-200) each.
    winners = sorted((str(r.window), r.value) for r in found)
    assert [value for _, value in winners] == ["a.com", "c.com"]


def test_records_are_listed_per_window_and_batches_pass_as_they_are() -> None:
    table = pa.Table.from_pylist(ROWS[:5])
    elements = [window.TimestampedValue({"x": i}, 10 + 60 * (i % 2)) for i in range(7)]
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        lists = (
            pipeline
            | beam.Create([*elements, table])
            | beam.WindowInto(window.FixedWindows(60))
            | beam.ParDo(BatchRecordsFn(size=2))
            | beam.Map(
                lambda e, w=beam.DoFn.WindowParam: (
                    int(w.start),
                    "table" if isinstance(e, pa.Table) else sorted(r["x"] for r in e),
                )
            )
        )

        def check(found: list[Any]) -> None:
            tables = [f for f in found if f[1] == "table"]
            records = [f for f in found if f[1] != "table"]
            assert len(tables) == 1
            by_window: dict[int, list[int]] = {}
            for start, xs in records:
                assert len(xs) <= 2
                by_window.setdefault(start, []).extend(xs)
            assert {k: sorted(v) for k, v in by_window.items()} == {0: [0, 2, 4, 6], 60: [1, 3, 5]}

        assert_that(lists, check)
