"""Typed releases out of the transforms (issue 24): every private transform declares ``Release``
as its output type; ``ReleaseRows`` makes schema'd rows that ``beam.Select`` reads, and
``ReleaseRecords`` dicts that Beam's own ``WriteToAvro`` writes in ``release.avro``'s schema
(read back by fastavro)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
from apache_beam.io.avroio import WriteToAvro
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from beam_dp import (
    RELEASE_AVRO_SCHEMA,
    BestPrice,
    PrivateCDF,
    PrivateMean,
    PrivateQuantiles,
    Release,
    ReleaseRecords,
    ReleaseRow,
    ReleaseRows,
    TopCandidates,
)

ROWS = [
    {"u": i, "c": "a" if i % 3 else "b", "k": "x" if i % 2 else "y", "v": float(i % 10)}
    for i in range(300)
]
VALUES: dict[str, Any] = {"value_column": "v", "lower": 0.0, "upper": 10.0, "unit_column": "u"}


def _releases(pipeline: beam.Pipeline) -> beam.PCollection:
    table = pipeline | beam.Create([pa.Table.from_pylist(ROWS)])
    parts = [
        table
        | "top"
        >> TopCandidates.Globally(
            candidate_column="c", candidates=["a", "b"], unit_column="u", k=2, epsilon=1.0
        ),
        table
        | "per key"
        >> TopCandidates.PerKey(
            candidate_column="c",
            candidates=["a", "b"],
            unit_column="u",
            key_column="k",
            keys=["x", "y"],
            epsilon=1.0,
            name="per_key",
        ),
        table | "price" >> BestPrice.Globally(value_column="v", unit_column="u", epsilon=1.0),
        table | "quantiles" >> PrivateQuantiles.Globally([0.25, 0.75], epsilon=1.0, **VALUES),
        table | "mean" >> PrivateMean.Globally(epsilon=1.0, **VALUES),
        table | "cdf" >> PrivateCDF.Globally(epsilon=1.0, **VALUES),
    ]
    for part in parts:
        assert part.element_type is Release
    return parts | beam.Flatten()


def test_rows_are_schemad_and_selectable() -> None:
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        rows = _releases(pipeline) | ReleaseRows()
        assert rows.element_type is ReleaseRow
        selected = rows | beam.Select("name", "value_kind", "key_text") | beam.Map(tuple)
        assert_that(
            selected,
            equal_to(
                [
                    ("top_candidates", "texts", None),
                    ("per_key", "text", "x"),
                    ("per_key", "text", "y"),
                    ("best_price", "number", None),
                    ("quantiles", "numbers", None),
                    ("mean", "number", None),
                    ("cdf", "cdf", None),
                ]
            ),
            label="select",
        )
        typed = rows | beam.Map(lambda r: (r.name, r.epsilon, r.rng, type(r.accuracy[0]).__name__))
        # .PerKey without max_keys_per_unit: a unit reaches both keys, each release at 1/2.
        assert_that(
            typed,
            equal_to(
                [
                    (name, 1.0, "os_csprng", "ReleaseAccuracyBoundRow")
                    for name in ("top_candidates", "best_price", "quantiles", "mean", "cdf")
                ]
                + [("per_key", 0.5, "os_csprng", "ReleaseAccuracyBoundRow")] * 2
            ),
            label="typed",
        )


def test_beams_own_avro_sink_writes_the_release_schema(tmp_path: Path) -> None:
    prefix = str(tmp_path / "releases")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            _releases(pipeline)
            | ReleaseRecords()
            | WriteToAvro(prefix, schema=RELEASE_AVRO_SCHEMA, file_name_suffix=".avro")
        )
    (path,) = tmp_path.glob("releases*.avro")
    with open(path, "rb") as handle:
        records = list(fastavro.reader(handle))
    assert sorted(r["name"] for r in records) == sorted(
        ["top_candidates", "per_key", "per_key", "best_price", "quantiles", "mean", "cdf"]
    )
    by_name = {r["name"]: r for r in records}
    assert by_name["cdf"]["value_cdf"]["k"] >= 1
    assert len(by_name["quantiles"]["value_numbers"]) == 2
    assert by_name["top_candidates"]["value_texts"] and by_name["mean"]["value_number"] is not None


def test_windowed_releases_name_their_window_in_the_row() -> None:
    elements = [window.TimestampedValue(dict(r, c="a"), 10) for r in ROWS[:150]]
    elements += [window.TimestampedValue(dict(r, c="b"), 70) for r in ROWS[150:]]
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        rows = (
            pipeline
            | beam.Create(elements)
            | beam.WindowInto(window.FixedWindows(60))
            | TopCandidates.Globally(
                candidate_column="c", candidates=["a", "b"], unit_column="u", epsilon=1.0
            )
            | ReleaseRows()
        )
        windows = rows | beam.Map(lambda r: r.window is not None and r.value_kind == "text")
        assert_that(windows, equal_to([True, True]))
