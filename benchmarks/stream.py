"""Speed of the streaming job (issue 26, "Speed"): sustained records/s and the latency from a
window's close to its release record.

Run from the repository root (Flink needs ``make engines``)::

    python -m benchmarks.stream --runners flink --rows-per-shard 20000,200000 --every 1
    python -m benchmarks.stream --runners direct --rows-per-shard 20000 --windows 4

The job is ``python -m pipelines.stream`` with the sample streaming config's statistics (a
three-party election and a median over a grid of 1,801 points; ``[budget] epsilon = 2``),
``--max_windows_per_unit 2`` and fixed windows of ``--window-seconds`` by arrival time. The
data: one generated Parquet shard of ``--rows-per-shard`` rows (``user_id`` from a pool of
``rows / 4`` units, a vote, a weight), copied into the landing folder under a new name every
``--every`` seconds by ``python -m pipelines.land_shards`` (a steady landing rate of
``rows-per-shard / every`` records/s).

* **flink**: Beam's FlinkRunner in streaming mode on the embedded mini cluster (a job server
  with ``--flink-master [local]``, SDK harness in this process: LOOPBACK), as the engine
  tests run it; the job watches the folder (``fileio.MatchContinuously``, polled every
  ``--poll-seconds``). Per window: the records that landed in it, and the **latency** from
  its close (its end; arrival time, no lateness) to the moment its release record appears in
  ``releases.jsonl`` (polled every 50 ms). The first window, which the job's start-up
  overlaps, is left out of the rates. **Sustained records/s**: the records of the published
  windows (after the first) over their total length, reported with the latencies: a rate is
  sustained while the latency does not grow from window to window.
* **direct**: the DirectRunner cannot watch a folder offline (Beam's unbounded file source
  needs Prism), so the same job graph runs on the BundleBasedDirectRunner with a TestStream
  of the same shards in place of the watcher (``pipelines.stream.run(source=...)``). Event
  time is synthetic there, so only records/s (all records over the wall time of the job,
  start-up included) and CPU seconds are measured; no latency.

* **long** (``--long``, issue 37): a run of many windows (``--windows 500 --window-seconds 2``)
  on the DirectRunner offline, the job ``python -m pipelines.stream`` in a process of its own
  watching a real folder (its own watcher), with ``--ledger`` (SQLite) and a Parquet shard of
  ``--rows-per-shard`` rows landing every ``--every`` seconds throughout, each of new people
  (``rows / 4`` of them: with ``--max_windows_per_unit 2`` a person's rows count in at most
  2 windows, so a fixed pool would leave later windows empty). Sampled every
  ``--sample-seconds``: the resident memory (RSS) of every process of the job (the job's
  process and any child; on ``--long-runner flink`` also the job server's JVM, which runs the
  mini cluster), the size of ``--state`` and of the ledger's files; per window, the latency
  from its close to its release record in ``releases.jsonl``. Printed per stretch of
  ``--stretch`` windows (the first is the warm-up): RSS median and max, state and ledger size
  at its end, latency median and max; then the growth of RSS from the second stretch to the
  last, per 100 windows, beside the persons seen (the per-person window state grows with
  people by design: ``8 (1 + max_windows_per_unit)`` bytes each).

  **On the DirectRunner the job's cost per window grows with the windows run** (Beam 2.77's
  BundleBasedDirectRunner, not the job): its streaming GroupAlsoByWindow keeps, for every key
  and every window the key fired in, the trigger's bookkeeping (``index``,
  ``nonspeculative_index``, ``tombstone``) and its ``window_ids``, never dropped when the window
  expires (Flink and Dataflow clear a window's state then), and copies a key's whole state for
  each bundle (``InMemoryUnmergedState.copy``) while its watermark manager scans every key ever
  seen for timers each round. So memory grows by a few hundred bytes per key per window, and
  once a window's work exceeds its length the watcher's events queue up in Beam's TestStream
  reader (an unbounded queue): the watermark the pipeline sees lags the clock more and more and
  windows are published later and later (seen from outside as a hang; it is not a deadlock).
  Offline, stop the job now and then (``--stop_after_windows``) and start it again on the same
  ``--state``: a restart keeps every person's windows and starts a new runner.

CPU seconds: user + system of this process (the job's driver and, on LOOPBACK, the SDK
harness) and of the job server JVM (the mini cluster), over the run; records per CPU second
count every record landed during the run (start-up included). The machine is shared:
read the wall figures next to the CPU ones. It prints a Markdown table; it never fails on a
figure.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.engine_processes import REPO, JobServer, java_home, job_server_jar

CONFIG = """[input]
privacy_unit = "user_id"
format = "parquet"
on_bad_record = "fail"

[budget]
epsilon = 2.0
relation = "add_remove"

[[statistics]]
name = "vote_winner"
type = "election"
candidate = "vote"
candidates = ["Gyudon Party", "Melon-pan Party", "Natto Party"]
weight = 1

[[statistics]]
name = "median_weight"
type = "median"
value = "weight_kg"
lower = 20.0
upper = 200.0
num_points = 1801
max_contributions = 1
weight = 1
"""
PARTIES = ("Gyudon Party", "Melon-pan Party", "Natto Party")


def make_shard(folder: Path, rows: int) -> Path:
    """One Parquet shard of ``rows`` rows (every landing copies it under a new name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"shard-{rows}.parquet"
    rng = np.random.default_rng(rows)
    table = pa.table(
        {
            "user_id": rng.integers(0, max(1, rows // 4), rows, dtype=np.int64),
            "vote": pa.array(rng.choice(PARTIES, rows)),
            "weight_kg": rng.normal(65.0, 12.0, rows).clip(20.0, 200.0),
        }
    )
    pq.write_table(table, path)
    return path


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system + times.children_user + times.children_system)


def _window_end(label: str) -> float:
    """The end of ``[start, end)`` (ISO timestamps) in seconds since the epoch."""
    end = label.strip("[)").split(",")[1].strip()
    return datetime.datetime.fromisoformat(end).timestamp()


@dataclass
class Result:
    runner: str
    rows_per_shard: int
    every: float
    wall: float
    cpu: float
    windows: int
    records: int  # the records of the windows measured
    seconds: float  # their total length (flink) or the wall time (direct)
    latencies: list[float] = field(default_factory=list)
    note: str = ""
    processed: int = 0  # every record the run read (CPU figures are over the whole run)

    def row(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        per_cpu = (self.processed or self.records) / self.cpu if self.cpu else 0.0
        lat = ", ".join(f"{x:.1f}" for x in self.latencies) or "n/a"
        return (
            f"| {self.runner} | {self.rows_per_shard:,} / {self.every:g} s | "
            f"{self.rows_per_shard / self.every:,.0f} | {self.windows} | {self.records:,} | "
            f"{rate:,.0f} | {self.wall:.0f} | {self.cpu:.0f} | {per_cpu:,.0f} | {lat} |"
            + (f" {self.note}" if self.note else "")
        )


class Watcher:
    """Notes when each window's first release record appears in ``releases.jsonl``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                lines = self._path.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            now = time.time()
            for line in lines:
                with_window = json.loads(line).get("event_window")
                if with_window is not None and with_window not in self.seen:
                    self.seen[with_window] = now
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Lander:
    """``python -m pipelines.land_shards``, with the time each shard landed (its output)."""

    def __init__(self, shard: Path, landing: Path, every: float) -> None:
        self.landed: list[float] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.land_shards", "--source", str(shard),
             "--landing", str(landing), "--every", str(every), "--rounds", "100000"],
            cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("landed "):
                self.landed.append(time.time())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self._thread.join()


def _argv(workdir: Path, landing: str, args: argparse.Namespace, *extra: str) -> list[str]:
    config = workdir / "stream.toml"
    config.write_text(CONFIG)
    return ["--config", str(config), "--landing", landing, "--state", str(workdir / "state"),
            "--output", str(workdir / "out"), "--window_seconds", str(args.window_seconds),
            "--max_windows_per_unit", "2", "--poll_seconds", str(args.poll_seconds),
            "--stop_after_windows", str(args.windows + 1), *extra]  # fmt: skip


def _rss(processes: list[psutil.Process]) -> float:
    """The resident memory of ``processes`` and all their children, in MB."""
    seen: dict[int, psutil.Process] = {}
    for process in processes:
        try:
            seen[process.pid] = process
            for child in process.children(recursive=True):
                seen[child.pid] = child
        except psutil.Error:
            continue
    total = 0
    for process in seen.values():
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def _size(path: Path) -> float:
    """The bytes of every file under ``path`` (or of the files ``path*``), in MB."""
    total = 0
    if path.is_dir():
        for root, _, files in os.walk(path):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    continue
    else:
        for found in path.parent.glob(path.name + "*"):
            try:
                total += found.stat().st_size
            except OSError:
                continue
    return total / 2**20


class FreshLander:
    """A Parquet shard of ``rows`` rows of new people (``rows / 4`` of them, 4 rows each)
    into ``landing`` every ``every`` seconds, until stopped."""

    def __init__(self, landing: Path, rows: int, every: float) -> None:
        self.landing, self.rows, self.every = landing, rows, every
        self.shards = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rng = np.random.default_rng(0)
        people = max(1, self.rows // 4)
        next_at = time.monotonic()
        while not self._stop.is_set():
            first = self.shards * people
            table = pa.table(
                {
                    "user_id": first + np.arange(self.rows, dtype=np.int64) % people,
                    "vote": pa.array(rng.choice(PARTIES, self.rows)),
                    "weight_kg": rng.normal(65.0, 12.0, self.rows).clip(20.0, 200.0),
                }
            )
            partial = self.landing / f".{self.shards:06d}.partial"
            pq.write_table(table, partial)
            os.replace(partial, self.landing / f"{self.shards:06d}.parquet")
            self.shards += 1
            next_at += self.every
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ReleaseTimes:
    """When each window's first release record appears in ``releases.jsonl`` (the file is
    rewritten whole on each publication: read every ``interval`` seconds)."""

    def __init__(self, path: Path, interval: float = 0.1) -> None:
        self._path, self._interval = path, interval
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        lines_seen = 0
        while not self._stop.is_set():
            try:
                lines = self._path.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            now = time.time()
            for line in lines[lines_seen:]:
                label = json.loads(line).get("event_window")
                if label is not None and label not in self.seen:
                    self.seen[label] = now
            lines_seen = max(lines_seen, len(lines))
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Sample:
    at: float
    windows: int  # windows published so far
    rss_job: float  # MB: the job's process and its children
    rss_server: float  # MB: the job server's JVM (flink), else 0
    state: float  # MB
    ledger: float  # MB


def run_long(args: argparse.Namespace, workdir: Path, server: JobServer | None) -> list[str]:
    """The long run (``--long``): figures per stretch of windows, as Markdown lines."""
    from pipelines import budget

    landing, out = workdir / "landing", workdir / "out"
    landing.mkdir(parents=True)
    ledger_file = workdir / "ledger.db"
    url = f"sqlite:///{ledger_file}"
    budget.run(["create", "--ledger", url, "--dataset", "bench", "--input", str(landing),
                "--epsilon", "1000000", "--renewal", "yearly"], out=io.StringIO())  # fmt: skip
    extra = ["--ledger", url, "--dataset", "bench"]
    if server is not None:
        extra += ["--runner", "FlinkRunner", "--flink_version", "1.19",
                  "--job_endpoint", server.endpoint, "--environment_type", "LOOPBACK"]  # fmt: skip
    argv = _argv(workdir, str(landing / "*.parquet"), args, *extra)
    argv[argv.index("--stop_after_windows") + 1] = str(args.windows)
    lander = FreshLander(landing, args.rows_per_long_shard, args.every)
    times = ReleaseTimes(out / "releases.jsonl")
    samples: list[Sample] = []
    errors = (workdir / "job.err").open("wb")
    start = time.time()
    job = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "pipelines.stream", *argv], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=errors, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    processes = [psutil.Process(job.pid)]
    jvm = psutil.Process(server.process.pid) if server is not None else None
    try:
        while job.poll() is None:
            samples.append(
                Sample(
                    time.time(), len(times.seen), _rss(processes),
                    _rss([jvm]) if jvm is not None else 0.0,
                    _size(workdir / "state"), _size(ledger_file),
                )
            )  # fmt: skip
            time.sleep(args.sample_seconds)
            if time.time() - start > args.long_deadline:
                job.kill()
                break
    finally:
        job.wait()
        errors.close()
        lander.stop()
        times.stop()
    wall = time.time() - start
    ends = sorted((_window_end(label), seen) for label, seen in times.seen.items())
    latencies = [seen - end for end, seen in ends]
    persons = lander.shards * max(1, args.rows_per_long_shard // 4)
    lines = [
        "",
        f"long run: {args.long_runner}, {len(ends)} windows of {args.window_seconds} s published "
        f"(job status {job.returncode}), {lander.shards:,} shards of "
        f"{args.rows_per_long_shard:,} rows ({persons:,} persons) landed, wall {wall:.0f} s, "
        f"sampled every {args.sample_seconds:g} s",
        "",
        "| windows | RSS job MB (median / max) | RSS job server MB | state MB | ledger MB "
        "| latency s (median / max) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    stretch = args.stretch
    for first in range(0, len(ends), stretch):
        last = min(first + stretch, len(ends))
        part = [s for s in samples if first < s.windows <= last] or [samples[-1]]
        rss = [s.rss_job for s in part]
        jvm_rss = [s.rss_server for s in part]
        lat = latencies[first:last]
        lines.append(
            f"| {first + 1}-{last} | {np.median(rss):.0f} / {max(rss):.0f} | "
            f"{np.median(jvm_rss):.0f} | {part[-1].state:.1f} | {part[-1].ledger:.2f} | "
            f"{np.median(lat):.1f} / {max(lat):.1f} |"
        )
    # steady samples: a live process (RSS read), after the warm-up, before the job's ending
    after = [s for s in samples if s.rss_job > 0 and stretch < s.windows < len(ends)]
    if len(after) > 2 and after[-1].windows > after[0].windows:
        span = after[-1].windows - after[0].windows
        head = np.median([s.rss_job for s in after if s.windows <= 2 * stretch])
        tail = np.median([s.rss_job for s in after if s.windows > len(ends) - stretch])
        slope = np.polyfit([s.windows for s in after], [s.rss_job for s in after], 1)[0]
        lines += [
            "",
            f"after the warm-up (windows {stretch + 1}-{len(ends)}): RSS median "
            f"{head:.0f} MB (second stretch) -> {tail:.0f} MB (last stretch); least-squares "
            f"slope {100 * slope:+.1f} MB per 100 windows over {span} windows; the per-person "
            f"window state of {persons:,} persons is {persons * 8 * 3 / 2**20:.1f} MB (8 x 3 "
            "bytes each)",
        ]
    return lines


def run_flink(args: argparse.Namespace, rows: int, workdir: Path, server: JobServer) -> Result:
    from pipelines import stream

    shard = make_shard(workdir / "source", rows)
    landing = workdir / "landing"
    landing.mkdir()
    me, jvm = psutil.Process(), psutil.Process(server.process.pid)
    cpu0 = _cpu(me) + _cpu(jvm)
    start = time.time()
    watcher = Watcher(workdir / "out" / "releases.jsonl")
    lander = Lander(shard, landing, args.every)
    note = ""
    try:
        stream.run(
            _argv(workdir, str(landing / "*.parquet"), args, "--runner", "FlinkRunner",
                  "--flink_version", "1.19", "--job_endpoint", server.endpoint,
                  "--environment_type", "LOOPBACK")
        )  # fmt: skip
    except Exception as error:  # a figure, never a failure
        note = f"(the job failed: {type(error).__name__})"
    finally:
        lander.stop()
        watcher.stop()
    wall = time.time() - start
    cpu = _cpu(me) + _cpu(jvm) - cpu0
    ends = sorted((_window_end(label), seen) for label, seen in watcher.seen.items())
    measured = ends[1:]  # the first window overlaps the job's start-up
    records = 0
    for end, _ in measured:
        records += rows * sum(1 for t in lander.landed if end - args.window_seconds <= t < end)
    return Result(
        "flink",
        rows,
        args.every,
        wall,
        cpu,
        len(measured),
        records,
        float(len(measured) * args.window_seconds),
        [seen - end for end, seen in measured],
        note,
        rows * len(lander.landed),
    )


def run_direct(args: argparse.Namespace, rows: int, workdir: Path) -> Result:
    import apache_beam as beam
    import pyarrow.parquet as pq
    from apache_beam.testing import test_stream
    from apache_beam.transforms.window import TimestampedValue

    from pipelines import stream

    batch = pq.read_table(make_shard(workdir / "source", rows)).combine_chunks().to_batches()[0]
    base = int(time.time()) // args.window_seconds * args.window_seconds
    per_window = max(1, round(args.window_seconds / args.every))
    stamps = [
        base + w * args.window_seconds + i * args.every
        for w in range(args.windows)
        for i in range(per_window)
    ]

    def source(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for n, stamp in enumerate(stamps):
            element = TimestampedValue((f"{n:05d}-shard.parquet", batch), stamp)
            test = test.add_elements([element]).advance_watermark_to(stamp + 0.001)
        return pipeline | test.advance_watermark_to_infinity()

    me = psutil.Process()
    cpu0 = _cpu(me)
    start = time.time()
    note = ""
    argv = _argv(workdir, "/landing/*.parquet", args, "--runner", "BundleBasedDirectRunner",
                 "--grant_ahead", str(args.windows + 1))  # fmt: skip
    try:
        document = stream.run(argv, source=source, now=lambda: float(base))
        windows = len({r["event_window"] for r in document["releases"]})
    except Exception as error:
        note, windows = f"(the job failed: {type(error).__name__})", 0
    wall = time.time() - start
    return Result(
        "direct", rows, args.every, wall, _cpu(me) - cpu0, windows, rows * len(stamps), wall,
        note=note or "(TestStream; no latency)",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", default="flink,direct")
    parser.add_argument("--rows-per-shard", default="20000", help="comma-separated sizes")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between shards")
    parser.add_argument("--window-seconds", type=int, default=10)
    parser.add_argument("--windows", type=int, default=3, help="windows measured per run")
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    parser.add_argument("--long", action="store_true", help="the long run (see above)")
    parser.add_argument("--long-runner", choices=("direct", "flink"), default="direct")
    parser.add_argument("--rows-per-long-shard", type=int, default=200)
    parser.add_argument("--sample-seconds", type=float, default=2.0)
    parser.add_argument("--stretch", type=int, default=50, help="windows per printed row")
    parser.add_argument("--long-deadline", type=float, default=7200.0, help="seconds")
    args = parser.parse_args(argv)
    if args.long:
        return _main_long(args)
    runners = args.runners.split(",")
    unknown = set(runners) - {"flink", "direct"}
    if unknown:
        parser.error(f"unknown runner(s): {sorted(unknown)}")
    sizes = [int(size) for size in args.rows_per_shard.split(",")]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="beam_dp_stream_bench_") as tmp:
        server = None
        if "flink" in runners:
            java = java_home()
            if java is None or job_server_jar("flink") is None:
                parser.error("Flink needs Java 17 and the job server jar: run make engines")
            assert java is not None
            server = JobServer("flink", "[local]", Path(tmp) / "flink", java)
        try:
            for runner in runners:
                for rows in sizes:
                    workdir = Path(tmp) / f"{runner}-{rows}"
                    workdir.mkdir()
                    print(f"{runner}: {rows:,} rows every {args.every:g} s ...", flush=True)
                    if runner == "flink":
                        assert server is not None
                        results.append(run_flink(args, rows, workdir, server))
                    else:
                        results.append(run_direct(args, rows, workdir))
                    print(f"  {results[-1].row()}", flush=True)
        finally:
            if server is not None:
                server.stop()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "",
        f"{datetime.date.today()}, commit {commit}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end), "
        f"windows of {args.window_seconds} s, poll {args.poll_seconds:g} s",
        "",
        "| runner | landing | offered rec/s | windows | records | sustained rec/s | wall s "
        "| CPU s | landed rec per CPU s | latency s (close to release, per window) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *(result.row() for result in results),
    ]
    print("\n".join(lines))
    return lines


def _main_long(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="beam_dp_stream_long_") as tmp:
        server = None
        if args.long_runner == "flink":
            java = java_home()
            if java is None or job_server_jar("flink") is None:
                raise SystemExit("Flink needs Java 17 and the job server jar: run make engines")
            server = JobServer("flink", "[local]", Path(tmp) / "flink", java)
        try:
            lines = run_long(args, Path(tmp) / "long", server)
        finally:
            if server is not None:
                server.stop()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    lines.insert(
        1,
        f"{datetime.date.today()}, commit {commit}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"(load average {os.getloadavg()[0]:.1f} at the end), poll {args.poll_seconds:g} s, "
        f"a shard every {args.every:g} s",
    )
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
