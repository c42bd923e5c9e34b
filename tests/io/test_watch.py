"""The job's own watcher for Beam's BundleBasedDirectRunner (``beam_dp.io.watch``, issue 37
item 3): each file once, stamped by its match time, the stream's end at ``until``, and a
watched export read file by file exactly as the bounded read reads it (bad records, skipped
files)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from export_helpers import write_export

from beam_dp.io import watch
from beam_dp.io.readers import ReadExport, SkippedFile
from beam_dp.io.watch import WatchFiles, stream_runner

_SEEN: list[tuple[str, float]] = []  # the pipeline runs in this process
_LOCK = threading.Lock()


def _keep(element: Any, timestamp: Any = beam.DoFn.TimestampParam) -> None:
    with _LOCK:
        if isinstance(element, SkippedFile):
            _SEEN.append((f"skipped:{Path(element.path).name}", float(timestamp)))
        elif isinstance(element, tuple):
            _SEEN.append((f"{Path(element[0]).name}:{element[1].num_rows}", float(timestamp)))
        else:
            _SEEN.append((Path(element.path).name, float(timestamp)))


def _streaming() -> beam.Pipeline:
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner=stream_runner(options), options=options)


def test_each_file_once_stamped_by_its_match_time_until_the_stream_ends(tmp_path: Path) -> None:
    _SEEN.clear()
    (tmp_path / "a.txt").write_text("a")
    start = time.time()
    landed: dict[str, float] = {}

    def land() -> None:
        while not _SEEN and time.time() < start + 6.0:  # the stream runs (a slow start)
            time.sleep(0.02)
        landed["b.txt"] = time.time()
        (tmp_path / "b.txt").write_text("b")
        time.sleep(0.7)
        (tmp_path / "a.txt").write_text("a rewritten")  # the same name: not again
        (tmp_path / "c.other").write_text("c")  # not the pattern's

    pipeline = _streaming()
    _ = (
        pipeline
        | WatchFiles(str(tmp_path / "*.txt"), interval=0.2, until=start + 8.0)
        | beam.Map(_keep)
    )
    result = pipeline.run()
    lander = threading.Thread(target=land)
    lander.start()
    result.wait_until_finish()  # ends by itself at `until`
    lander.join()
    names = [name for name, _ in _SEEN]
    assert sorted(names) == ["a.txt", "b.txt"], _SEEN
    stamps = dict(_SEEN)
    assert start <= stamps["a.txt"] <= landed["b.txt"]
    assert landed["b.txt"] <= stamps["b.txt"] <= landed["b.txt"] + 0.2 + 2.0  # a late poll
    assert time.time() >= start + 8.0


def test_a_watched_export_is_read_as_the_bounded_read_reads_it(tmp_path: Path) -> None:
    rows = [{"user": f"u{i}", "age": str(20 + i % 50)} for i in range(60)]
    pattern = write_export(tmp_path / "export", "csv", rows, shards=3)
    (tmp_path / "export" / "export-00003.csv").write_bytes(b"user,age\n\xff\xfe,1\n")
    (tmp_path / "export" / "export-00004.csv").write_text("user,age\nu1,2,3\nu2,4\n")

    def read(**watched: Any) -> list[str]:
        _SEEN.clear()
        pipeline = _streaming() if watched else beam.Pipeline()
        _ = (
            pipeline
            | ReadExport(
                pattern, columns=["user", "age"], on_bad_record="skip",
                report_skipped_files=True, **watched,
            )
            | beam.Map(_keep)
        )  # fmt: skip
        pipeline.run().wait_until_finish()
        return sorted(name for name, _ in _SEEN)

    bounded = read()
    watched = read(watch_interval=0.2, watch_until=time.time() + 1.5)
    assert watched == bounded
    assert "skipped:export-00003.csv" in watched and "export-00004.csv:1" in watched


def test_the_direct_runner_streams_on_the_bundle_based_runner_only() -> None:
    for runner in ([], ["--runner", "DirectRunner"], ["--runner", "BundleBasedDirectRunner"]):
        assert isinstance(stream_runner(PipelineOptions(runner)), BundleBasedDirectRunner)
    assert stream_runner(PipelineOptions(["--runner", "FlinkRunner"])) is None


def test_the_service_answers_one_stream_only() -> None:
    class Context:
        def is_active(self) -> bool:
            return True

        def abort(self, code: Any, details: str) -> None:
            raise RuntimeError(details)

    watcher = watch._Watcher("/nonexistent/*.csv", 0.1, 0.0, time.time, lambda: None)
    events = list(watcher.Events(None, Context()))  # `until` passed: one match, then the end
    assert len(events) == 1 and events[0].HasField("watermark_event")
    with pytest.raises(RuntimeError, match="served once"):
        list(watcher.Events(None, Context()))


@pytest.mark.parametrize(
    ("pattern", "interval", "until"),
    [("", 1.0, None), ("a*", 0, None), ("a*", True, None), ("a*", 86_400, None),
     ("a*", 1.0, float("nan"))],
)  # fmt: skip
def test_parameters_are_checked(pattern: str, interval: Any, until: Any) -> None:
    with pytest.raises(ValueError, match=r"'pattern'|'interval'|'until'"):
        WatchFiles(pattern, interval=interval, until=until)
