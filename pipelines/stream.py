"""The streaming job: statistics released per window, from export shards landing in a location.

    python -m pipelines.stream --config job.toml --landing 'landing/*.parquet' \\
        --state state/ --output out/ --window_seconds 3600 \\
        [--event_time FIELD --allowed_lateness SECONDS] [--stop_after_windows N] \\
        [--stop_file PATH] [--ledger URL --dataset NAME] --runner FlinkRunner --streaming

The config is the release job's (``python -m pipelines.release --help``): ``[input]`` (its
``path`` is replaced by ``--landing``), ``[budget]`` (the budget of ONE window) and the
``[[statistics]]``. What the job does, in order:

* **Windows.** Records go to fixed windows of ``--window_seconds``: by the time their file was
  matched (arrival time, the default) or by an event-time field (``--event_time``, seconds
  since the epoch or a timestamp). A window's statistics are released once the watermark
  passes its end plus ``--allowed_lateness`` (event time only). **Late data** (public rule): a
  record whose window ended more than the allowed lateness before its file was matched is
  dropped, as is a record of a window without budget (below).
* **Budget per window, before any of its data is read.** The job reserves each window's
  budget in the ledger (``--ledger``/``--dataset``) before the window opens, up to
  ``--grant_ahead`` windows ahead of the clock, and records its decision in ``--state``. A
  window the ledger refuses (its period has no budget left) admits no record and releases
  nothing; the outputs say so. ``history`` shows one run per window.
* **Each person across windows.** Every statistic keeps each person's records in at most
  ``max_windows_per_unit`` windows over the job's life (``[stream]``-wide, from the flag of
  that name; the pipeline's per-person state), and each window's release runs at the window's
  budget divided by that bound. A person's loss over the whole job is at most the window's
  budget; the ledger charges every window its share (``budget / max_windows_per_unit``), so
  what it shows spent is an upper bound.
* **Exactly once per window.** Each window's releases are gathered into one element and
  committed as one file (``pipelines.execute``'s rule, per window); the job's own process
  publishes each window once, only if it holds exactly the planned releases, after the ledger
  committed the window's run. A window that fails this check is not published and stays
  charged; the job goes on.
* **Outputs that grow**: ``release.json`` (every window so far, with the windows without
  budget), ``releases.jsonl`` (one line per release), ``release.avro`` and ``report.html``,
  rewritten through Beam's filesystems after each window.
* **Restarts.** ``--state`` remembers the job (its config and flags), the windows granted and
  published. A job started again on the same ``--state`` goes on only if no window was
  published yet (its granted windows are reused, never charged twice); once a window was
  published it is refused: the runners here cannot restore the per-person window state
  through Beam's Python SDK, and a restart without it would give every person fresh windows.
  Start a new job with a new ``--state`` instead: its windows are charged anew.

The DirectRunner cannot watch files (Beam's unbounded file source needs Prism, which fails
offline): run it on Flink (``make engines``; ``--runner FlinkRunner --flink_version 1.19``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.pvalue import PCollection
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.combiners import ToListCombineFn

from beam_dp import (
    BeamDPError,
    LedgerEntry,
    PrivacyBudget,
    ReadExport,
    Release,
    SkippedFile,
    data_error,
    ledger_entries_to_record,
    output_files,
)
from beam_dp.ledger import Cost, LedgerError, Plan, Reservation, RunInfo, open_ledger
from pipelines._state import LOG
from pipelines.cli import SKIP_HINT_CONFIG, cli
from pipelines.execute import PlannedRelease, ReleaseCheckError, check_releases
from pipelines.flags import JOB_EPILOG, add_operator_arguments, job_parser, parse_args
from pipelines.job_run import check_privacy_unit
from pipelines.ledger_charge import check_ledger_flags
from pipelines.release import config_keys_help, load_config
from pipelines.statistics import StatisticSpec, spec_from_config

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


class StreamState:
    """The job's state location (any Beam filesystem): what the job is, and per window what
    was granted and published. Written by this process only; read by the workers' admission
    step (the grants). Every file is written whole and renamed into place."""

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
        final = self.path(*parts)
        partial = final + f".{uuid.uuid4().hex}.partial"
        folder = self.path(*parts[:-1]) if len(parts) > 1 else self.location
        if "://" not in final and not FileSystems.exists(folder):
            FileSystems.mkdirs(folder)
        with FileSystems.create(partial) as handle:
            handle.write(json.dumps(value, sort_keys=True).encode("utf-8"))
        if FileSystems.exists(final):
            FileSystems.delete([final])
        FileSystems.rename([partial], [final])

    def window(self, index: int) -> dict[str, Any] | None:
        found = self.read("windows", f"{index}.json")
        return found if isinstance(found, dict) else None

    def set_window(self, index: int, record: dict[str, Any]) -> None:
        self.write({"window": index, **record}, "windows", f"{index}.json")

    def windows(self) -> dict[int, dict[str, Any]]:
        pattern = self.path("windows", "*.json")
        found = FileSystems.match([pattern])[0].metadata_list
        out: dict[int, dict[str, Any]] = {}
        for metadata in found:
            name = metadata.path.rsplit("/", 1)[-1].removesuffix(".json")
            if name.lstrip("-").isdigit():
                record = self.window(int(name))
                if record is not None:
                    out[int(name)] = record
        return out


# ---------------------------------------------------------------------------- the pipeline


def _event_seconds(column: pa.Array) -> np.ndarray:
    """Seconds since the epoch of an event-time column (numbers or timestamps); NaN if bad."""
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us")).cast(pa.int64())
        values = micros.to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
    else:
        values = column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    out = np.asarray(values, dtype=np.float64).copy()
    out[nulls] = np.nan
    return out


class AssignWindows(beam.DoFn):
    """Each batch's rows to their window (public rules only), timestamped inside Beam's window.

    A row is kept when its window was granted (a grant file in the state location) and its
    file was matched before the window closed (its end plus the allowed lateness); other rows
    are dropped. In arrival mode a row's time is its file's match time (the element's
    timestamp). Rows keep their batch's file name.
    """

    def __init__(self, clock: WindowClock, state: str, event_time: str | None, fail: bool):
        super().__init__()
        self._clock = clock
        self._state = state
        self._event = event_time
        self._fail = fail
        self._grants: dict[int, bool] = {}

    def _granted(self, index: int) -> bool:
        if index not in self._grants:
            record = StreamState(self._state).window(index)
            decided = record is not None and record.get("status") in ("granted", "published")
            if record is None:
                return False  # not decided yet: not admitted (asked again for the next batch)
            self._grants[index] = decided
        return self._grants[index]

    def process(
        self, element: Any, timestamp: Any = beam.DoFn.TimestampParam
    ) -> Iterator[beam_window.TimestampedValue]:
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
            seconds = _event_seconds(batch.column(self._event))
            valid = np.isfinite(seconds)
            if not valid.all() and self._fail:
                raise data_error(
                    source,
                    "the event-time field must hold a number of seconds or a timestamp "
                    '(use on_bad_record = "skip" to drop such records)',
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


class CommitWindow(beam.DoFn):
    """One window's releases as one file in the scratch location (written whole, renamed)."""

    def __init__(self, scratch: str, clock: WindowClock):
        super().__init__()
        self._scratch = scratch
        self._clock = clock

    def process(
        self, gathered: list[dict[str, Any]], window: Any = beam.DoFn.WindowParam
    ) -> Iterator[str]:
        start = float(window.start) - self._clock.lateness
        index = self._clock.index(start + _MICRO)
        final = FileSystems.join(self._scratch, f"{index}.json")
        partial = final + f".{uuid.uuid4().hex}.partial"
        text = json.dumps({"window": index, "releases": sorted(gathered, key=json.dumps)})
        with FileSystems.create(partial) as handle:
            handle.write(text.encode("utf-8"))
        if FileSystems.exists(final):
            FileSystems.delete([final])
        FileSystems.rename([partial], [final])
        yield final


def _as_record(release: Release) -> dict[str, Any]:
    return release.to_dict()


# ---------------------------------------------------------------------------- the driver


@dataclass
class StreamJob:
    """What the job's own process does while the pipeline runs: grant, publish, stop."""

    specs: list[StatisticSpec]
    transforms: list[Any]
    budget: PrivacyBudget
    window_plan: Plan | None
    clock: WindowClock
    state: StreamState
    scratch: str
    output: str
    ledger: str | None
    dataset: str | None
    ledger_timeout: float
    landing: str
    job_id: str
    grant_ahead: int
    stop_after: int | None
    stop_file: str | None
    now: Callable[[], float] = time.time
    published: list[dict[str, Any]] = field(default_factory=list)
    windows: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _reservations: dict[int, Reservation] = field(default_factory=dict)

    # -- grants ---------------------------------------------------------------------------

    def grant(self) -> None:
        """Decide every window up to ``grant_ahead`` windows past the clock (once each)."""
        current = self.clock.index(self.now())
        for index in range(current, current + self.grant_ahead + 1):
            if index in self.windows:
                continue
            record = self._decide(index)
            self.windows[index] = record
            self.state.set_window(index, record)
            if record["status"] == "refused":
                LOG.info("window %s: no budget left: it admits no record", self.clock.label(index))

    def _decide(self, index: int) -> dict[str, Any]:
        label = self.clock.label(index)
        if self.ledger is None or self.dataset is None or self.window_plan is None:
            return {"status": "granted", "label": label}
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
        return {"status": "granted", "label": label, "run": reservation.run_id}

    # -- publishing -----------------------------------------------------------------------

    def planned(self) -> list[PlannedRelease]:
        return [
            PlannedRelease(name, key, optional=optional)
            for transform in self.transforms
            for name, key, optional in transform.planned_releases
        ]

    def publish(self) -> None:
        """Publish every committed window not yet published (each once)."""
        found = FileSystems.match([FileSystems.join(self.scratch, "*.json")])[0].metadata_list
        for metadata in sorted(found, key=lambda m: m.path):
            name = metadata.path.rsplit("/", 1)[-1].removesuffix(".json")
            if not name.lstrip("-").isdigit():
                continue
            index = int(name)
            record = self.windows.get(index) or self.state.window(index) or {}
            if record.get("status") != "granted":
                continue  # published or failed already, or never granted: never again
            with FileSystems.open(metadata.path) as handle:
                gathered = json.loads(handle.read().decode("utf-8"))["releases"]
            self._publish(index, record, gathered)

    def _publish(self, index: int, record: dict[str, Any], gathered: list[Any]) -> None:
        label = self.clock.label(index)
        try:
            labels = {r.get("window") for r in gathered}
            if len(labels) > 1:
                raise ReleaseCheckError("a window's releases carry several windows")
            planned = [
                PlannedRelease(p.name, p.key, next(iter(labels), None), p.optional)
                for p in self.planned()
            ]
            releases, _skipped = check_releases(
                ["window"], [("release", r) for r in gathered], planned
            )
        except ReleaseCheckError as error:
            self.errors.append(f"window {label}: {error}")
            LOG.warning("window %s: not published (%s); it stays charged", label, error)
            record = {**record, "status": "failed"}
            self.windows[index] = record
            self.state.set_window(index, record)
            return
        entries = ledger_entries_to_record(
            [
                Release(r["value"], LedgerEntry.from_dict(r), r.get("key"), r.get("window"))
                for r in releases
            ]
        )
        reservation = self._reservations.get(index)
        if reservation is None and record.get("run") is not None:
            reservation = self._resume(int(record["run"]))
        if reservation is not None:
            reservation.commit(entries, FileSystems.join(self.output, "release.json"))
        for release in releases:
            self.published.append({**release, "event_window": label})
        record = {**record, "status": "published"}
        self.windows[index] = record
        self.state.set_window(index, record)
        self.write_outputs()
        LOG.info("window %s: %d release(s) published", label, len(releases))

    def _resume(self, run_id: int) -> Reservation | None:
        assert self.ledger is not None
        with open_ledger(self.ledger, timeout=self.ledger_timeout) as opened:
            return opened.resume(run_id)

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

    def write_outputs(self) -> None:
        document = self.document()
        files = output_files(document)
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.published)
        files["releases.jsonl"] = lines.encode("utf-8")
        for name, data in files.items():
            final = FileSystems.join(self.output, name)
            partial = final + f".{uuid.uuid4().hex}.partial"
            with FileSystems.create(partial) as handle:
                handle.write(data)
            if FileSystems.exists(final):
                FileSystems.delete([final])
            FileSystems.rename([partial], [final])

    def done(self) -> bool:
        published = sum(1 for r in self.windows.values() if r["status"] == "published")
        if self.stop_after is not None and published >= self.stop_after:
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
                        help="stop after this many windows were published. Default: run until "
                        "stopped")  # fmt: skip
    parser.add_argument("--stop_file", metavar="PATH", default=None,
                        help="stop when this file exists. Default: none")  # fmt: skip
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
        "allowed_lateness": args.allowed_lateness,
        "max_windows_per_unit": args.max_windows_per_unit,
        "dataset": args.dataset,
    }


def _check_restart(state: StreamState, identity: dict[str, Any]) -> tuple[str, dict[int, Any]]:
    """A new job's id, or an unfinished one's (nothing published yet); else refused."""
    job = state.read("job.json")
    if job is None:
        job_id = uuid.uuid4().hex
        state.write({"id": job_id, **identity}, "job.json")
        return job_id, {}
    if {k: job.get(k) for k in identity} != identity:
        raise ValueError(
            f"--state {state.location} holds another job (its config or flags differ); give "
            "a new --state for a new job"
        )
    windows = state.windows()
    if any(record.get("status") in ("published", "failed") for record in windows.values()):
        raise ValueError(
            f"--state {state.location} belongs to a job that already published windows: "
            "restarting it would give every person fresh windows (the per-person window "
            "state cannot be restored through Beam's Python SDK here), so the job refuses "
            "to spend again; start a new job with a new --state (its windows are charged "
            "anew)"
        )
    return str(job["id"]), windows


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
    if args.max_windows_per_unit < 1:
        raise ValueError("--max_windows_per_unit must be an integer >= 1")
    if args.grant_ahead < 0:
        raise ValueError("--grant_ahead must be an integer >= 0")
    if args.stop_after_windows is not None and args.stop_after_windows < 1:
        raise ValueError("--stop_after_windows must be an integer >= 1")
    if not args.poll_seconds > 0:
        raise ValueError("--poll_seconds must be > 0")
    if source is None and options.view_as(StandardOptions).runner in (None, "DirectRunner"):
        raise ValueError(
            "the DirectRunner cannot watch a location for new files (Beam's unbounded file "
            "source needs Prism, which is not available offline): run the streaming job on "
            "Flink (make engines; --runner FlinkRunner --flink_version 1.19)"
        )
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
    state = StreamState(args.state)
    identity = _job_identity(args, Path(args.config).read_bytes())
    job_id, known = _check_restart(state, identity)
    scratch = state.path("scratch")
    for location in (scratch, args.output):
        if "://" not in location and not FileSystems.exists(location):
            FileSystems.mkdirs(location)
    job = StreamJob(
        specs=specs,
        transforms=transforms,
        budget=budget,
        window_plan=(
            _window_plan(budget, relation, args.max_windows_per_unit) if args.ledger else None
        ),
        clock=clock,
        state=state,
        scratch=scratch,
        output=args.output,
        ledger=args.ledger,
        dataset=args.dataset,
        ledger_timeout=args.ledger_timeout,
        landing=args.landing,
        job_id=job_id,
        grant_ahead=args.grant_ahead,
        stop_after=args.stop_after_windows,
        stop_file=args.stop_file,
        now=now,
        windows=dict(known),
    )
    columns = list(
        dict.fromkeys(
            ([unit] if unit else [])
            + [c for spec in specs for c in spec.columns]
            + ([args.event_time] if args.event_time else [])
        )
    )
    pipeline = beam.Pipeline(options=options)
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
            AssignWindows(clock, state.location, args.event_time, on_bad_record == "fail")
        )
        | "Windows" >> beam.WindowInto(clock.beam_windows())
    )
    releases = [
        rows | spec.name >> transform for spec, transform in zip(specs, transforms, strict=True)
    ]
    _ = (
        [r | f"Record{i}" >> beam.Map(_as_record) for i, r in enumerate(releases)]
        | "AllReleases" >> beam.Flatten()
        | "Collect" >> beam.CombineGlobally(ToListCombineFn()).without_defaults()
        | "Commit" >> beam.ParDo(CommitWindow(scratch, clock))
    )
    job.grant()
    LOG.info("stream %s: windows of %d s, watching %s", job_id, clock.size, args.landing)
    result = pipeline.run()
    finished = threading.Event()
    cancelled = threading.Event()

    def wait() -> None:
        try:
            result.wait_until_finish()
        except Exception:  # the job's own error is reported below, by stage only
            # A runner reports the job's own cancel as a failure (Beam's portable runner:
            # "failed in state CANCELLED"): that ending is this process's decision, not one.
            if not cancelled.is_set():
                job.errors.append("the pipeline failed")
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
            time.sleep(args.poll_seconds)
    finally:
        if not finished.is_set():
            cancelled.set()  # before the cancel: the waiter may see its end at once
            try:
                result.cancel()
            except Exception:  # a runner that cannot cancel: the process exits anyway
                LOG.warning("the pipeline could not be cancelled")
    job.write_outputs()
    document = job.document()
    if job.errors:
        raise StreamError("; ".join(job.errors))
    return document


class StreamError(BeamDPError, RuntimeError):
    """A window that could not be published, or a pipeline that failed (one line)."""


def main() -> None:
    cli(lambda: run(), skip_hint=SKIP_HINT_CONFIG)


if __name__ == "__main__":
    main()
