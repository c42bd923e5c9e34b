"""Fixtures of the engine tests: Beam's Flink and Spark runners for real (issue 25).

Every test here is marked ``engines`` (select them with ``-m engines``, leave them out with
``-m "not engines"``) and put in an xdist group per engine, so that one worker starts each
shared process once per session: a Flink job server on an embedded mini cluster
(``--flink_master [local]``, SDK harness in this process: LOOPBACK), a local Flink cluster
(JobManager + TaskManager from the Flink distribution, SDK workers in a worker pool: EXTERNAL)
with its own job server, and a Spark job server on ``local[2]``. What they need comes from
``make engines``; without it they fail when ``CI`` is set and skip otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

# Helper modules here (the processes, the jobs) by name; the worker pool imports them too.
sys.path.insert(0, str(Path(__file__).parent))

from engines_env import (
    JOB_TIMEOUT,
    FlinkCluster,
    JobServer,
    WorkerPool,
    flink_home,
    java_home,
    job_server_jar,
    unavailable,
)

# The xdist groups (one worker starts each shared process) are module marks in the test files
# (``pytestmark = pytest.mark.xdist_group(...)``): flink-embedded (embedded, streaming, stream
# job), flink-cluster (cluster, faults), spark, dataflow (each dry run builds an sdist in the
# source tree; two at once race on its egg-info). A mark added by this file's
# ``pytest_collection_modifyitems`` comes after pytest-xdist has read the marks to name the
# groups, and was silently ignored (tests/test_xdist_groups.py).


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if path.parent != here:
            continue
        item.add_marker(pytest.mark.engines)
        item.add_marker(pytest.mark.slow)
        # When a job server closes a finished job's data channel, the threads of Beam's
        # LOOPBACK SDK harness (in this process) may end on gRPC's CANCELLED ("Multiplexer
        # hanging up"): Beam's teardown, after the job succeeded (seen on Spark every time, on
        # Flink now and then). A failure during a job fails the job, and every test checks its
        # outputs, so such a thread's exception is not a test failure.
        item.add_marker(
            pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
        )


@pytest.fixture(scope="session")
def java() -> str:
    home = java_home()
    if home is None:
        unavailable("no Java 17 (JAVA_HOME, java on PATH or /usr/lib/jvm/java-17-openjdk-*)")
    assert home is not None
    return home


@pytest.fixture(scope="session")
def java_env(java: str) -> Iterator[str]:
    """JAVA_HOME for the session: Beam starts ``$JAVA_HOME/bin/java`` for its job servers."""
    saved = os.environ.get("JAVA_HOME")
    os.environ["JAVA_HOME"] = java
    try:
        yield java
    finally:
        if saved is None:
            os.environ.pop("JAVA_HOME", None)
        else:
            os.environ["JAVA_HOME"] = saved


def _jar(engine: str) -> None:
    if job_server_jar(engine) is None:
        unavailable(f"no Beam {engine} job server jar in Beam's jar cache")


@pytest.fixture(scope="session")
def flink_embedded(java_env: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a Flink job server that runs each job on an embedded mini cluster."""
    _jar("flink")
    server = JobServer("flink", "[local]", tmp_path_factory.mktemp("flink-embedded"), java_env)
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_job_server(java_env: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a Spark job server whose jobs run on ``local[2]``."""
    _jar("spark")
    server = JobServer("spark", "local[2]", tmp_path_factory.mktemp("spark"), java_env)
    try:
        yield server.endpoint
    finally:
        server.stop()


class ClusterSession:
    """A local Flink cluster, its job server and an SDK worker pool, for one session."""

    def __init__(self, cluster: FlinkCluster, server: JobServer, pool: WorkerPool) -> None:
        self.cluster = cluster
        self.server = server
        self.pool = pool

    def flags(self, *extra: str) -> list[str]:
        return [
            "--runner", "FlinkRunner", "--flink_version", "1.19",
            "--job_endpoint", self.server.endpoint,
            "--environment_type", "EXTERNAL", "--environment_config", self.pool.address,
            *extra,
        ]  # fmt: skip


@pytest.fixture(scope="session")
def flink_cluster_session(
    java_env: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterSession]:
    """A local Flink cluster (JobManager + TaskManager), its job server and a worker pool,
    started once per session and stopped (running jobs cancelled first) at its end."""
    _jar("flink")
    home = flink_home()
    if home is None:
        unavailable("no Flink distribution (make engines installs one)")
    assert home is not None
    workdir = tmp_path_factory.mktemp("flink-cluster")
    with contextlib.ExitStack() as stack:
        # LOG, not FlinkCluster's FAIL: after a job, Beam's gRPC event loops in the TaskManager
        # may still load a class once Flink has closed that job's class loader (apache/beam
        # issue 30000), and under FAIL the NoClassDefFoundError ends the TaskManager. It did
        # so between the release job's probe job and its pipeline (CI, stop 32): the pipeline
        # waited 15 minutes for a slot. What FAIL is for, a job hanging after a thread died
        # mid-job, the watchdog below turns into a failure here.
        cluster = FlinkCluster(
            home,
            workdir,
            java_env,
            taskmanager_memory="1600m",
            settings={"cluster.uncaught-exception-handling": "LOG"},
        )
        stack.callback(cluster.stop)
        stack.callback(cluster.cancel_running)
        server = JobServer("flink", cluster.master, workdir / "job-server", java_env)
        stack.callback(server.stop)
        pool = WorkerPool(workdir / "worker-pool")
        stack.callback(pool.stop)
        yield ClusterSession(cluster, server, pool)


@pytest.fixture
def flink_cluster(flink_cluster_session: ClusterSession) -> Iterator[ClusterSession]:
    """The session's cluster for one test, with a watchdog: a job still running after
    JOB_TIMEOUT is cancelled (a job whose SDK workers never start hangs RUNNING; cancelled, its
    pipeline fails and so does the test, instead of the suite hanging). A TaskManager that
    ended after the last test's job is replaced first (``FlinkCluster.ensure_taskmanager``), and
    said on stderr."""
    restarted = flink_cluster_session.cluster.ensure_taskmanager()
    if restarted is not None:
        print(f"flink_cluster: {restarted}", file=sys.stderr)
    watchdog = threading.Timer(JOB_TIMEOUT, flink_cluster_session.cluster.cancel_running)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield flink_cluster_session
    finally:
        watchdog.cancel()
