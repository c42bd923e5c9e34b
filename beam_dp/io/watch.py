"""Watch a landing location for new files on Beam's BundleBasedDirectRunner (offline).

Beam's own watched match (``fileio.MatchContinuously``, a splittable DoFn, as is
``PeriodicImpulse``) does not run on the Python BundleBasedDirectRunner in streaming mode (the
pipeline is refused when it is built: "... ProcessKeyedElements/GroupByKey ... was not
replaced as expected"), and Beam's ``DirectRunner`` hands a streaming pipeline to Prism, a
binary it downloads (so it fails offline). What that runner does run unbounded is a
``TestStream`` whose events come from a ``TestStreamService`` (``TestStream(endpoint=...)``):
:class:`WatchFiles` serves such a stream of its own, from this process, on 127.0.0.1.

**The watcher (the same rules as the Flink path's ``MatchContinuously``).** Every ``interval``
seconds it matches the pattern; each file whose path it has not emitted before is emitted once
(a rewrite under the same name is not emitted again; a copy under a new name is a new file),
as its :class:`~apache_beam.io.filesystem.FileMetadata`, timestamped by the match's time (the
wall clock, never earlier than the last watermark), in path order; then the watermark advances
to that time. Between two matches the watermark advances with the clock (at least once a second),
so windows close while no file lands. A match that finds nothing is an empty poll, not an error
(a landing location starts empty).

**When it stops.** At ``until`` (Unix seconds; None: never by itself) the stream ends after a
last match: its watermark goes to the end of time and the pipeline ends once every window
fired, as ``MatchContinuously(stop_timestamp=...)`` does. Otherwise it runs until the pipeline
is cancelled (``PipelineResult.cancel()``, what the stream job's driver does when it stops) or
the process exits. The service answers one stream only (the pipeline's): a second client on
the port is refused, so no other process can take the pipeline's files.

File names are public; nothing here reads a file's content.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apache_beam as beam
import grpc  # type: ignore[import-untyped]
from apache_beam import coders
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import (
    beam_interactive_api_pb2_grpc,
    beam_runner_api_pb2,
)
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.runner import PipelineRunner
from apache_beam.testing.test_stream import TestStream

__all__ = ["WatchFiles", "stream_runner", "watches_in_process"]

#: The runner names that run a stream in this process (Beam's DirectRunner and its bundle-based
#: form); any other ``--runner`` is left to Beam.
_DIRECT_NAMES = frozenset({"directrunner", "bundlebaseddirectrunner", "switchingdirectrunner"})

#: The longest the watermark waits between two advances (seconds): Beam's reader of the
#: service gives up after 30 s without an event.
_HEARTBEAT_SECONDS = 1.0

#: How long the service's stop waits for its stream's last events to reach the pipeline.
_GRACE_SECONDS = 5.0

_Entry = tuple[str, int, float]  # a file's path, size in bytes, last modified (Unix seconds)
_ENTRY_CODER = coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder(), coders.FloatCoder()])


def stream_runner(options: PipelineOptions) -> PipelineRunner | None:
    """The runner a streaming job builds its pipeline with: Beam's BundleBasedDirectRunner for
    the DirectRunner (or no ``--runner``), so the pipeline never goes to Prism; None (Beam's
    choice from ``--runner``) for any other runner."""
    name = options.view_as(StandardOptions).runner
    if name is None or str(name).lower() in _DIRECT_NAMES:
        return BundleBasedDirectRunner()
    return None


def watches_in_process(pipeline: beam.Pipeline) -> bool:
    """Whether a watched export in ``pipeline`` is read with :class:`WatchFiles` (the pipeline
    runs on Beam's BundleBasedDirectRunner) rather than ``fileio.MatchContinuously``."""
    return isinstance(getattr(pipeline, "runner", None), BundleBasedDirectRunner)


def _match(pattern: str) -> list[_Entry]:
    """The files ``pattern`` matches now, in path order (none: an empty list)."""
    try:
        results = FileSystems.match([pattern])
    except Exception:  # Beam raises when nothing matches; a folder may start empty
        return []
    return sorted(
        (str(m.path), int(m.size_in_bytes), float(m.last_updated_in_seconds or 0.0))
        for result in results
        for m in result.metadata_list
    )


class _Watcher(beam_interactive_api_pb2_grpc.TestStreamServiceServicer):
    """The events of one watched pattern: new files, then the watermark, every interval."""

    def __init__(
        self,
        pattern: str,
        interval: float,
        until: float | None,
        clock: Callable[[], float],
        on_end: Callable[[], None],
    ) -> None:
        self._pattern = pattern
        self._interval = interval
        self._until = until
        self._clock = clock
        self._on_end = on_end
        self._lock = threading.Lock()
        self._served = False

    def Events(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802 (gRPC's name)
        del request
        with self._lock:
            first, self._served = not self._served, True
        if not first:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the watch is served once")
        try:
            yield from self._events(context)
        finally:
            self._on_end()

    def _events(self, context: Any) -> Iterator[Any]:
        seen: set[str] = set()
        mark = 0.0
        next_match = 0.0
        while context.is_active() and threading.main_thread().is_alive():
            now = max(self._clock(), mark)
            if now >= next_match:
                last = self._until is not None and now >= self._until
                new = [entry for entry in _match(self._pattern) if entry[0] not in seen]
                seen.update(path for path, _, _ in new)
                if new:
                    yield _elements(new, now)
                yield _watermark(now)
                mark = now
                if last:
                    return  # the stream ends: the watermark goes to the end of time
                next_match = now + self._interval
            else:
                yield _watermark(now)
                mark = now
            time.sleep(min(_HEARTBEAT_SECONDS, max(next_match - self._clock(), 0.01)))


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _elements(entries: list[_Entry], at: float) -> Any:
    payload = beam_runner_api_pb2.TestStreamPayload
    return payload.Event(
        element_event=payload.Event.AddElements(
            elements=[
                beam_runner_api_pb2.TestStreamPayload.TimestampedElement(
                    encoded_element=_ENTRY_CODER.encode(entry), timestamp=_micros(at)
                )
                for entry in entries
            ]
        )
    )


def _watermark(at: float) -> Any:
    payload = beam_runner_api_pb2.TestStreamPayload
    return payload.Event(watermark_event=payload.Event.AdvanceWatermark(new_watermark=_micros(at)))


def _metadata(entry: _Entry) -> FileMetadata:
    path, size, modified = entry
    return FileMetadata(path, size, modified)


class WatchFiles(beam.PTransform):
    """The files ``pattern`` matches, each once, as they land: an unbounded PCollection of
    ``FileMetadata`` timestamped by their match time (see the module docstring).

    For Beam's BundleBasedDirectRunner (:func:`watches_in_process`); on other runners use
    ``fileio.MatchContinuously``, whose rules these are. The service starts when the transform
    is applied and stops when its stream ends.

    Args:
        pattern: a glob (local or any Beam filesystem).
        interval: seconds between two matches, in (0, 86400).
        until: Unix seconds after which the stream ends (None: when the pipeline is cancelled).
        clock: the wall clock (tests may pass another).
    """

    def __init__(
        self,
        pattern: str,
        *,
        interval: float,
        until: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"'pattern' must be a file pattern; received {pattern!r}")
        if not (
            isinstance(interval, (int, float))
            and not isinstance(interval, bool)
            and 0 < interval < 86_400
        ):
            raise ValueError(f"'interval' must be seconds in (0, 86400); received {interval!r}")
        if until is not None and not (
            isinstance(until, (int, float)) and not isinstance(until, bool) and until == until
        ):
            raise ValueError(f"'until' must be Unix seconds or None; received {until!r}")
        self._pattern = pattern
        self._interval = float(interval)
        self._until = None if until is None else float(until)
        self._clock = clock

    def expand(self, pbegin: PBegin) -> PCollection:
        server = grpc.server(ThreadPoolExecutor(max_workers=2))
        watcher = _Watcher(
            self._pattern,
            self._interval,
            self._until,
            self._clock,
            lambda: server.stop(_GRACE_SECONDS),  # the stream's end reaches its reader first
        )
        beam_interactive_api_pb2_grpc.add_TestStreamServiceServicer_to_server(watcher, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        entries = pbegin | "Watch" >> TestStream(coder=_ENTRY_CODER, endpoint=f"127.0.0.1:{port}")
        files: PCollection = entries | "Metadata" >> beam.Map(_metadata)
        return files
