"""The processes the engine tests and the scale benchmark start: a Beam job server, an SDK
worker pool, and a local Flink cluster (one JobManager, one TaskManager); and where
``engines/install.sh`` (``make engines``) put what they need (:func:`java_home`,
:func:`job_server_jar`, :func:`flink_home`).

Every process binds the loopback interface where it has an option for it. Beam's job servers
(``--job-host`` names the address they report, not the one they bind) and Flink's blob and
data ports bind every interface; nothing here sends traffic anywhere but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BEAM_PYTHON_VERSION = "2.77.0"
JAR_CACHE = Path.home() / ".apache_beam" / "cache" / "jars"
JARS = {
    "flink": JAR_CACHE / f"beam-runners-flink-1.19-job-server-{BEAM_PYTHON_VERSION}.jar",
    "spark": JAR_CACHE / f"beam-runners-spark-3-job-server-{BEAM_PYTHON_VERSION}.jar",
}
FLINK_VERSION = "1.19"
ENGINES_CACHE = Path(
    os.environ.get("BEAM_DP_ENGINES_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "beam-dp" / "engines"
)
START_TIMEOUT = 300.0  # seconds for a JVM to come up on a loaded 2-core machine
JOB_TIMEOUT = 900.0  # seconds for one job on the local cluster before it is cancelled


def java_home() -> str | None:
    """The home of a Java 17 (Flink 1.19 and Spark 3.2 run on it), as install.sh finds it."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if shutil.which("java"):
        candidates.append(Path(str(shutil.which("java"))))
    candidates += sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*/bin/java"))
    for java in candidates:
        try:
            version = subprocess.run(
                [str(java), "-version"], capture_output=True, text=True, timeout=60
            ).stderr
        except (OSError, subprocess.SubprocessError):
            continue
        first = version.splitlines()[0] if version else ""
        if '"17.' in first:
            return str(java.resolve().parent.parent)
    return None


def job_server_jar(engine: str) -> Path | None:
    jar = JARS[engine]
    return jar if jar.is_file() and jar.stat().st_size > 0 else None


def flink_home() -> Path | None:
    home = ENGINES_CACHE / "flink-home"
    return home if (home / "bin" / "jobmanager.sh").is_file() else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


def stop_process(process: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGINT (a JVM's shutdown hooks run), then SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=60)


class JobServer:
    """A Beam job server (the jar ``make engines`` built) shared by a session's jobs.

    Jobs reach it with ``--job_endpoint``; the runner (``--runner FlinkRunner`` or
    ``SparkRunner``) is still the one under test, only its job server is not started per job.
    """

    def __init__(
        self,
        engine: str,
        master: str,
        workdir: Path,
        java: str,
        jvm_options: Sequence[str] = (),
    ) -> None:
        jar = job_server_jar(engine)
        assert jar is not None
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        master_flag = "--flink-master" if engine == "flink" else "--spark-master-url"
        command = [
            str(Path(java) / "bin" / "java"),
            *(SPARK_JVM_FLAGS if engine == "spark" else []),
            *jvm_options,
            "-jar", str(jar),
            master_flag, master,
            "--job-host", "127.0.0.1",
            "--job-port", str(self.port),
            "--artifact-port", "0",
            "--expansion-port", "-1",
            "--artifacts-dir", str(workdir / "artifacts"),
        ]  # fmt: skip
        self.log = workdir / "job-server.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            wait_for_port(self.port, self.process, START_TIMEOUT, f"the {engine} job server")
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def stop(self) -> None:
        stop_process(self.process)


# Beam's SparkRunner adds these when it starts its own job server (spark_runner.py).
SPARK_JVM_FLAGS = [
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
]


class WorkerPool:
    """Beam's SDK worker pool (``--environment_type EXTERNAL``) on 127.0.0.1: each worker a
    process of this Python, started with the venv's ``python`` first on PATH (the pool runs
    bare ``python``) and this checkout importable."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        self.log = workdir / "worker-pool.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.loopback_worker_pool", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=str(REPO),
                start_new_session=True,  # its workers are stopped with it (the group)
            )
        try:
            wait_for_port(self.port, self.process, START_TIMEOUT, "the SDK worker pool")
        except BaseException:
            self.stop()
            raise

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=60)
        with contextlib.suppress(OSError):  # workers the pool left (the pool's group)
            os.killpg(self.process.pid, signal.SIGKILL)


class FlinkCluster:
    """A standalone Flink session cluster from the Flink distribution: one JobManager and one
    TaskManager (2 slots), each a JVM started by the distribution's own scripts in the
    foreground (so this fixture holds their process ids), on free loopback ports."""

    def __init__(
        self,
        home: Path,
        workdir: Path,
        java: str,
        taskmanager_memory: str,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.home = home
        self.workdir = workdir
        self.java = java
        self.conf = workdir / "conf"
        self.logs = workdir / "log"
        shutil.rmtree(self.conf, ignore_errors=True)
        shutil.copytree(home / "conf", self.conf)
        self.logs.mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        self.rest_port = free_port()
        opens = _java_opens(home / "conf" / "config.yaml")
        config: dict[str, Any] = {
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": free_port(),
            "jobmanager.bind-host": "localhost",
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.bind-host": "localhost",
            "taskmanager.host": "localhost",
            "taskmanager.numberOfTaskSlots": 2,
            "taskmanager.memory.process.size": taskmanager_memory,
            "parallelism.default": 2,
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": self.rest_port,
            "io.tmp.dirs": str(workdir / "tmp"),
            # a lost TaskManager is noticed in seconds, and a job restarts (when it may)
            "heartbeat.interval": 2000,
            "heartbeat.timeout": 10000,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 3,
            "restart-strategy.fixed-delay.delay": "2 s",
            # an error escaping to a thread's handler ends the process (the default only logs
            # it, and a job whose gRPC thread died that way hangs: benchmarks/SCALE.md)
            "cluster.uncaught-exception-handling": "FAIL",
            "env.java.opts.all": opens,
            **(settings or {}),
        }
        (self.conf / "config.yaml").write_text(
            "".join(f"{key}: {json.dumps(value)}\n" for key, value in config.items())
        )
        self.env = dict(os.environ)
        self.env.update(
            JAVA_HOME=java,
            FLINK_CONF_DIR=str(self.conf),
            FLINK_LOG_DIR=str(self.logs),
            FLINK_HOME=str(home),
        )
        self.taskmanagers: list[subprocess.Popen[Any]] = []
        self.jobmanager = self._start("jobmanager")
        try:
            wait_for_port(self.rest_port, self.jobmanager, START_TIMEOUT, "the JobManager")
            self.start_taskmanager()
        except BaseException:
            self.stop()
            raise

    @property
    def master(self) -> str:
        return f"localhost:{self.rest_port}"

    def _start(self, role: str) -> subprocess.Popen[Any]:
        index = len(self.taskmanagers) if role == "taskmanager" else 0
        log = (self.logs / f"{role}-{index}.out").open("wb")
        with log:
            return subprocess.Popen(
                ["bash", str(self.home / "bin" / f"{role}.sh"), "start-foreground"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=str(self.workdir),
            )

    def rest(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(f"http://127.0.0.1:{self.rest_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def registered_taskmanagers(self) -> set[str]:
        """The ids of the TaskManagers the JobManager lists."""
        try:
            return {str(tm["id"]) for tm in self.rest("/taskmanagers")["taskmanagers"]}
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return set()

    def start_taskmanager(self) -> None:
        """Start a TaskManager and wait until the JobManager lists it (it registers slowly on
        a loaded machine: a minute is not unusual)."""
        before = self.registered_taskmanagers()
        self.taskmanagers.append(self._start("taskmanager"))
        deadline = time.monotonic() + START_TIMEOUT
        while not self.registered_taskmanagers() - before:
            if self.taskmanagers[-1].poll() is not None:
                raise RuntimeError("the TaskManager exited while starting")
            if time.monotonic() > deadline:
                raise RuntimeError("the TaskManager did not register with the JobManager")
            time.sleep(1)

    def ensure_taskmanager(self) -> str | None:
        """Start a TaskManager if none is running; returns why one was started, else None.

        A TaskManager can end between jobs without any fault of the job: Beam's job-server
        threads (its gRPC event loops) may load a class after Flink has closed the finished
        job's class loader, and the ``NoClassDefFoundError`` on such a thread ends the process
        under ``cluster.uncaught-exception-handling: FAIL`` (apache/beam issue 30000; seen once
        in a suite run, right after a job finished). The next job would then wait for a slot
        until Flink's slot request times out.
        """
        if any(process.poll() is None for process in self.taskmanagers):
            return None
        codes = [process.returncode for process in self.taskmanagers]
        self.start_taskmanager()
        return f"no TaskManager was running (exit codes {codes}); started a new one"

    def kill_taskmanager(self) -> None:
        """SIGKILL the running TaskManager (a lost machine: no shutdown hook runs)."""
        for process in self.taskmanagers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=60)

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.rest("/jobs/overview")["jobs"])

    def cancel_running(self) -> None:
        """Cancel every job not yet finished (a hung job must not hold the slots)."""
        try:
            jobs = self.jobs()
        except (OSError, urllib.error.URLError, ValueError):
            return  # no JobManager to ask: nothing runs
        for job in jobs:
            if job["state"] not in ("FINISHED", "FAILED", "CANCELED"):
                with contextlib.suppress(OSError, urllib.error.URLError):
                    self.rest(f"/jobs/{job['jid']}?mode=cancel", method="PATCH")

    def stop(self) -> None:
        for process in [*self.taskmanagers, self.jobmanager]:
            stop_process(process, grace=30.0)


def _java_opens(config: Path) -> str:
    """The JVM options of the distribution's own config (its Java 17 ``--add-opens``)."""
    lines = config.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "opts:" and i + 1 < len(lines) and "all:" in lines[i + 1]:
            return lines[i + 1].split("all:", 1)[1].strip()
    return ""
