"""The streaming job: statistics released per window, from export shards landing in a location.

    python -m pipelines.stream --config job.toml --landing 'landing/*.parquet' \\
        --state state/ --output out/ --window_seconds 3600 \\
        [--event_time FIELD [--event_time_format seconds|iso8601] \\
         --allowed_lateness SECONDS] [--stop_after_windows N] \\
        [--stop_file PATH] [--ledger URL --dataset NAME] --runner FlinkRunner --streaming

The config is the release job's (``python -m pipelines.release --help``): ``[input]`` (its
``path`` is replaced by ``--landing``), ``[budget]`` (each person's budget over the whole job:
each window's releases spend it divided by ``--max_windows_per_unit``) and the
``[[statistics]]``. What the job does, in order:

* **Windows.** Records go to fixed windows of ``--window_seconds``: by the time their file was
  matched (arrival time, the default) or by an event-time field (``--event_time``). The
  field holds, with ``--event_time_format seconds`` (the default), a number of seconds since
  the epoch (a number, or text holding a decimal number, as CSV gives it) or a timestamp;
  with ``--event_time_format iso8601``, a timestamp or ISO 8601 text with an explicit offset
  (``2027-01-15T08:30:00Z``, ``2027-01-15 09:30:00.25+01:00``; digits past microseconds are
  cut). An event time that is null, not finite, or not of the format is a bad record: dropped
  under ``on_bad_record = "skip"``, and under ``"fail"`` the job ends naming the file and the
  field, never the value. A window's statistics are released once the watermark
  passes its end plus ``--allowed_lateness`` (event time only). **Late data** (public rule): a
  record whose window ended more than the allowed lateness before its file was matched is
  dropped, as is a record of a window without budget (below).
* **Budget per window, before any of its data is read, once the pipeline reads.** The job
  reserves each window's budget in the ledger (``--ledger``/``--dataset``) and records its
  decision in ``--state`` before the window admits a record. What is charged when:

  - **nothing before this run's pipeline reads.** A pipeline starting (Flink: tens of
    seconds), or waiting for its first shard, charges no window. The first batch a worker
    reads (whatever it holds, even no valid record) makes it write a marker,
    ``scratch/<run>/reading.json``, holding the run's number only (no data, no count); the
    worker then holds that batch until the job's process has granted (at most ten
    ``--poll_seconds`` plus ``--ledger_timeout``; past that its rows find no grant and are
    dropped);
  - **then, the window of the clock and the ``--grant_ahead`` next ones**, each reserved and
    charged its share once, when the clock reaches ``--grant_ahead`` windows before it,
    whether or not records come (the pipeline reads: each such window can admit records).
    Windows that closed before the pipeline read are never granted nor charged;
  - **a restart charges nothing new before its own pipeline reads**: the windows it takes
    over from an earlier run (below) keep the ledger run that run charged.

  A window the ledger refuses (its period has no budget left) admits no record and releases
  nothing; the outputs say so. ``history`` shows one run per window.
* **Each person across windows.** Every statistic keeps each person's records in at most
  ``max_windows_per_unit`` windows over the job's life (``[stream]``-wide, from the flag of
  that name; the pipeline's per-person state), and each window's release runs at the config's
  budget divided by that bound. A person's loss over the whole job is at most the config's
  budget; the ledger charges every window its share (``budget / max_windows_per_unit``), so
  what it shows spent is an upper bound. The summary printed at the end says both: ``budget
  per window`` (the share) and each person's bound over the job.
* **A shard landing twice: the bounds alone.** Rows are bounded per person, whatever file
  they come from: however often a person's rows land (a shard rewritten under the same name
  and read again, a copy under a new name), they count in at most ``max_windows_per_unit``
  windows and, in a window, within each statistic's rows (keys, candidates) per person, so a
  duplicate never raises a person's privacy loss above the stated bound; it can change a
  release's value as any of that person's rows can. The watcher reads each file name once per
  run (a rewrite under the same name is not read again by that run; a restarted run matches
  the landing location anew, and a copy is a new file). No content digest is kept: remove
  duplicates upstream where the statistics must not see them.
* **Exactly once per window.** Each window's releases are gathered into one element and
  committed as one file (``pipelines.execute``'s rule, per window); the job's own process
  publishes each window once, only if it holds exactly the planned releases, after the ledger
  committed the window's run. A window that fails this check is not published and stays
  charged; the job goes on.
* **Outputs that grow**: ``release.json`` (every window so far, with the windows without
  budget), ``releases.jsonl`` (one line per release), ``release.avro`` and ``report.html``,
  published again after each window **all or nothing**, as the batch jobs publish
  (``beam_dp.io.outputs``): the four files and a ``release.manifest.json`` naming them appear
  together (locally one rename of a staged folder), so a reader of ``--output`` finds the
  earlier whole set or the new one whenever the job is killed, never files of two windows'
  publications.
* **The summary at the end.** When the job stops it prints what the batch jobs print
  (``pipelines.summary``): the releases of every published window and their accuracy, then
  what the ledger charged this job (every run of it that stays charged: one per window
  granted, on any run of the job on this ``--state``) and what the period has left.
* **Restarts.** ``--state`` remembers the job (its config and flags), each run of it on this
  state (``attempts/<n>.json``: the windows each person may be in during that run) and each
  window: granted (to which run, with which ledger run), refused, published, failed or
  abandoned. Each run's pipeline commits its windows' releases under ``scratch/<run>/`` and
  admits records only into the windows granted to that run. A job started again on the same
  ``--state`` (after a stop, a crash or a SIGKILL at any point) first settles what earlier
  runs left, in this order:

  - a window is **used** if its releases may exist: published, failed its check, committed
    to its run's scratch location, or its ledger run committed. A used window not yet
    published is published now, once (its ledger run committed unless it already is), and
    the outputs are rewritten from every published window's committed releases, so a kill
    between the ledger's commit, the "published" record and the outputs loses nothing and
    repeats nothing;
  - every other window granted to an earlier run is taken from it: whatever that run's
    pipeline writes for it later (a Flink job may outlive its driver) is never read. It is
    granted again to the new run (its ledger run reused, never charged twice) if it can
    still admit records and the new run may grant it; otherwise it is abandoned (its ledger
    run too: it stays charged);
  - each person keeps the windows they used. A window's commit (the one file its releases
    are committed in, ``scratch/<run>/<window>.json``) also names every person admitted into
    it, in the same atomic file, so its releases and its persons exist together or not at
    all. A person is named by a **keyed hash**: BLAKE2b, keyed with the job's secret
    (``person_key.json``, 32 bytes from the OS CSPRNG, made once per ``--state``), of the
    stable unit hash every statistic bounds by (``beam_dp.batching.canonical_hash64``, the
    same identity rule), never an id. The restart counts, for each person, the used windows
    that name them; a used window that names no one (its releases may exist but its commit
    is missing, e.g. a ledger run committed by a run killed before its pipeline's commit, or
    a state of an earlier version of the job) counts for **everyone**, up to its run's own
    per-person bound (``Σ over runs of min(bound, used windows)``). The new run's pipeline
    starts each person's window state from those counts (``scratch/<run>/used_windows.json``,
    written before the pipeline starts and read by its workers): a person admitted into
    ``max_windows_per_unit`` windows is admitted into none, the others into what they have
    left, and the job goes on (it no longer stops after a restart). Only when the windows
    that count for everyone reach ``max_windows_per_unit`` does the job publish what was
    pending and refuse to admit records (start a new job with a new ``--state``: its windows
    are charged anew, and every person gets fresh windows). A job without a privacy unit
    (``record_level``) names no one: every used window counts for everyone, and a restart
    after some were used grants at most what is left of the bound, then stops;
  - **why the job's own state, not Flink's savepoints**: it works on every runner (Flink,
    the DirectRunner, any other), on a crash as on a stop (a savepoint must be taken before
    the job stops; a SIGKILL leaves none, and the embedded ``[local]`` Flink keeps no state
    across processes), and a restart can prove what it resumes from (every window's persons
    are committed with its releases, or counted for everyone). **Upgrading** the job: stop
    it (``--stop_file``, or kill it: a window in flight is finished once or not at all), then
    start the new version on the same ``--state`` with the same config and flags.
  - **size**: the persons grow with people, not rows: each window's commit holds one number
    (≤ 20 digits) per distinct person admitted into it; a restart reads every used window's
    persons and keeps one count per distinct person (the driver), and each worker of the
    new pipeline one row of ``max_windows_per_unit`` slots per person it has seen or who
    used windows before (8 bytes each). The keyed hashes stay in ``--state``: never in the
    outputs, the logs or the ledger.

  So no person's records are in more than ``max_windows_per_unit`` published windows across
  any sequence of kills and restarts. Windows keep their budget share
  (``budget / max_windows_per_unit``) whatever the run.
* **A private state.** ``--state`` holds releases not yet published (``scratch/<run>/``):
  on a local filesystem the job makes ``--state`` (if it is missing) and every folder in it
  mode 0700, and every file it writes there (its ``.partial`` file too, before a byte is
  written) mode 0600, whatever the umask; each file is written whole beside its final name
  and renamed into place. On an object store the bucket's access rules apply.

**Runners.** On Flink (``make engines``; ``--runner FlinkRunner --flink_version 1.19``) the
landing location is watched by Beam's ``fileio.MatchContinuously``. On the DirectRunner (the
default; offline, one process) the job builds Beam's BundleBasedDirectRunner itself (never
Prism, which Beam's DirectRunner would download for a streaming pipeline) and watches with its
own watcher (:mod:`beam_dp.io.watch`), by the same rules: the location matched every
``--poll_seconds``, each new file read once and timestamped by its match time, the watermark
advancing with the clock; the same landings give the same windows, rows and planned releases.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders import PickleCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
)
from apache_beam.pvalue import PCollection
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.combiners import ToListCombineFn
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from beam_dp import BeamDPError, LedgerEntry, PrivacyBudget, ReadExport, Release, SkippedFile
from beam_dp.jobs import (
    WindowAdmissions,
    canonical_hash64,
    data_error,
    ledger_entries_to_record,
    stream_runner,
    write_outputs,
)
from beam_dp.ledger import Cost, LedgerError, Plan, Reservation, RunInfo, open_ledger
from pipelines._state import LOG
from pipelines.cli import SKIP_HINT_CONFIG, cli
from pipelines.execute import PlannedRelease, ReleaseCheckError, check_releases
from pipelines.flags import JOB_EPILOG, add_operator_arguments, job_parser, parse_args
from pipelines.job_run import check_input_columns, check_privacy_unit, named_columns
from pipelines.ledger_charge import check_ledger_flags
from pipelines.release import config_keys_help, load_config
from pipelines.statistics import StatisticSpec, spec_from_config
from pipelines.summary import print_summary

__all__ = ["StreamState", "WindowClock", "main", "run"]

_MICRO = 1e-6


# ---------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class WindowClock:
    """Fixed windows of ``size`` seconds; ``lateness`` seconds of allowed lateness.

    Window ``k`` holds the records of ``[k*size, (k+1)*size)`` (event or arrival time); Beam
    sees it shifted by the lateness, ``[k*size + lateness, (k+1)*size + lateness)``, so that it
    fires once, when the watermark passes the end plus the lateness.
    """

    size: int
    lateness: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"--window_seconds must be an integer >= 1; received {self.size!r}")
        if isinstance(self.lateness, bool) or not isinstance(self.lateness, int):
            raise ValueError(f"--allowed_lateness must be an integer; received {self.lateness!r}")
        if self.lateness < 0:
            raise ValueError("--allowed_lateness must be >= 0 seconds")

    def index(self, seconds: float) -> int:
        return math.floor(seconds / self.size)

    def beam_windows(self) -> beam_window.FixedWindows:
        return beam_window.FixedWindows(self.size, offset=self.lateness % self.size)

    def closes_at(self, index: int) -> float:
        """When window ``index`` stops admitting records (its end plus the lateness)."""
        return (index + 1) * self.size + self.lateness

    def label(self, index: int) -> str:
        start = datetime.fromtimestamp(index * self.size, UTC)
        end = datetime.fromtimestamp((index + 1) * self.size, UTC)
        return f"[{start.isoformat()}, {end.isoformat()})"


# ---------------------------------------------------------------------------- state


def private_folder(location: str) -> None:
    """Make ``location`` if it is missing: on a local filesystem mode 0700 whatever the umask
    (its missing parents as the umask gives them); object stores have no folders to make."""
    if "://" in location:
        return
    folder = Path(location)
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:  # made meanwhile (a worker, or this job's other thread)
        return
    os.chmod(folder, 0o700)


def write_whole(final: str, data: bytes) -> None:
    """Write ``final`` whole: ``data`` into a ``.partial`` file beside it, renamed into place.

    On a local filesystem the partial file is created 0600 (``fchmod``: whatever the umask)
    before a byte is written, is on disk before the rename, and replaces ``final`` in one
    ``rename(2)``. Elsewhere through Beam's filesystems (the store's own access rules).
    """
    partial = final + f".{uuid.uuid4().hex}.partial"
    if "://" not in final:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, final)
        return
    with FileSystems.create(partial) as handle:
        handle.write(data)
    if FileSystems.exists(final):
        FileSystems.delete([final])
    FileSystems.rename([partial], [final])


class StreamState:
    """The job's state location (any Beam filesystem): what the job is, and per window what
    was granted and published. Written by this process only (the workers write the scratch
    files); read by the workers' admission step (the grants). Every file is written whole and
    renamed into place, private on a local filesystem (:func:`write_whole`)."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")

    def path(self, *parts: str) -> str:
        return FileSystems.join(self.location, *parts)

    def read(self, *parts: str) -> Any:
        path = self.path(*parts)
        if not FileSystems.exists(path):
            return None
        with FileSystems.open(path) as handle:
            return json.loads(handle.read().decode("utf-8"))

    def write(self, value: Any, *parts: str) -> None:
        for depth in range(len(parts)):  # the location and each folder on the way: private
            private_folder(self.path(*parts[:depth]) if depth else self.location)
        write_whole(self.path(*parts), json.dumps(value, sort_keys=True).encode("utf-8"))

    def window(self, index: int) -> dict[str, Any] | None:
        found = self.read("windows", f"{index}.json")
        return found if isinstance(found, dict) else None

    def set_window(self, index: int, record: dict[str, Any]) -> None:
        self.write({"window": index, **record}, "windows", f"{index}.json")

    def windows(self) -> dict[int, dict[str, Any]]:
        return self._numbered("windows")

    def attempts(self) -> dict[int, dict[str, Any]]:
        """Every run of the job on this state (``attempts/<n>.json``), by number."""
        return self._numbered("attempts")

    def scratch(self, attempt: int) -> str:
        """Where the pipeline of run ``attempt`` commits its windows' releases."""
        return self.path("scratch", str(attempt))

    def releases_file(self, attempt: int, index: int) -> str:
        return FileSystems.join(self.scratch(attempt), f"{index}.json")

    def reading_marker(self, attempt: int) -> str:
        """Written by run ``attempt``'s pipeline when it first reads a batch (no data in it)."""
        return FileSystems.join(self.scratch(attempt), READING_MARKER)

    def grants_marker(self, attempt: int) -> str:
        """Written by run ``attempt``'s own process once it granted windows after the first."""
        return FileSystems.join(self.scratch(attempt), GRANTS_MARKER)

    def _numbered(self, folder: str) -> dict[int, dict[str, Any]]:
        pattern = self.path(folder, "*.json")
        found = FileSystems.match([pattern])[0].metadata_list
        out: dict[int, dict[str, Any]] = {}
        for metadata in found:
            name = metadata.path.rsplit("/", 1)[-1].removesuffix(".json")
            if name.lstrip("-").isdigit():
                record = self.read(folder, f"{name}.json")
                if isinstance(record, dict):
                    out[int(name)] = record
        return out


# ---------------------------------------------------------------------------- the pipeline


EVENT_TIME_FORMATS = ("seconds", "iso8601")

#: In ``scratch/<run>/``: the pipeline is reading (written from its first batch; it holds the
#: run's number only) and the job's process granted the windows of the clock after that.
READING_MARKER = "reading.json"
GRANTS_MARKER = "grants.json"

# A decimal number of seconds as text (CSV reads every field as text): digits, an optional
# fraction and exponent; no "nan", "inf", hex or digit separators.
_SECONDS_TEXT = r"^\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"
# ISO 8601 date and time with an explicit offset: 2027-01-15T08:30:00Z,
# 2027-01-15 08:30:00.123456789+01:00, 2027-01-15T08:30-0500 (fraction truncated to µs).
_ISO_TEXT = re.compile(
    r"\s*([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2})"
    r"(?::([0-9]{2})(?:[.,]([0-9]+))?)?"
    r"(?:([Zz])|([+-])([0-9]{2}):?([0-9]{2}))\s*"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso_seconds(text: object) -> float:
    """Seconds since the epoch of one ISO 8601 text with an explicit offset; NaN if it is not
    one (never an exception: a parser's message could quote the value)."""
    if not isinstance(text, str):
        return math.nan
    found = _ISO_TEXT.fullmatch(text)
    if found is None:
        return math.nan
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = found.groups()
    try:
        offset = timedelta(0)
        if zulu is None:
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            if int(off_m) >= 60 or offset >= timedelta(hours=24):
                return math.nan
            offset = -offset if sign == "-" else offset
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second or 0),
            int((fraction or "")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
        micros = (moment - _EPOCH) // timedelta(microseconds=1)
    except (ValueError, OverflowError):
        return math.nan
    return micros / 1e6


def _event_seconds(column: pa.Array | pa.ChunkedArray, event_format: str) -> np.ndarray:
    """Seconds since the epoch of each record's event time; NaN where it is not one.

    ``seconds``: a number (integer, float or decimal column), a timestamp column, or text
    holding a decimal number (CSV). ``iso8601``: a timestamp column, or text in ISO 8601 with
    an explicit offset (``Z``, ``+01:00``). Anything else is NaN (a bad record): a null, a
    non-finite number, text that is not of the format, a boolean or any other type. No
    value's text ever reaches an exception (a parser's message could quote it).
    """
    if isinstance(column, pa.ChunkedArray):  # chunk by chunk: their dictionaries may differ
        parts = [_event_seconds(chunk, event_format) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0)
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.dictionary_decode()
        kind = column.type
    if pa.types.is_timestamp(kind):
        micros = column.cast(pa.timestamp("us"), safe=False).cast(pa.int64())
        values = pc.divide(pc.cast(micros, pa.float64()), 1e6)
    elif event_format == "seconds" and (
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    ):
        values = column.cast(pa.float64(), safe=False)
    elif event_format == "seconds" and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        numbers = pc.fill_null(pc.match_substring_regex(column, _SECONDS_TEXT), False)
        text = pc.if_else(numbers, pc.utf8_trim_whitespace(column), pa.scalar(None, kind))
        try:
            values = text.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # out of range: value by value
            values = pa.array(
                [_float_or_nan(t) for t in text.to_pylist()], type=pa.float64(), from_pandas=True
            )
    elif event_format == "iso8601" and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        values = pa.array([_iso_seconds(t) for t in column.to_pylist()], type=pa.float64())
    else:
        return np.full(len(column), np.nan)
    out = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64).copy()
    out[np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = np.nan
    out[~np.isfinite(out)] = np.nan
    return out


def _float_or_nan(text: str | None) -> float:
    if text is None:
        return math.nan
    try:
        return float(text)
    except (ValueError, OverflowError):
        return math.nan


class AssignWindows(beam.DoFn):
    """Each batch's rows to their window (public rules only), timestamped inside Beam's window.

    A row is kept when its window was granted to this run of the job (``attempt``: a grant
    file in the state location naming it) and its file was matched before the window closed
    (its end plus the allowed lateness); other rows are dropped. In arrival mode a row's time
    is its file's match time (the element's timestamp). Rows keep their batch's file name.

    The first batch an instance sees (whatever it holds) first tells the job's process that
    the pipeline reads: it writes :data:`READING_MARKER` (the run's number, no data) unless
    it is there, then waits, at most ``grant_wait`` seconds, for :data:`GRANTS_MARKER` (the
    windows of the clock granted): no window is granted before, so the first batch's records
    still find theirs.
    """

    def __init__(
        self,
        clock: WindowClock,
        state: str,
        event_time: str | None,
        fail: bool,
        attempt: int,
        event_format: str = "seconds",
        grant_wait: float = 60.0,
    ):
        super().__init__()
        if not grant_wait >= 0:
            raise ValueError(f"grant_wait must be >= 0 seconds; received {grant_wait!r}")
        if event_format not in EVENT_TIME_FORMATS:
            raise ValueError(
                f"--event_time_format must be one of {list(EVENT_TIME_FORMATS)}; "
                f"received {event_format!r}"
            )
        self._clock = clock
        self._state = state
        self._event = event_time
        self._event_format = event_format
        self._fail = fail
        self._attempt = attempt
        self._grant_wait = grant_wait
        self._reading = False
        self._grants: dict[int, bool] = {}

    def _announce(self) -> None:
        """Say the pipeline reads (once per instance); wait for the first grants."""
        state = StreamState(self._state)
        if not FileSystems.exists(state.reading_marker(self._attempt)):
            state.write({"attempt": self._attempt}, "scratch", str(self._attempt), READING_MARKER)
        deadline = time.monotonic() + self._grant_wait
        while not FileSystems.exists(state.grants_marker(self._attempt)):
            if time.monotonic() >= deadline:
                break  # its rows then find no grant and are dropped (fail closed)
            time.sleep(0.05)
        self._reading = True

    def _granted(self, index: int) -> bool:
        if index not in self._grants:
            record = StreamState(self._state).window(index)
            if record is None:
                return False  # not decided yet: not admitted (asked again for the next batch)
            self._grants[index] = (
                record.get("status") in ("granted", "published")
                and record.get("attempt") == self._attempt
            )
        return self._grants[index]

    def process(
        self, element: Any, timestamp: Any = beam.DoFn.TimestampParam
    ) -> Iterator[beam_window.TimestampedValue]:
        if not self._reading:
            self._announce()
        source, batch = element if isinstance(element, tuple) else ("input", element)
        arrival = float(timestamp)
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            raise TypeError("the streaming job reads record batches")
        if self._event is None:
            indices = np.full(batch.num_rows, self._clock.index(arrival), dtype=np.int64)
            valid = np.ones(batch.num_rows, dtype=bool)
        else:
            if self._event not in batch.schema.names:
                raise data_error(source, "the event-time field is required", field=self._event)
            seconds = _event_seconds(batch.column(self._event), self._event_format)
            valid = np.isfinite(seconds)
            if not valid.all() and self._fail:
                rule = (
                    "the event-time field must hold a number of seconds since the epoch or a "
                    "timestamp"
                    if self._event_format == "seconds"
                    else "the event-time field must hold a timestamp or ISO 8601 text with an "
                    "offset (e.g. 2027-01-15T08:30:00Z)"
                )
                raise data_error(
                    source,
                    f'{rule}; a null is not one (use on_bad_record = "skip" to drop such records)',
                    field=self._event,
                )
            indices = np.where(valid, np.floor(np.nan_to_num(seconds) / self._clock.size), 0)
            indices = indices.astype(np.int64)
        for index in np.unique(indices[valid]).tolist():
            if arrival > self._clock.closes_at(index) or not self._granted(index):
                continue  # late, or a window without budget: dropped by a public rule
            rows = np.flatnonzero(valid & (indices == index))
            part = batch.take(pa.array(rows))
            stamp = self._clock.closes_at(index) - _MICRO
            yield beam_window.TimestampedValue((source, part), stamp)


#: In ``--state``: the job's secret key of the persons' hashes (:func:`person_hashes`).
PERSON_KEY = "person_key.json"
#: In ``scratch/<run>/``: the windows each person already used before this run (written by the
#: job's process before the pipeline starts; read by :class:`AdmitPersons`).
USED_WINDOWS = "used_windows.json"
PERSONS_TAG = "persons"
#: How many keys the per-person window state is spread over.
PERSON_SHARDS = 16


def person_key(state: StreamState, *, create: bool = False) -> bytes:
    """The job's secret key of the persons' hashes (32 bytes from the OS CSPRNG, made once
    per ``--state``, private there like every file of it); fails closed if it is missing."""
    found = state.read(PERSON_KEY)
    if isinstance(found, dict) and isinstance(found.get("key"), str):
        key = bytes.fromhex(found["key"])
        if len(key) == 32:
            return key
    if found is not None or not create:
        raise StreamError(f"--state {state.location}: the persons' key is missing or unreadable")
    state.write({"key": os.urandom(32).hex()}, PERSON_KEY)
    return person_key(state)


def person_hashes(key: bytes, units: np.ndarray) -> np.ndarray:
    """Each unit's keyed hash: BLAKE2b keyed with the job's key over the pipeline's stable
    unit hash (:func:`beam_dp.batching.canonical_hash64`, the identity rule every statistic
    bounds by), 64 bits. Without the key (kept in ``--state`` only) a hash cannot be tied to
    an id; two ids whose hashes collide are one person here (they share a window bound:
    utility only)."""
    distinct, inverse = np.unique(np.asarray(units, dtype=np.uint64), return_inverse=True)
    keyed = np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(int(u).to_bytes(8, "little"), key=key, digest_size=8).digest(),
                "little",
            )
            for u in distinct
        ),
        dtype=np.uint64,
        count=distinct.size,
    )
    return keyed[inverse.reshape(-1)]


class KeyPersons(beam.DoFn):
    """Each windowed batch keyed for the per-person window state: its rows by the shard of
    their person's keyed hash, as ``(shard, (window, file, rows, keyed hashes))``; rows without
    a valid unit go on as they are (each statistic applies ``on_bad_record`` to them)."""

    def __init__(self, state: str, unit: str, clock: WindowClock):
        super().__init__()
        self._state = state
        self._unit = unit
        self._clock = clock
        self._key: bytes | None = None

    def process(self, element: Any, timestamp: Any = beam.DoFn.TimestampParam) -> Iterator[Any]:
        if self._key is None:
            self._key = person_key(StreamState(self._state))
        source, batch = element
        index = self._clock.index(float(timestamp) - self._clock.lateness)
        stable, bad = canonical_hash64(batch.column(self._unit))
        if bad.any():
            yield beam.pvalue.TaggedOutput(
                "unkeyed", (source, batch.take(pa.array(np.flatnonzero(bad))))
            )
        rows = np.flatnonzero(~bad)
        if not rows.size:
            return
        keyed = person_hashes(self._key, stable[rows])
        shards = keyed % np.uint64(PERSON_SHARDS)
        for shard in np.unique(shards).tolist():
            mine = rows[shards == shard]
            part = batch.take(pa.array(mine))
            yield (int(shard), (index, source, part, keyed[shards == shard]))


_USED_STATE = ReadModifyWriteStateSpec("windows_used", PickleCoder())
_USED_PARAM = beam.DoFn.StateParam(_USED_STATE)


class AdmitPersons(beam.DoFn):
    """Keep each person's rows only in the windows left to them (the job's per-person state).

    A person starts this run with the windows they already used (:data:`USED_WINDOWS`, from the
    earlier runs' committed windows) and is admitted in new windows while they have windows
    left, in the order their rows arrive (:class:`beam_dp.beam._contributions.WindowAdmissions`,
    keyed by the person's keyed hash; it only depends on that person's own rows). Outputs the
    admitted rows (main) and, per batch, the persons admitted in its window (``persons``)."""

    def __init__(self, state: str, attempt: int, clock: WindowClock):
        super().__init__()
        self._state = state
        self._attempt = attempt
        self._clock = clock
        self._coder = clock.beam_windows().get_window_coder()
        self._seeds: dict[int, WindowAdmissions] | None = None

    def _seeded(self, shard: int) -> WindowAdmissions:
        if self._seeds is None:
            found = StreamState(self._state).read("scratch", str(self._attempt), USED_WINDOWS)
            if not isinstance(found, dict) or found.get("attempt") != self._attempt:
                raise StreamError("the persons' windows of earlier runs are missing from --state")
            limit = int(found["limit"])
            units = np.array(found["units"], dtype=np.uint64)
            used = np.array(found["used"], dtype=np.int64)
            shards = units % np.uint64(PERSON_SHARDS)
            self._seeds = {
                n: WindowAdmissions.with_used(limit, units[shards == n], used[shards == n])
                for n in range(PERSON_SHARDS)
            }
        return self._seeds[shard]

    def process(
        self,
        element: tuple[int, tuple[int, str, pa.RecordBatch, np.ndarray]],
        used: Any = _USED_PARAM,
        timestamp: Any = beam.DoFn.TimestampParam,
    ) -> Iterator[Any]:
        shard, (index, source, batch, keyed) = element
        state = used.read()
        if state is None:
            state = self._seeded(shard)
        start = index * self._clock.size + self._clock.lateness
        tag = self._coder.encode(beam_window.IntervalWindow(start, start + self._clock.size))
        keep, state = state.admit(tag, keyed)
        used.write(state)
        if not keep.any():
            return
        rows = np.flatnonzero(keep)
        yield beam_window.TimestampedValue((source, batch.take(pa.array(rows))), timestamp)
        persons = sorted(int(u) for u in np.unique(keyed[rows]))
        yield beam.pvalue.TaggedOutput(
            PERSONS_TAG, beam_window.TimestampedValue((PERSONS_TAG, persons), timestamp)
        )


class CommitWindow(beam.DoFn):
    """One window's releases as one file in the scratch location (written whole, renamed).

    With ``persons`` (a job with a privacy unit), the same file also names every person
    admitted into the window (:class:`AdmitPersons`: their keyed hashes, never an id), so a
    window's releases and its persons are committed together or not at all."""

    def __init__(self, scratch: str, clock: WindowClock, persons: bool = False):
        super().__init__()
        self._scratch = scratch
        self._clock = clock
        self._persons = persons

    def process(self, gathered: list[Any], window: Any = beam.DoFn.WindowParam) -> Iterator[str]:
        start = float(window.start) - self._clock.lateness
        index = self._clock.index(start + _MICRO)
        final = FileSystems.join(self._scratch, f"{index}.json")
        releases = [item for item in gathered if isinstance(item, dict)]
        committed: dict[str, Any] = {"window": index, "releases": sorted(releases, key=json.dumps)}
        if self._persons:
            persons: set[int] = set()
            for item in gathered:
                if isinstance(item, tuple) and item[0] == PERSONS_TAG:
                    persons.update(item[1])
            committed["persons"] = sorted(persons)
        text = json.dumps(committed)
        private_folder(self._scratch)
        write_whole(final, text.encode("utf-8"))
        yield final


def _as_record(release: Release) -> dict[str, Any]:
    return release.to_dict()


# ---------------------------------------------------------------------------- the driver


@dataclass
class StreamJob:
    """What the job's own process does while the pipeline runs: grant, publish, stop.

    ``attempt`` is this run's number on the state (1 for a new job); ``grant_limit`` the most
    windows this run may grant (None: no limit; see :func:`_recover`).
    """

    specs: list[StatisticSpec]
    transforms: list[Any]
    budget: PrivacyBudget
    window_plan: Plan | None
    clock: WindowClock
    state: StreamState
    output: str
    ledger: str | None
    dataset: str | None
    ledger_timeout: float
    landing: str
    job_id: str
    grant_ahead: int
    stop_after: int | None
    stop_file: str | None
    attempt: int = 1
    grant_limit: int | None = None
    persons: bool = False
    windows_per_unit: int = 1
    now: Callable[[], float] = time.time
    published: list[dict[str, Any]] = field(default_factory=list)
    windows: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    reading: bool = False
    _reservations: dict[int, Reservation] = field(default_factory=dict)

    # -- grants ---------------------------------------------------------------------------

    def _own(self) -> list[int]:
        """The windows granted to this run (whatever became of them since)."""
        return [
            index
            for index, record in self.windows.items()
            if record.get("attempt") == self.attempt and record["status"] != "refused"
        ]

    def grant(self) -> None:
        """Once this run's pipeline reads (its :data:`READING_MARKER`), decide every window up
        to ``grant_ahead`` windows past the clock (once each), within the run's
        ``grant_limit``; the first time, then say so (:data:`GRANTS_MARKER`). Before the
        pipeline reads, nothing is granted nor charged."""
        if not self.reading:
            if not FileSystems.exists(self.state.reading_marker(self.attempt)):
                return
            self.reading = True
            LOG.info("the pipeline reads: windows are granted from now on")
        current = self.clock.index(self.now())
        for index in range(current, current + self.grant_ahead + 1):
            if index in self.windows:
                continue
            if self.grant_limit is not None and len(self._own()) >= self.grant_limit:
                break
            record = self._decide(index)
            self.windows[index] = record
            self.state.set_window(index, record)
            if record["status"] == "refused":
                LOG.info("window %s: no budget left: it admits no record", self.clock.label(index))
        if not FileSystems.exists(self.state.grants_marker(self.attempt)):
            self.state.write({"attempt": self.attempt}, "scratch", str(self.attempt), GRANTS_MARKER)

    def _decide(self, index: int) -> dict[str, Any]:
        label = self.clock.label(index)
        if self.ledger is None or self.dataset is None or self.window_plan is None:
            return {"status": "granted", "label": label, "attempt": self.attempt}
        run = RunInfo(
            "pipelines.stream",
            details={"stream": self.job_id, "window": label},
            inputs=(self.landing,),
        )
        try:
            with open_ledger(self.ledger, timeout=self.ledger_timeout) as opened:
                reservation = opened.reserve(self.dataset, self.window_plan, run)
                reservation.start()  # the window opens: its records may be read from now on
        except LedgerError as error:
            if type(error).__name__ == "BudgetExceededError":
                return {"status": "refused", "label": label, "reason": "no budget left"}
            raise
        self._reservations[index] = reservation
        return {
            "status": "granted",
            "label": label,
            "run": reservation.run_id,
            "attempt": self.attempt,
        }

    # -- publishing -----------------------------------------------------------------------

    def planned(self) -> list[PlannedRelease]:
        return [
            PlannedRelease(name, key, optional=optional)
            for transform in self.transforms
            for name, key, optional in transform.planned_releases
        ]

    def publish(self) -> None:
        """Publish every window of this run whose releases were committed (each once), then
        write the outputs once for all of them (a run behind the clock publishes several
        windows in one poll; the outputs hold every window, so each write costs them all)."""
        published = False
        for index, record in sorted(self.windows.items()):
            if record["status"] != "granted" or record.get("attempt") != self.attempt:
                continue  # published, failed, refused or another run's: never (again) here
            path = self.state.releases_file(self.attempt, index)
            if FileSystems.exists(path):
                published = self._publish(index, record, path) or published
        if published:
            self.write_outputs()

    def _checked(self, index: int, path: str) -> list[dict[str, Any]]:
        """A window's committed releases, if they are exactly the planned ones."""
        with FileSystems.open(path) as handle:
            gathered = json.loads(handle.read().decode("utf-8"))["releases"]
        labels = {r.get("window") for r in gathered}
        if len(labels) > 1:
            raise ReleaseCheckError("a window's releases carry several windows")
        planned = [
            PlannedRelease(p.name, p.key, next(iter(labels), None), p.optional)
            for p in self.planned()
        ]
        releases, _skipped = check_releases(["window"], [("release", r) for r in gathered], planned)
        return releases

    def _publish(self, index: int, record: dict[str, Any], path: str) -> bool:
        """Publish one window: its run committed in the ledger (unless it already is), the
        window recorded as published; the caller then rewrites the outputs. Each step is done
        once and checked before it is done, so that a restart after a kill at any point
        finishes it (a restart rewrites the outputs from every published window). Returns
        whether the window was published (False: it failed its check)."""
        label = self.clock.label(index)
        try:
            releases = self._checked(index, path)
        except ReleaseCheckError as error:
            self._fail_window(index, record, str(error))
            return False
        run_id = record.get("run")
        run_state = None if run_id is None else self._run_state(int(run_id))
        if run_state not in (None, "reserved", "committed"):
            self._fail_window(index, record, f"its ledger run is {run_state}")
            return False
        if run_id is not None and run_state == "reserved":
            reservation = self._reservations.pop(index, None) or self._resume(int(run_id))
            entries = ledger_entries_to_record(
                [
                    Release(r["value"], LedgerEntry.from_dict(r), r.get("key"), r.get("window"))
                    for r in releases
                ]
            )
            reservation.commit(entries, FileSystems.join(self.output, "release.json"))
        for release in releases:
            self.published.append({**release, "event_window": label})
        record = {**record, "status": "published"}
        self.windows[index] = record
        self.state.set_window(index, record)
        LOG.info("window %s: %d release(s) published", label, len(releases))
        return True

    def _fail_window(self, index: int, record: dict[str, Any], reason: str) -> None:
        label = self.clock.label(index)
        self.errors.append(f"window {label}: {reason}")
        LOG.warning("window %s: not published (%s); it stays charged", label, reason)
        self._reservations.pop(index, None)  # the driver keeps nothing of a settled window
        record = {**record, "status": "failed"}
        self.windows[index] = record
        self.state.set_window(index, record)

    def _run_state(self, run_id: int) -> str:
        assert self.ledger is not None
        with open_ledger(self.ledger, timeout=self.ledger_timeout) as opened:
            return str(opened.run(run_id).state)

    def _resume(self, run_id: int) -> Reservation:
        assert self.ledger is not None
        with open_ledger(self.ledger, timeout=self.ledger_timeout) as opened:
            return opened.resume(run_id)

    # -- restarts -------------------------------------------------------------------------

    def recover(self, attempts: dict[int, dict[str, Any]], windows_per_unit: int) -> int:
        """Take over from the earlier runs on this state (a restart); returns the windows each
        person may still be in (``max_windows_per_unit`` minus those that may be used).

        A window granted to an earlier run is **used** when its releases may exist: it was
        published or failed its check, its releases were committed to that run's scratch
        location, or its ledger run was committed. Those not yet published are published now,
        once (the kill came between the pipeline's commit and the publication). Every other
        window granted to an earlier run is taken from it: that run's releases for it are never
        read, even if its pipeline, still running, writes them later; it is granted again to
        this run (its ledger run is reused, never charged twice) while it can still admit
        records and this run may grant it, else abandoned (it stays charged).

        Each person is in the used windows whose commit names them and, up to each earlier
        run's per-person bound (``cap``: the most windows any person could be in during that
        run), in every used window whose persons are unknown (``min(cap, named + unknown)`` per
        run). Returns what is left to everyone (``max_windows_per_unit`` minus the unknown
        windows' count); with a privacy unit, the persons who used more are written for this
        run's pipeline (:data:`USED_WINDOWS`), which keeps each within what is left to them
        and grants without a limit. Without one (no persons named), the run grants at most
        what is left once a window was used, so that no person is in more windows than that
        whatever the data.
        """
        pending: list[tuple[int, dict[str, Any], str]] = []
        reopen: list[int] = []
        used: dict[int, int] = {}  # per earlier run: its used windows of unknown persons
        known: dict[int, dict[int, int]] = {}  # per earlier run: each person's known windows
        for index, record in sorted(self.windows.items()):
            status = record["status"]
            earlier = int(record.get("attempt", 0))
            if status in ("published", "failed"):
                self._count_used(index, earlier, used, known)
            if status != "granted":
                continue
            path = self.state.releases_file(earlier, index)
            run_id = record.get("run")
            run_state = None if run_id is None else self._run_state(int(run_id))
            if FileSystems.exists(path) or run_state == "committed":
                pending.append((index, record, path))
                self._count_used(index, earlier, used, known)
            elif run_state in (None, "reserved") and self.clock.closes_at(index) > self.now():
                reopen.append(index)
            else:
                self._abandon(index, record)

        def bound(run: int) -> int:  # the most windows any person could be in during ``run``
            return int(attempts.get(run, {}).get("windows_per_unit", windows_per_unit))

        # everyone: the windows whose persons are unknown, up to each run's bound
        spent = sum(min(bound(n), count) for n, count in used.items())
        left = max(windows_per_unit - spent, 0)
        if self.persons:
            # each person named in a window: those windows plus everyone's, up to each run's
            # bound; the pipeline keeps each person within what is left to them, so no
            # run-wide limit on the windows granted
            self.grant_limit = None
            runs = set(used) | set(known)
            named = {person for persons in known.values() for person in persons}
            extra: dict[int, int] = {}
            for person in named:
                windows = sum(
                    min(bound(n), known.get(n, {}).get(person, 0) + used.get(n, 0)) for n in runs
                )
                if min(windows, windows_per_unit) > spent:
                    extra[person] = min(windows, windows_per_unit) - spent
            self.state.write(
                {
                    "attempt": self.attempt,
                    "limit": left,
                    "units": sorted(extra),
                    "used": [extra[person] for person in sorted(extra)],
                },
                "scratch",
                str(self.attempt),
                USED_WINDOWS,
            )
        else:
            self.grant_limit = None if spent == 0 else left
        self.state.write(
            {"attempt": self.attempt, "windows_per_unit": left, "grant_limit": self.grant_limit},
            "attempts",
            f"{self.attempt}.json",
        )
        for index, record, path in pending:
            if not FileSystems.exists(path):
                self._fail_window(index, record, "its releases are missing from --state")
            else:
                self._publish(index, record, path)
        for index in reopen:
            record = self.windows[index]
            if self.grant_limit is not None and len(self._own()) >= self.grant_limit:
                self._abandon(index, record)
            else:
                record = {**record, "attempt": self.attempt}
                self.windows[index] = record
                self.state.set_window(index, record)
        self.published = self._published_releases()
        if self.published:
            self.write_outputs()  # a kill between "published" and the outputs: written now
        return left

    def _count_used(
        self,
        index: int,
        earlier: int,
        used: dict[int, int],
        known: dict[int, dict[int, int]],
    ) -> None:
        """Count a used window of run ``earlier``: for each person its commit names, or, when
        its persons are unknown (no commit, or one without them), for everyone."""
        persons = self._window_persons(index, earlier) if self.persons else None
        if persons is None:
            used[earlier] = used.get(earlier, 0) + 1
            return
        counts = known.setdefault(earlier, {})
        for person in persons:
            counts[person] = counts.get(person, 0) + 1

    def _window_persons(self, index: int, earlier: int) -> list[int] | None:
        """The persons a window's commit names (their keyed hashes), or None if unknown."""
        path = self.state.releases_file(earlier, index)
        if not FileSystems.exists(path):
            return None
        with FileSystems.open(path) as handle:
            committed = json.loads(handle.read().decode("utf-8"))
        persons = committed.get("persons") if isinstance(committed, dict) else None
        if not isinstance(persons, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in persons
        ):
            return None
        return persons

    def _abandon(self, index: int, record: dict[str, Any]) -> None:
        run_id = record.get("run")
        if run_id is not None and self._run_state(int(run_id)) == "reserved":
            self._resume(int(run_id)).abandon("the stream job was restarted")
        record = {**record, "status": "abandoned"}
        self.windows[index] = record
        self.state.set_window(index, record)

    def _published_releases(self) -> list[dict[str, Any]]:
        """Every published window's releases, in window order, from the state."""
        out: list[dict[str, Any]] = []
        for index, record in sorted(self.windows.items()):
            if record["status"] != "published":
                continue
            path = self.state.releases_file(int(record.get("attempt", 0)), index)
            if not FileSystems.exists(path):
                raise StreamError(
                    f"window {self.clock.label(index)} was published but its releases are "
                    f"missing from --state {self.state.location}: the outputs cannot be rebuilt"
                )
            label = self.clock.label(index)
            out.extend({**r, "event_window": label} for r in self._checked(index, path))
        return out

    def document(self) -> dict[str, Any]:
        windows = [
            {"window": record.get("label", self.clock.label(index)), "status": record["status"]}
            for index, record in sorted(self.windows.items())
        ]
        return {
            "run": {
                "id": self.job_id,
                "released_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
            "releases": list(self.published),
            "windows": windows,
            "budget": {**self.budget.to_json(), "per_window": True},
        }

    def ledger_summary(self) -> dict[str, Any] | None:
        """What the ledger charged this job (every run of it, every window it granted that
        stays charged) and what the period has left, for the summary printed at the end; None
        without a ledger, or when the ledger cannot be read (the summary then omits it)."""
        if self.ledger is None or self.dataset is None or self.window_plan is None:
            return None
        composition = self.window_plan.composition
        try:
            with open_ledger(self.ledger, timeout=self.ledger_timeout) as opened:
                runs = [
                    run
                    for run in opened.history(self.dataset)[0]
                    if run.details.get("stream") == self.job_id and run.charged
                ]
                remaining = opened.status(self.dataset).describe_remaining()
                url = opened.url
        except LedgerError:
            return None
        charged = sum((run.cost for run in runs), Cost())
        ids = [str(run.id) for run in runs]
        if len(ids) > 3:
            shown = f"{ids[0]} to {ids[-1]} ({len(ids)} runs, one per window)"
        else:
            shown = (", ".join(ids) or "none") + (" (one per window)" if ids else "")
        return {
            "ledger": url,
            "dataset": self.dataset,
            "after_commit": {
                "run": shown,
                "charged": charged.describe(composition),
                "remaining": remaining,
            },
        }

    def summary_document(self, document: dict[str, Any]) -> dict[str, Any]:
        """``document`` with, in its budget, the windows a person may be in (the summary says
        what one window spends) and the ledger's summary (what the batch jobs print:
        :func:`pipelines.summary.print_summary`); release.json carries neither."""
        budget = {**document["budget"], "windows_per_unit": self.windows_per_unit}
        ledger = self.ledger_summary()
        if ledger is not None:
            budget["ledger"] = ledger
        return {**document, "budget": budget}

    def write_outputs(self) -> None:
        """Publish the outputs of every window so far, all or nothing: ``release.json``,
        ``releases.jsonl``, ``release.avro`` and ``report.html`` under one manifest
        (:func:`beam_dp.write_outputs`): a reader finds the earlier whole set or the new one,
        whenever the job is killed."""
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.published)
        write_outputs(
            self.document(), self.output, extra_files={"releases.jsonl": lines.encode("utf-8")}
        )

    def done(self) -> bool:
        own = [self.windows[index]["status"] for index in self._own()]
        if self.stop_after is not None and own.count("published") >= self.stop_after:
            return True
        limited = self.grant_limit is not None and len(own) >= self.grant_limit
        if limited and "granted" not in own:
            LOG.info("the windows this run may grant are all decided: the job stops")
            return True
        return self.stop_file is not None and FileSystems.exists(self.stop_file)


# ---------------------------------------------------------------------------- the job


def _parser() -> argparse.ArgumentParser:
    parser = job_parser("pipelines.stream", __doc__, epilog=config_keys_help() + "\n" + JOB_EPILOG)
    parser.add_argument(
        "--config",
        metavar="FILE",
        required=True,
        help="the release job's TOML config ([budget] is one window's). Required",
    )
    parser.add_argument("--landing", metavar="PATTERN", required=True,
                        help="a glob over the location where export shards land; quote it. "
                        "Required")  # fmt: skip
    parser.add_argument("--state", metavar="LOCATION", required=True,
                        help="where the job keeps what it granted and published (any Beam "
                        "filesystem; shared with the workers). Required")  # fmt: skip
    parser.add_argument("--output", metavar="DIR", required=True,
                        help="where release.json, releases.jsonl, release.avro and report.html "
                        "grow, window by window. Required")  # fmt: skip
    parser.add_argument("--window_seconds", type=int, required=True,
                        help="the length of a window, in seconds. Required")  # fmt: skip
    parser.add_argument("--event_time", metavar="FIELD", default=None,
                        help="window by this field (seconds since the epoch, or a timestamp). "
                        "Default: by the time a record's file is matched")  # fmt: skip
    parser.add_argument("--event_time_format", choices=EVENT_TIME_FORMATS, default="seconds",
                        help="how --event_time is read: 'seconds' (a number of seconds since "
                        "the epoch, as a number or as text, or a timestamp) or 'iso8601' (a "
                        "timestamp, or text such as 2027-01-15T08:30:00Z or "
                        "2027-01-15T09:30:00.25+01:00: ISO 8601 date and time with an explicit "
                        "offset; a fraction past microseconds is cut). A record whose event "
                        "time is not of the format, or is null, is a bad record "
                        "(on_bad_record). Default seconds")  # fmt: skip
    parser.add_argument("--allowed_lateness", type=int, default=0,
                        help="with --event_time, how long after a window's end its records "
                        "are still admitted (seconds). Default 0")  # fmt: skip
    parser.add_argument("--max_windows_per_unit", type=int, default=1,
                        help="the windows each person's records count in, over the job's life "
                        "(every statistic). Default 1")  # fmt: skip
    parser.add_argument("--grant_ahead", type=int, default=1,
                        help="how many windows past the current one are reserved in advance. "
                        "Default 1")  # fmt: skip
    parser.add_argument("--poll_seconds", type=float, default=2.0,
                        help="how often new files are matched and windows published. "
                        "Default 2")  # fmt: skip
    parser.add_argument("--stop_after_windows", type=int, default=None,
                        help="stop after this run published this many of its windows. Default: "
                        "run until stopped")  # fmt: skip
    parser.add_argument("--stop_file", metavar="PATH", default=None,
                        help="stop when this file exists. Default: none")  # fmt: skip
    parser.add_argument("--cancel_timeout", type=float, default=DEFAULT_CANCEL_TIMEOUT,
                        help="FlinkRunner on a cluster (--flink_master host:port): how long "
                        "a stop waits for the pipeline's Flink job to end (cancelled through "
                        "Flink's REST API), and a start for an earlier run's; past it the job "
                        "fails naming the Flink job to cancel. Default "
                        f"{DEFAULT_CANCEL_TIMEOUT:g} s")  # fmt: skip
    add_operator_arguments(parser)
    return parser


def _window_plan(budget: PrivacyBudget, relation: str, windows_per_unit: int) -> Plan:
    whole = Plan.from_budget(budget, relation=relation)
    cost = whole.cost
    share = Fraction(1, windows_per_unit)
    return Plan(
        whole.composition,
        relation,
        Cost(cost.epsilon * share, cost.delta * share, cost.rho * share),
        whole.statistics,
    )


def _job_identity(args: argparse.Namespace, config_text: bytes) -> dict[str, Any]:
    return {
        "config": hashlib.sha256(config_text).hexdigest(),
        "landing": args.landing,
        "window_seconds": args.window_seconds,
        "event_time": args.event_time,
        "event_time_format": args.event_time_format if args.event_time else None,
        "allowed_lateness": args.allowed_lateness,
        "max_windows_per_unit": args.max_windows_per_unit,
        "dataset": args.dataset,
    }


_STATE_FORMAT = 2  # windows granted per run (attempt), releases in scratch/<attempt>/
#: A pipeline's first batch waits for the first grants at most this many polls of the job's
#: process, plus the ledger's timeout.
GRANT_WAIT_POLLS = 10


def _open_state(
    state: StreamState, identity: dict[str, Any]
) -> tuple[str, dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """The job's id, its windows and its earlier runs: a new job's (nothing), or those of the
    same job on this state (a restart); a state holding another job is refused."""
    identity = {**identity, "state_format": _STATE_FORMAT}
    job = state.read("job.json")
    if job is None:
        job_id = uuid.uuid4().hex
        state.write({"id": job_id, **identity}, "job.json")
        return job_id, {}, {}
    if {k: job.get(k) for k in identity} != identity:
        raise ValueError(
            f"--state {state.location} holds another job (its config or flags differ, or it "
            "was written by an earlier version of the job); give a new --state for a new job"
        )
    return str(job["id"]), state.windows(), state.attempts()


# ----------------------------------------------------------- the DirectRunner's window state


def _direct_window_pruning() -> tuple[Any, Any, type] | None:
    """Beam's DirectRunner (2.77) evaluator of a streaming ``GroupByKey``, subclassed so that
    it forgets a window's bookkeeping once that window is over; None if this Beam has not the
    pieces (the pipeline then runs on Beam's own evaluator: right, but slower over time).

    Why: Beam's streaming DirectRunner never forgets a fired window. Every key of a
    ``GroupByKey`` keeps, per window it ever saw, the trigger's pane counters and tombstone and
    the window in its list of windows, and copies all of it for every bundle that touches the
    key (Beam's ``InMemoryUnmergedState.copy``): a key that is in every window (a
    ``CombineGlobally``'s, a statistic's per-candidate keys) costs more per window as the
    stream runs, and after about 120 two-second windows the job fell behind the clock.

    What is forgotten, and why nothing changes: a window of a key that has fired (its pane
    counter is set), holds no element nor watermark hold (nothing left to release), has no
    timer left, and that the key's input watermark has passed by more than the allowed
    lateness. Beam's trigger driver drops any later element of such a window unread (it is
    expired), and no timer can fire for it, so its bookkeeping is never read again."""
    try:
        from apache_beam.runners.direct.direct_runner import _StreamingGroupAlsoByWindow
        from apache_beam.runners.direct.transform_evaluator import (
            TransformEvaluatorRegistry,
            _StreamingGroupAlsoByWindowEvaluator,
        )
        from apache_beam.transforms.trigger import GeneralTriggerDriver, MergeableStateAdapter
    except ImportError:
        return None
    window_ids = MergeableStateAdapter.WINDOW_IDS
    tags = (
        GeneralTriggerDriver.INDEX.tag,
        GeneralTriggerDriver.ELEMENTS.tag,
        "watermark",  # GeneralTriggerDriver's WATERMARK_HOLD (made per driver)
    )

    class ForgetEndedWindows(_StreamingGroupAlsoByWindowEvaluator):
        def process_element(self, element: Any) -> None:
            super().process_element(element)
            try:
                gbk: Any = self._applied_ptransform.transform
                windowing = gbk.windowing
                watermark = self._evaluation_context._watermark_manager.get_watermarks(
                    self._applied_ptransform
                ).input_watermark
                raw = self._step_context.get_keyed_state(element.value.encoded_key)
                _forget_ended_windows(raw, watermark, windowing.allowed_lateness, window_ids, tags)
            except (AttributeError, KeyError, TypeError):  # another Beam: keep everything
                return

    return TransformEvaluatorRegistry, _StreamingGroupAlsoByWindow, ForgetEndedWindows


@contextlib.contextmanager
def forgetting_ended_windows() -> Iterator[bool]:
    """While in this block, a DirectRunner pipeline started forgets its ended windows' state
    (:func:`_direct_window_pruning`); yields whether it does (False: this Beam lacks the
    pieces). Beam's DirectRunner chooses its evaluators when the run starts; the override is
    Beam's own hook for that (``TransformEvaluatorRegistry._test_evaluators_overrides``), put
    back as it was when the block ends."""
    pruning = _direct_window_pruning()
    if pruning is None:
        yield False
        return
    registry, gabw, evaluator = pruning
    saved = dict(registry._test_evaluators_overrides)
    registry._test_evaluators_overrides = {**saved, gabw: evaluator}
    try:
        yield True
    finally:
        registry._test_evaluators_overrides = saved


def _forget_ended_windows(
    raw: Any, watermark: Any, lateness: Any, window_ids_tag: Any, tags: tuple[str, ...]
) -> int:
    """Drop, from one key's DirectRunner state, every window that is over (see
    :func:`_direct_window_pruning`); returns how many were dropped. ``tags``: the trigger
    driver's pane counter (set once the window fired), then the tags of what a window may
    still hold to release (its elements, its watermark hold)."""
    fired, *pending = tags
    ids = raw.get_global_state(window_ids_tag, None)
    if not isinstance(ids, dict):
        return 0
    ended = [
        window
        for window, numbers in ids.items()
        if hasattr(window, "end")
        and watermark > window.end + lateness
        and all(not raw.timers.get(n) for n in numbers)
        and any(raw.state.get(n, {}).get(fired) for n in numbers)
        and not any(raw.state.get(n, {}).get(tag) for n in numbers for tag in pending)
    ]
    if not ended:
        return 0
    kept = dict(ids)
    for window in ended:
        for n in kept.pop(window):
            raw.state.pop(n, None)
            raw.timers.pop(n, None)
    raw.set_global_state(window_ids_tag, kept)
    return len(ended)


#: How long a stop waits for its Flink job on a cluster to end (``--cancel_timeout``), seconds.
DEFAULT_CANCEL_TIMEOUT = 120.0
#: The states in which a Flink job holds no slot and runs no code (Flink's JobStatus).
FLINK_ENDED = frozenset({"FINISHED", "FAILED", "CANCELED"})
_FLINK_NOT_A_CLUSTER = ("[auto]", "[local]", "[collection]")


def flink_cluster_address(options: PipelineOptions) -> str | None:
    """The REST address of the Flink cluster the pipeline runs on (``--runner FlinkRunner
    --flink_master host:port``), or None: another runner, or a Flink the job's process does not
    reach (``[auto]``, ``[local]``: an embedded cluster, which ends with its job server)."""
    runner = str(options.view_as(StandardOptions).runner or "")
    if runner.rsplit(".", 1)[-1].lower() != "flinkrunner":
        return None
    master = str(options.view_as(FlinkRunnerOptions).flink_master or "").strip()
    if not master or master in _FLINK_NOT_A_CLUSTER:
        return None
    return master.rstrip("/") if re.match(r"^https?://", master) else f"http://{master}"


def _flink_elsewhere(options: PipelineOptions) -> bool:
    """A FlinkRunner pipeline sent to a job server the job did not start (``--job_endpoint``):
    its Flink may be a cluster the job cannot ask unless ``--flink_master`` names it."""
    runner = str(options.view_as(StandardOptions).runner or "")
    endpoint = options.view_as(PortableOptions).job_endpoint
    return runner.rsplit(".", 1)[-1].lower() == "flinkrunner" and bool(endpoint)


def flink_job_name(job_id: str, attempt: int) -> str:
    """The Flink job name of run ``attempt`` of stream job ``job_id`` (its ``--job_name``)."""
    return f"beam-dp-stream-{job_id[:16]}-run-{attempt}"


@dataclass(frozen=True)
class FlinkJobs:
    """The stream's Flink jobs on a cluster, by name, through Flink's REST API.

    Why the job's own process does this: on a Flink cluster, Beam's ``PipelineResult.cancel``
    through the portable job server cancels only the job server's invocation; the Flink job
    it submitted goes on running and holds its slots (seen on the local cluster: still RUNNING
    a minute after the job's process ended, so the restart's pipeline found no slot). A stop
    is a stop only once the cluster says the job ended."""

    address: str
    timeout: float

    def __post_init__(self) -> None:
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ValueError("--cancel_timeout must be a finite number of seconds > 0")

    def _call(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(f"{self.address}{path}", method=method)
        with urllib.request.urlopen(request, timeout=min(30.0, self.timeout)) as response:
            body = response.read()
        return json.loads(body) if body else None

    def running(self, names: set[str]) -> list[str]:
        """The ids of the jobs named one of ``names`` that have not ended."""
        jobs = self._call("/jobs/overview")["jobs"]
        return sorted(
            str(job["jid"])
            for job in jobs
            if job.get("name") in names and job.get("state") not in FLINK_ENDED
        )

    def end(self, names: set[str], what: str) -> None:
        """Cancel the jobs named one of ``names`` and wait until each has ended; a
        :class:`StreamError` naming the ones still running after the timeout, or if the cluster
        cannot be asked (fail closed: an operator must not restart while they may run)."""
        deadline = time.monotonic() + self.timeout
        cancelled: set[str] = set()
        try:
            while True:
                left = self.running(names)
                if not left:
                    return
                for jid in left:
                    if jid not in cancelled:
                        self._call(f"/jobs/{jid}?mode=cancel", method="PATCH")
                        cancelled.add(jid)
                if time.monotonic() > deadline:
                    break
                time.sleep(1.0)
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as error:
            raise StreamError(
                f"could not ask the Flink cluster at {self.address} whether {what} ended "
                f"({type(error).__name__}): check it there (its web UI, or 'flink list') and "
                "cancel it before starting the job on this --state again"
            ) from None
        raise StreamError(
            f"{what} still runs on the Flink cluster at {self.address} "
            f"{self.timeout:g} s after it was cancelled (Flink job {', '.join(left)}): cancel "
            "it there ('flink cancel JOBID' or the web UI) before starting the job on this "
            "--state again"
        )


def run(
    argv: Sequence[str] | None = None,
    *,
    source: Callable[[beam.Pipeline], PCollection] | None = None,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Run the streaming job. ``source`` replaces the watched landing location (tests pass a
    TestStream of ``(file name, RecordBatch)`` pairs); ``now`` is the clock of the grants."""
    parser = _parser()
    args, options = parse_args(parser, argv)
    config = load_config(args.config, require_path=False)
    base = Path(args.config).resolve().parent
    source_table = config["input"]
    check_privacy_unit(source_table.get("privacy_unit"), bool(source_table.get("record_level")))
    check_ledger_flags(args.ledger, args.dataset)
    clock = WindowClock(args.window_seconds, args.allowed_lateness if args.event_time else 0)
    if args.allowed_lateness and not args.event_time:
        raise ValueError("--allowed_lateness applies to --event_time windows only")
    if args.event_time_format != "seconds" and not args.event_time:
        raise ValueError("--event_time_format applies to --event_time windows only")
    if args.max_windows_per_unit < 1:
        raise ValueError("--max_windows_per_unit must be an integer >= 1")
    if args.grant_ahead < 0:
        raise ValueError("--grant_ahead must be an integer >= 0")
    if args.stop_after_windows is not None and args.stop_after_windows < 1:
        raise ValueError("--stop_after_windows must be an integer >= 1")
    if not args.poll_seconds > 0:
        raise ValueError("--poll_seconds must be > 0")
    if not (args.cancel_timeout > 0 and math.isfinite(args.cancel_timeout)):
        raise ValueError("--cancel_timeout must be a finite number of seconds > 0")
    options.view_as(StandardOptions).streaming = True
    budget_config = config["budget"]
    relation = budget_config.get("relation", "add_remove")
    on_bad_record = source_table.get("on_bad_record", "fail")
    unit = source_table.get("privacy_unit")
    specs = [spec_from_config(entry, base=base) for entry in config["statistics"]]
    for spec in specs:
        spec.params.setdefault("max_windows_per_unit", args.max_windows_per_unit)
        if spec.params["max_windows_per_unit"] != args.max_windows_per_unit:
            raise ValueError(
                f"statistic {spec.name!r}: every statistic of a stream keeps a person in "
                f"--max_windows_per_unit = {args.max_windows_per_unit} windows"
            )
    budget = PrivacyBudget(
        float(budget_config["epsilon"]),
        float(budget_config.get("delta", 0.0)),
        composition=budget_config.get("composition", "basic"),
    )
    for spec in specs:
        spec.check(unit_column=unit, relation=relation, on_bad_record=on_bad_record)
    for spec in specs:
        spec.request(budget)
    budget.finalize()
    transforms = [
        spec.transform(unit_column=unit, relation=relation, on_bad_record=on_bad_record)
        for spec in specs
    ]
    # Every named column against the shards already landed, before any grant or charge (files
    # that land later are checked when read, after their window's charge).
    named = named_columns(
        specs, unit, event_time=args.event_time, event_time_format=args.event_time_format
    )
    json_fields = source_table.get("json_fields")
    check_input_columns(
        args.landing,
        named,
        input_format=source_table.get("format"),
        on_bad_record=on_bad_record,
        json_fields=json_fields,
    )
    state = StreamState(args.state)
    identity = _job_identity(args, Path(args.config).read_bytes())
    job_id, known, attempts = _open_state(state, identity)
    attempt = max(attempts, default=0) + 1
    scratch = state.scratch(attempt)
    private_folder(state.path("scratch"))
    private_folder(scratch)
    if "://" not in args.output and not FileSystems.exists(args.output):
        FileSystems.mkdirs(args.output)
    job = StreamJob(
        specs=specs,
        transforms=transforms,
        budget=budget,
        window_plan=(
            _window_plan(budget, relation, args.max_windows_per_unit) if args.ledger else None
        ),
        clock=clock,
        state=state,
        output=args.output,
        ledger=args.ledger,
        dataset=args.dataset,
        ledger_timeout=args.ledger_timeout,
        landing=args.landing,
        job_id=job_id,
        grant_ahead=args.grant_ahead,
        stop_after=args.stop_after_windows,
        stop_file=args.stop_file,
        attempt=attempt,
        persons=unit is not None,
        windows_per_unit=args.max_windows_per_unit,
        now=now,
        windows=dict(known),
    )
    flink: FlinkJobs | None = None
    flink_address = flink_cluster_address(options)
    if flink_address is None and _flink_elsewhere(options):
        LOG.warning(
            "FlinkRunner with --job_endpoint and no --flink_master host:port: a stop cannot "
            "make sure its Flink job ended (Beam's cancel leaves a cluster's job running); "
            "give the cluster's REST address as --flink_master"
        )
    if flink_address is not None:
        flink = FlinkJobs(flink_address, args.cancel_timeout)
        named_job = options.view_as(GoogleCloudOptions)
        if named_job.job_name is None:  # the name this run's Flink job is found by
            named_job.job_name = flink_job_name(job_id, attempt)
        if attempts:  # a killed run's Flink job may still run: it ends before we settle
            flink.end({flink_job_name(job_id, n) for n in attempts}, "an earlier run's pipeline")
    if unit is not None:
        person_key(state, create=True)  # before any window names a person
    left = job.recover(attempts, args.max_windows_per_unit)
    if left == 0:
        refusal = (
            f"--state {state.location} belongs to a job that already published windows (or "
            "may have): every person may already be in --max_windows_per_unit windows, so "
            "the job admits no more records (its windows pending publication, if any, were "
            "published); start a new job with a new --state (its windows are charged anew)"
        )
        if job.errors:  # a pending window that could not be published
            raise StreamError("; ".join([*job.errors, refusal]))
        raise ValueError(refusal)
    columns = list(
        dict.fromkeys(
            ([unit] if unit else [])
            + [c for spec in specs for c in spec.columns]
            + ([args.event_time] if args.event_time else [])
        )
    )
    direct = stream_runner(options)  # the DirectRunner (ours), or None: Beam's choice
    pipeline = beam.Pipeline(runner=direct, options=options)
    if source is not None:
        read = source(pipeline)
    else:
        read = pipeline | "WatchLanding" >> ReadExport(
            args.landing,
            columns=columns,
            input_format=source_table.get("format"),
            on_bad_record=on_bad_record,
            unit_column=unit,
            watch_interval=args.poll_seconds,
        )
    rows = (
        read
        | "Records" >> beam.Filter(lambda element: not isinstance(element, SkippedFile))
        | "AssignWindows"
        >> beam.ParDo(
            AssignWindows(
                clock,
                state.location,
                args.event_time,
                on_bad_record == "fail",
                attempt,
                args.event_time_format,
                grant_wait=GRANT_WAIT_POLLS * args.poll_seconds + args.ledger_timeout,
            )
        )
    )
    persons: list[PCollection] = []
    if unit is not None:  # each person within the windows left to them (restarts included)
        keyed = rows | "KeyPersons" >> beam.ParDo(
            KeyPersons(state.location, unit, clock)
        ).with_outputs("unkeyed", main="keyed")
        admitted = keyed.keyed | "AdmitPersons" >> beam.ParDo(
            AdmitPersons(state.location, attempt, clock)
        ).with_input_types(beam.typehints.Tuple[int, Any]).with_outputs(  # an int state key
            PERSONS_TAG, main="rows"
        )
        rows = (admitted.rows, keyed.unkeyed) | "AdmittedRows" >> beam.Flatten()
        persons = [
            admitted[PERSONS_TAG] | "PersonsWindows" >> beam.WindowInto(clock.beam_windows())
        ]
    rows = rows | "Windows" >> beam.WindowInto(clock.beam_windows())
    releases = [
        rows | spec.name >> transform for spec, transform in zip(specs, transforms, strict=True)
    ]
    _ = (
        [r | f"Record{i}" >> beam.Map(_as_record) for i, r in enumerate(releases)] + persons
        | "AllReleases" >> beam.Flatten()
        | "Collect" >> beam.CombineGlobally(ToListCombineFn()).without_defaults()
        | "Commit" >> beam.ParDo(CommitWindow(scratch, clock, persons=unit is not None))
    )
    LOG.info("stream %s: windows of %d s, watching %s", job_id, clock.size, args.landing)
    with forgetting_ended_windows() if direct is not None else contextlib.nullcontext():
        result = pipeline.run()  # the DirectRunner chooses its evaluators here
    finished = threading.Event()
    cancelled = threading.Event()

    def wait() -> None:
        try:
            result.wait_until_finish()
        except Exception as error:  # reported below: our own error's message, or none
            # A runner reports the job's own cancel as a failure (Beam's portable runner:
            # "failed in state CANCELLED"): that ending is this process's decision, not one.
            if not cancelled.is_set():
                job.errors.append(_own_message(error) or "the pipeline failed")
        finally:
            finished.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    try:
        while True:
            job.grant()
            job.publish()
            if job.done():
                break
            if finished.is_set():
                job.publish()
                break
            # until the pipeline reads, look often: its first batch waits for the grants
            time.sleep(args.poll_seconds if job.reading else min(args.poll_seconds, 0.2))
    finally:
        if not finished.is_set():
            cancelled.set()  # before the cancel: the waiter may see its end at once
            try:
                result.cancel()
            except Exception:  # a runner that cannot cancel: the process exits anyway
                LOG.warning("the pipeline could not be cancelled")
        if flink is not None:  # Beam's cancel leaves a cluster's Flink job running
            try:
                flink.end({str(options.view_as(GoogleCloudOptions).job_name)}, "the pipeline")
            except StreamError as error:
                job.errors.append(str(error))
    job.write_outputs()
    document = job.document()
    print_summary(job.summary_document(document))
    if job.errors:
        raise StreamError("; ".join(job.errors))
    return document


def _own_message(error: BaseException) -> str | None:
    """The message of the first of our own errors in ``error``'s chain (a bad record, named by
    file and field; never a value), without the runner's stage suffix; None if none is."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, BeamDPError):
            return str(current).split(" [while running", 1)[0]
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class StreamError(BeamDPError, RuntimeError):
    """A window that could not be published, or a pipeline that failed (one line)."""


def main() -> None:
    cli(lambda: run(), skip_hint=SKIP_HINT_CONFIG)


if __name__ == "__main__":
    main()
