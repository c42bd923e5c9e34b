"""The bounded quantiles job on real engines (issue 25): rows/s per core and peak memory of all
processes, on Flink (a local cluster), Spark (``local[2]``), Dask and the DirectRunner.

Run from the repository root after ``make engines``::

    python -m benchmarks.engines --rows 10000000                     # every runner at 10^7
    python -m benchmarks.engines --rows 10000000,30000000,100000000 --runners flink

Data (generated into ``--data-dir``, reused when present): Parquet files of 2^22 rows (so an
engine reads them in parallel), ``user_id`` int64 drawn uniformly from ``rows / 10`` units
(about 10 rows per unit), ``value`` lognormal(0, 1) float64. The job is
``python -m pipelines.quantiles --privacy_unit user_id --value value --quantiles 0.5
--lower 0 --upper 20 --epsilon 1`` (rows per unit ``auto``, the jobs' default: bounding
shuffles every row, a private choice of the bound, then a re-bound of every shard).

What is measured, per run, by sampling ``/proc`` every 0.2 s:

* **wall**: the job's process from start to exit (its own start-up included: imports, the
  temp-location probe job on every runner but the DirectRunner, Dask's LocalCluster, Spark's
  job server JVM, which the job starts itself);
* **CPU**: user + system seconds of every process involved: the job and all its descendants
  (Dask's scheduler and workers, the Spark job server and its executors), and, on Flink, the
  JobManager, the TaskManager, the job server and the SDK worker pool with its workers (what
  they spent before the job is subtracted). **rows/s per core** is rows / CPU seconds;
* **peak RSS**: the largest sum, over one sample, of the resident memory of all those
  processes (JVM heaps included: what the machine must hold).

The Flink cluster (one JobManager, one TaskManager with 2 slots and ``--flink-tm-memory``),
its job server (a fixed, pre-touched heap: :data:`JOB_SERVER_JVM`) and the worker pool (SDK
workers as separate processes, EXTERNAL) are started before each row count's run and stopped
after it (``--flink-cluster fresh``), so every size is measured from the same state: a cluster
kept across jobs carries each finished job's class loaders and buffers into the next (measured:
a 10^7-row job run after a 10^8-row one found the TaskManager at 2.72 GB, against
2.36–2.46 GB as a fresh cluster's first job).
``--flink-cluster shared`` keeps one for all the runs, as an operator would; the cluster's start
is never part of a run's figures. Spark's and Dask's set-up is part of each run, as the job
starts them. It prints a Markdown table; it never fails on a figure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.engine_processes import (
    REPO,
    FlinkCluster,
    JobServer,
    WorkerPool,
    flink_home,
    java_home,
    job_server_jar,
)

DATA_DIR = REPO / "benchmarks" / "data"
FILE_ROWS = 1 << 22
ROW_GROUP = 1 << 20
RUNNERS = ("direct", "dask", "spark", "flink")
#: The Flink jobs' defaults: one instance per slot of the benchmark's cluster, blocking exchanges
#: (the configuration whose peak memory is flat in rows: benchmarks/SCALE.md, "Keyed stages").
FLINK_PARALLELISM = 2
FLINK_EXECUTION_MODE = "BATCH_FORCED"
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def make_data(directory: Path, rows: int) -> str:
    """The export of ``rows`` rows (cached); its glob pattern."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = directory / f"engines_{rows}"
    pattern = str(folder / "part-*.parquet")
    done = folder / ".complete"
    if done.exists():
        return pattern
    folder.mkdir(parents=True, exist_ok=True)
    units = max(1, rows // 10)
    for index, start in enumerate(range(0, rows, FILE_ROWS)):
        rng = np.random.default_rng([rows, index])
        size = min(FILE_ROWS, rows - start)
        path = folder / f"part-{index:05d}.parquet"
        table = pa.table(
            {
                "user_id": rng.integers(0, units, size, dtype=np.int64),
                "value": rng.lognormal(0.0, 1.0, size),
            }
        )
        pq.write_table(table, path.with_suffix(".partial"), row_group_size=ROW_GROUP)
        path.with_suffix(".partial").rename(path)
    done.touch()
    return pattern


# ------------------------------------------------------------------------------ sampling


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except OSError:
        return 0


def _descendants(roots: set[int]) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents[int(entry.name)] = stat[0]
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


_ROLES = (
    ("TaskManagerRunner", "TaskManager"),
    ("StandaloneSessionClusterEntrypoint", "JobManager"),
    ("job-server", "job server"),
    ("SdkHarness", "SDK workers"),
    ("worker_pool", "worker pool"),
)


def _role(pid: int) -> str:
    """What a process is, from its command line (for the peak's breakdown)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    return next((role for mark, role in _ROLES if mark in command), "other")


class Sampler:
    """Samples ``/proc`` every 0.2 s: the process trees under ``roots`` (long-lived: a
    cluster) and under the job. Peak RSS is the largest sum over one sample; CPU is, summed
    over every process seen, its own user + system time at its last sample, less what it had
    spent before the job (each process counted once, whoever reaps it; a process's last 0.2 s
    and processes shorter than that are missed)."""

    def __init__(self, roots: Sequence[int]) -> None:
        self.roots = set(roots)
        self.baseline = {
            pid: stat[1] for pid in _descendants(self.roots) if (stat := _stat(pid)) is not None
        }
        self.last: dict[int, float] = {}
        self.peak_rss = 0
        self.peak_roles: dict[str, tuple[int, int]] = {}  # role: (bytes, processes) at the peak
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, job: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self._thread.start()

    def _run(self, job: int) -> None:
        roles: dict[int, str] = {}
        while not self._stop.is_set():
            total = 0
            by_role: dict[str, list[int]] = {}
            for pid in _descendants(self.roots | {job}):
                stat = _stat(pid)
                if stat is None:
                    continue
                self.last[pid] = stat[1]
                rss = _rss(pid)
                total += rss
                if pid not in roles:
                    roles[pid] = "the job" if pid == job else _role(pid)
                by_role.setdefault(roles[pid], []).append(rss)
            if total > self.peak_rss:
                self.peak_rss = total
                self.peak_roles = {role: (sum(v), len(v)) for role, v in by_role.items()}
            self._stop.wait(0.2)

    def stop(self) -> float:
        """Stop sampling; the CPU seconds every process spent since the start."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return sum(cpu - self.baseline.get(pid, 0.0) for pid, cpu in self.last.items())


# ------------------------------------------------------------------------------- runs


def job_command(pattern: str, out: Path, flags: Sequence[str]) -> list[str]:
    return [
        sys.executable, "-m", "pipelines.quantiles", "--input", pattern,
        "--privacy_unit", "user_id", "--value", "value", "--quantiles", "0.5",
        "--lower", "0", "--upper", "20", "--epsilon", "1",
        "--output", str(out), "--overwrite", *flags,
    ]  # fmt: skip


@dataclass
class Result:
    runner: str
    rows: int
    wall: float
    cpu: float
    peak_rss: int
    failed: str = ""
    peak_roles: dict[str, tuple[int, int]] = field(default_factory=dict)


def run_job(
    runner: str, rows: int, command: Sequence[str], roots: Sequence[int], timeout: float
) -> Result:
    """One run of the job: wall time, CPU and peak RSS of all processes (:class:`Sampler`)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sampler = Sampler(roots)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            list(command), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=errors
        )
        sampler.start(process.pid)
        deadline = start + timeout
        while True:
            pid, status, _ = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, _ = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        cpu = sampler.stop()
        code = os.waitstatus_to_exitcode(status)
        failed = ""
        if code:
            errors.seek(0)
            text = errors.read().decode("utf-8", "replace")
            (Path(tempfile.gettempdir()) / f"beam_dp_engines_{runner}_{rows}.stderr").write_text(
                text
            )
            tail = text.strip().splitlines()[-1:]
            failed = f"exit {code}: {tail}"
    return Result(runner, rows, wall, cpu, sampler.peak_rss, failed, dict(sampler.peak_roles))


def _parallelism(text: str) -> int | str:
    """``--flink-parallelism``: a positive integer, or ``auto``."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a positive integer or 'auto'; received {text!r}")
    return int(text)


#: The Flink job server's heap, fixed and touched at start (as the cluster's JVMs are), so its
#: resident memory is its configuration and not how far its collector let the heap grow.
JOB_SERVER_JVM = ("-Xms256m", "-Xmx256m", "-XX:+AlwaysPreTouch")


def _stop(*processes: FlinkCluster | JobServer | WorkerPool | None) -> None:
    """Stop each of ``processes`` that was started, in order."""
    for process in processes:
        if process is not None:
            process.stop()


def _start_flink(
    args: argparse.Namespace, java: str, work: Path
) -> tuple[FlinkCluster, JobServer, WorkerPool, list[int], list[str]]:
    """A Flink cluster, its job server and an SDK worker pool; the processes to measure and the
    jobs' runner flags."""
    home = flink_home()
    assert home is not None
    run = Path(tempfile.mkdtemp(prefix="flink_", dir=work))
    # Sized explicitly: the quantiles combiner's partial accumulators (a dense
    # 10^6-point histogram, ~8 MB) pass through Flink's serializers on the task
    # heap, and gRPC hands each bundle to the SDK worker in Netty direct buffers
    cluster = FlinkCluster(
        home,
        run / "flink",
        java,
        args.flink_tm_memory,
        {
            "taskmanager.memory.task.heap.size": "1536m",
            "taskmanager.memory.managed.size": "256m",
            "taskmanager.memory.task.off-heap.size": "512m",
            "taskmanager.memory.framework.off-heap.size": "256m",
            # The JVMs touch their whole heap at start: their resident memory is
            # then what they are configured with, at every row count. Without it,
            # a JVM's resident memory creeps towards that size as its collector
            # reaches more of the heap, with the run's length, not its live data.
            "env.java.opts.taskmanager": "-XX:+AlwaysPreTouch",
            "env.java.opts.jobmanager": "-XX:+AlwaysPreTouch",
        },
    )
    server = pool = None
    try:
        server = JobServer("flink", cluster.master, run / "job-server", java, JOB_SERVER_JVM)
        pool = WorkerPool(run / "pool")
    except BaseException:
        _stop(server, cluster)
        raise
    roots = [
        cluster.jobmanager.pid,
        *(p.pid for p in cluster.taskmanagers),
        server.process.pid,
        pool.process.pid,
    ]
    flags = [
        "--runner", "FlinkRunner", "--flink_version", "1.19",
        "--job_endpoint", server.endpoint,
        "--environment_type", "EXTERNAL", "--environment_config", pool.address,
    ]  # fmt: skip
    if args.flink_execution_mode:
        flags += ["--execution_mode_for_batch", args.flink_execution_mode]
    return cluster, server, pool, roots, flags


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000000", help="comma-separated row counts")
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--timeout", type=float, default=7200.0)
    parser.add_argument("--flink-tm-memory", default="3584m")
    parser.add_argument(
        "--flink-parallelism",
        type=_parallelism,
        default=FLINK_PARALLELISM,
        help="the Flink jobs' --parallelism (instances run in turns on the 2 slots), or "
        "'auto': one instance per file of the export (each holds one file's share)",
    )
    parser.add_argument(
        "--flink-cluster",
        choices=("fresh", "shared"),
        default="fresh",
        help="'fresh': a new Flink cluster, job server and worker pool for each row count "
        "(each run starts from the same state); 'shared': one for all the runs",
    )
    parser.add_argument(
        "--flink-execution-mode",
        default=FLINK_EXECUTION_MODE,
        help="the Flink jobs' --execution_mode_for_batch ('' for the job server's default)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="jobs show full tracebacks (NOT private: on generated data only) and keep logs",
    )
    args = parser.parse_args(argv)
    # a SIGTERM ends the run through the finally below, which stops the cluster it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(float(size)) for size in args.rows.split(",")]
    runners = [name for name in args.runners.split(",") if name]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        parser.error(f"unknown runner {unknown[0]!r}; choose from {', '.join(RUNNERS)}")
    java = java_home()
    if ("flink" in runners or "spark" in runners) and (
        java is None or job_server_jar("flink") is None or job_server_jar("spark") is None
    ):
        parser.error("the Flink and Spark runs need `make engines` (Java 17 and the jars)")
    if "flink" in runners and flink_home() is None:
        parser.error("the Flink runs need `make engines` (the Flink distribution)")
    patterns = {rows: make_data(args.data_dir, rows) for rows in sizes}
    work = Path(tempfile.mkdtemp(prefix="beam_dp_engines_bench_"))
    started = datetime.datetime.now(datetime.UTC)
    results: list[Result] = []
    cluster: FlinkCluster | None = None
    server: JobServer | None = None
    pool: WorkerPool | None = None
    try:
        for runner in runners:
            roots: list[int] = []
            if runner == "direct":
                flags: list[str] = []
            elif runner == "dask":
                flags = ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"]
            elif runner == "spark":
                flags = ["--runner", "SparkRunner", "--spark_master_url", "local[2]"]
            else:
                flags = []  # per cluster, from _start_flink
            if java:
                os.environ["JAVA_HOME"] = java  # Beam starts $JAVA_HOME/bin/java (Spark)
            for rows in sizes:
                extra = ["--show_tracebacks_unsafe"] if args.debug else []
                shown = ""
                if runner == "flink":
                    if cluster is None or args.flink_cluster == "fresh":
                        _stop(pool, server, cluster)
                        assert java is not None
                        cluster, server, pool, roots, flags = _start_flink(args, java, work)
                    replaced = cluster.ensure_taskmanager()  # one may end between jobs
                    if replaced is not None:
                        print(f"  ({replaced})", flush=True)
                        roots[1:2] = [p.pid for p in cluster.taskmanagers if p.poll() is None]
                    parallelism = args.flink_parallelism
                    if parallelism == "auto":
                        parallelism = -(-rows // FILE_ROWS)  # one instance per file
                    extra += ["--parallelism", str(parallelism)]
                    shown = f" (--parallelism {parallelism})"
                command = job_command(patterns[rows], work / f"out_{runner}_{rows}", flags + extra)
                print(f"{runner} at {rows:,} rows{shown} ...", flush=True)
                result = run_job(runner, rows, command, roots, args.timeout)
                results.append(result)
                print(f"  {format_row(result)}", flush=True)
                print(f"  at the peak: {format_roles(result)}", flush=True)
            _stop(pool, server, cluster)
            cluster, server, pool = None, None, None
    finally:
        _stop(pool, server, cluster)
        if not args.debug:
            shutil.rmtree(work, ignore_errors=True)
    print()
    machine = platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                machine = line.split(":", 1)[1].strip()
                break
    print(
        f"{started:%Y-%m-%d %H:%M} UTC, commit {commit()}, {machine}, {os.cpu_count()} cores, "
        f"load average at the end {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| runner | rows | wall s | CPU s | rows/s per core | peak RSS MB (all processes) |")
    print("|---|---:|---:|---:|---:|---:|")
    for result in results:
        print(format_row(result))
    print()
    print("At each run's peak, by process (MB, and how many):")
    for result in results:
        print(f"- {result.runner} {result.rows:,}: {format_roles(result)}")


def format_row(result: Result) -> str:
    if result.failed:
        return f"| {result.runner} | {result.rows:,} | failed: {result.failed} | | | |"
    rate = result.rows / result.cpu if result.cpu else float("nan")
    return (
        f"| {result.runner} | {result.rows:,} | {result.wall:.1f} | {result.cpu:.1f} | "
        f"{rate / 1e3:,.0f}k | {result.peak_rss / 2**20:,.0f} |"
    )


def format_roles(result: Result) -> str:
    roles = sorted(result.peak_roles.items(), key=lambda item: -item[1][0])
    return ", ".join(f"{role} {size / 2**20:,.0f} ({count})" for role, (size, count) in roles)


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
