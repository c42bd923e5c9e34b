"""Per-record elements through the transforms (issue 24): a dict, a ``beam.Row``, a NamedTuple
with a RowCoder, a dataclass per element, from ``beam.Create`` and from Beam's own IO
(``ReadFromParquet``, ``ReadFromAvro(as_rows=True)``, ``beam.Select``), release exactly what the
same records release as Arrow batches: with one seeded source, identical scores give identical
draws and records. Windows are kept.
"""

from __future__ import annotations

import dataclasses
import decimal
import pickle
import tempfile
import typing
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.avroio import ReadFromAvro
from apache_beam.io.parquetio import ReadFromParquet, ReadFromParquetBatched
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms import window
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from beam_dp.batching.columns import RecordList
from beam_dp.beam._transform import BatchGlobalRecordsFn, BatchRecordsFn, _listed
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
            # 1 001 points, not the default 10^6: the test compares the sources' records with
            # each other (what each shape of element becomes), which the grid's size does
            # not enter; at 10^6 points each of the nine releases cost seconds of sampling.
            num_points=1_001,
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


def _elements_to_classify() -> list[Any]:
    # Plain dicts that are records and that are not, in an order that moves the probed field
    # (the first field of the last dict record) onto a column, a missing field and back.
    return [
        {"user_id": 1, "site": "a.com"},
        {"user_id": [1, 2], "site": ["a.com", "b.com"]},  # a mapping of columns: a batch
        {"user_id": [1], "site": "a.com"},  # probed field a list, another field one value
        {"site": "b.com"},  # the probed field missing
        {},  # a heartbeat
        {"user_id": np.int64(3), "site": np.str_("c.com")},
        {"user_id": None},
        {"site": pa.array(["a.com"])},  # a mapping of one column
        {"user_id": (1, 2)},  # a tuple is a column: a mapping of columns
        {"user_id": decimal.Decimal(5), "site": "d.com"},
        beam.Row(user_id=4, site="a.com"),
        VisitRecord(5, "b.com", 1.0),
        pa.record_batch({"user_id": [6]}),
        (1, 2.0),
    ]


@pytest.mark.parametrize("windowed", [False, True])
def test_the_batching_dofns_list_exactly_the_records_the_rule_names(windowed: bool) -> None:
    # The per-record fast test (a probed field's exact scalar type) never lists what the rule
    # (_listed) does not, nor misses what it lists; the lists are RecordLists, which the
    # encode step reads into the fields it needs only (issue 24, speed).
    elements = _elements_to_classify()
    fn: Any = BatchRecordsFn(size=100) if windowed else BatchGlobalRecordsFn(size=100)
    fn.start_bundle()
    passed: list[Any] = []
    for element in elements:
        if windowed:
            out = list(fn.process(element, window=GlobalWindow(), timestamp=Timestamp(0)))
        else:
            out = list(fn.process(element))
        passed.extend(out)
    lists = [wv.value for wv in fn.finish_bundle()]
    assert len(lists) == 1 and type(lists[0]) is RecordList
    assert [id(e) for e in lists[0]] == [id(e) for e in elements if _listed(e)]
    assert [id(e) for e in passed] == [id(e) for e in elements if not _listed(e)]
    assert len(lists[0]) == 8 and len(passed) == 6
