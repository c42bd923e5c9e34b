"""Running a job's pipeline: exactly one sample per planned release reaches the outputs.

Runners retry bundles, recompute lost tasks (Dask does, when a worker dies) and run tasks
speculatively, so any step of a pipeline may run more than once, and a mechanism inside it may
draw more than one sample of a release. What this module guarantees is that **at most one
sample of each planned release ever leaves the pipeline, and the job publishes only if exactly
one of each did**. Three parts (the candidates weighed, this is the choice):

1. **Releases travel only as PCollection output, to one commit step.** Every release (and the
   name of every file skipped under ``on_bad_record="skip"``) is gathered into *one* element
   (``beam.combiners.ToList``), and the pipeline's last step writes that element as one file,
   ``releases.json``, under a fresh scratch directory: to a temporary name, then renamed over
   the final one. A runner that retries or recomputes that step, or anything before it,
   writes the whole gathered set again under the same final name, so the file holds the set
   of *one* attempt, never a mix of two; the file is committed when its rename is (the
   protocol of Beam's own file sinks, in one step because Beam's Dask runner computes only the
   ancestors of a pipeline's last transform and hands every tagged output to every consumer).
   No step before it writes anything: a sample drawn by an attempt whose output was lost
   exists only in that attempt's memory and is never seen.
2. **The driver checks what it gathered against the plan** (:func:`check_releases`): exactly
   one ``releases.json``, holding exactly the planned ``(name, key, window)`` releases, each
   once. Anything else (a missing, extra or repeated release, a second file) fails the job
   closed: nothing is written, and the run stays charged (its pipeline read data). The check
   looks at identities and counts only, never at released values, so whether a job fails does
   not depend on the samples.
3. **A scratch location every worker shares.** The commit step first checks that it sees a
   token file the driver wrote into the scratch directory; on a worker that cannot (another
   host, a local ``--temp_location``) it raises before it writes, so sampled records never
   stay on a worker's disk. On every runner but the in-process DirectRunner, a probe job
   (:func:`check_temp_location`) runs the same check before the ledger is charged and before
   any data is read. The scratch directory is deleted when the job ends, whatever happens.
   On a local file system it is made 0700 and its files 0600 whatever the umask (a run
   killed after its commit step leaves samples no other user can read), and its name records
   its owner (host, process id and start time): the next job to use the same location
   removes the scratch directories of owners that have ended, never a live job's.

Not chosen: retry-stable randomness (a release's bits derived from a per-run secret and the
release's identity, so that a recomputed task draws the same sample). Beam has no channel to
get a secret to workers outside the job graph (pipeline options and pickled DoFns are shown
by runners' UIs), randomness before the mechanism (which rows and keys bounding keeps) would
need the same treatment to make a recomputation draw from the same scores, and with (1) and
(2) a second draw is never seen: it would buy nothing for privacy.

The job's stages are named here (:data:`JOB_STAGES`); their labels are the only text of a
running pipeline a failure may name (:mod:`pipelines.cli`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.pvalue import PCollection

from beam_dp import BeamDPError, LedgerEntry, PrivacyBudget, Release, telemetry
from beam_dp.jobs import ledger_entries_to_record, write_outputs
from pipelines._state import LOG, STATE

__all__ = [
    "ALL_RELEASES",
    "COLLECT",
    "COMMIT",
    "JOB_STAGES",
    "READ_EXPORT",
    "RECORDS",
    "SKIPPED_FILES",
    "PlannedRelease",
    "ReleaseCheckError",
    "TempLocationError",
    "WorkerLostError",
    "check_releases",
    "check_temp_location",
    "run_pipeline",
    "run_releases",
    "wait_for",
    "write_document",
]

READ_EXPORT, ALL_RELEASES, COLLECT, COMMIT = "ReadExport", "AllReleases", "Collect", "Commit"
RECORDS, SKIPPED_FILES = "Records", "SkippedFiles"
# a statistic may not take these names
JOB_STAGES = (READ_EXPORT, RECORDS, SKIPPED_FILES, ALL_RELEASES, COLLECT, COMMIT)

_RELEASES_FILE = "releases.json"
_TOKEN_FILE = "driver.token"
_DIRECT_NAMES = frozenset({"direct", "directrunner", "switchingdirectrunner"})


class TempLocationError(BeamDPError, RuntimeError):
    """A worker cannot see the job's scratch location (one line, public: a path)."""


class WorkerLostError(BeamDPError, RuntimeError):
    """A worker process of the pipeline ended while it ran (one line, public: no value)."""


class ReleaseCheckError(BeamDPError, RuntimeError):
    """The gathered releases are not exactly the planned ones (identities and counts only)."""


@dataclass(frozen=True)
class PlannedRelease:
    """One release a job plans: its name, its public key (``.PerKey``) and its window, and
    whether it may be absent (a post-processing of another release decides)."""

    name: str
    key: Any = None
    window: str | None = None
    optional: bool = False

    def identity(self) -> str:
        return json.dumps([self.name, self.key, self.window], sort_keys=True, default=str)


def _identity(record: dict[str, Any]) -> str:
    return PlannedRelease(
        record.get("name", ""), record.get("key"), record.get("window")
    ).identity()


def _runner_name(options: PipelineOptions) -> str | None:
    name = options.view_as(StandardOptions).runner
    return None if name is None else str(name)


def in_process(options: PipelineOptions) -> bool:
    """Whether the pipeline runs on this host in this job's own processes (the DirectRunner)."""
    name = _runner_name(options)
    return name is None or name.lower() in _DIRECT_NAMES


def _workers_on_this_host(options: PipelineOptions) -> bool:
    """The DirectRunner, or the Dask runner's own local cluster (no ``--dask_client_address``):
    every worker is a process of this host, started by this job, and sees its files."""
    name = (_runner_name(options) or "").lower()
    if in_process(options):
        return True
    # DaskOptions keeps --dask_client_address under the name "address".
    return name.endswith("daskrunner") and not options.get_all_options().get("address")


def _runner(options: PipelineOptions) -> Any:
    """The runner to build the pipeline with: Beam's FnApiRunner for the DirectRunner.

    Beam's DirectRunner first tries to run a batch pipeline on Prism, which downloads a
    binary on every run (and fails offline after a delay); jobs read bounded exports, so the
    DirectRunner would end on the FnApiRunner anyway. Building it directly runs the same
    pipeline without that detour, honouring ``--direct_num_workers`` and
    ``--direct_running_mode``. Any other ``--runner`` is left to Beam.
    """
    if not in_process(options):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return fn_runner.FnApiRunner(provision_info=provision)


def _log_metrics(result: Any) -> None:
    """Exact counts, only when the operator asked for them (they are not private)."""
    if not telemetry.exact_counts_enabled():
        return
    try:
        counters = result.metrics().query()["counters"]
    except Exception:  # some runners do not report metrics
        return
    LOG.info("exact counts (NOT private; --log_exact_counts):")
    for counter in counters:
        if counter.key.metric.namespace == "beam_dp":
            value = counter.committed if counter.committed is not None else counter.attempted
            LOG.info("%s: %s: %s", counter.key.step, counter.key.metric.name, value)


class _Stages(PipelineVisitor):
    """The full labels of a pipeline's transforms (public: they come from the job)."""

    def __init__(self) -> None:
        self.labels: dict[str, None] = {}  # in the order the pipeline visits them

    def enter_composite_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def visit_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def top_level(self) -> list[str]:
        """The job's own stages (reading, each statistic, collecting), in pipeline order."""
        return [label for label in self.labels if label and "/" not in label]


def _require_token(scratch: str, token: str) -> None:
    """Raise unless this process sees the driver's token in ``scratch`` (before any write)."""
    path = FileSystems.join(scratch, _TOKEN_FILE)
    try:
        with FileSystems.open(path) as handle:
            seen = handle.read().decode("utf-8")
    except Exception:
        seen = None
    if seen != token:
        raise TempLocationError(
            f"a worker cannot see the job's temporary location {scratch}: give "
            "--temp_location a location that every worker and this process share (a bucket, "
            "or a shared file system); nothing was written on the worker"
        )


class _CommitReleases(beam.DoFn):
    """The one step that writes: every release of the run as one file, committed by rename.

    Its input is one element, the list of every ``("release", record)`` and
    ``("skipped", file name)`` of the run. A retried or recomputed attempt writes the whole
    list again under the same final name (module docstring, part 1).
    """

    def __init__(self, scratch: str, token: str):
        super().__init__()
        self._scratch = scratch
        self._token = token

    def process(self, gathered: list[tuple[str, Any]]) -> Iterable[str]:
        _require_token(self._scratch, self._token)
        final = FileSystems.join(self._scratch, _RELEASES_FILE)
        partial = FileSystems.join(self._scratch, f".{uuid.uuid4().hex}.partial")
        text = json.dumps(sorted(gathered, key=json.dumps), sort_keys=True)
        if _is_local(self._scratch):  # 0600; the rename replaces an earlier attempt's file
            _write_private(partial, text.encode("utf-8"))
            os.replace(partial, final)
            yield final
            return
        with FileSystems.create(partial) as handle:
            handle.write(text.encode("utf-8"))
        if FileSystems.exists(final):  # an earlier attempt committed: this one replaces it
            FileSystems.delete([final])
        FileSystems.rename([partial], [final])
        yield final


def _tag(kind: str) -> Callable[[Any], tuple[str, Any]]:
    def tag(element: Any) -> tuple[str, Any]:
        if kind == "release":
            return (kind, element.to_dict())
        return (kind, str(element))

    return tag


def _scratch_root(options: PipelineOptions) -> str:
    return options.get_all_options().get("temp_location") or tempfile.gettempdir()


def _is_local(path: str) -> bool:
    return "://" not in path


def _write_private(path: str, data: bytes) -> None:
    """Create ``path`` readable and writable by this user only (0600 whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _start_time(pid: int) -> str:
    """A process's start time (``/proc/<pid>/stat`` field 22), ``"0"`` without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return "0"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"


def _owner() -> str:
    """This process as a scratch directory's name records it: ``<host>-<pid>-<start time>``
    (the host's dots and underscores made dashes)."""
    return f"{_host().replace('.', '-')}-{os.getpid()}-{_start_time(os.getpid())}"


_SCRATCH_NAME = re.compile(r"^beam_dp_(?:releases|probe)_(.+)-(\d+)-(\d+)_[0-9a-f]{32}$")


def _owner_gone(name: str) -> bool:
    """Whether the scratch directory ``name`` belongs to a process of this host that ended
    (never True when unsure: another host's, a name that does not parse, no ``/proc``)."""
    found = _SCRATCH_NAME.match(name)
    if found is None or found.group(1) != _host().replace(".", "-"):
        return False
    pid, started = int(found.group(2)), found.group(3)
    if started == "0" or not os.path.isdir("/proc"):
        return False
    return _start_time(pid) != started  # "0" once it is gone, another if the pid was reused


def _remove_dead_scratch(root: str) -> None:
    """Remove the scratch directories that ended jobs left in a local ``root``: a run killed
    after its commit step left its sampled releases there (readable by this user only)."""
    if not _is_local(root):
        return
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if _owner_gone(name):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _new_scratch(options: PipelineOptions, prefix: str) -> tuple[str, str]:
    """A fresh scratch directory with the driver's token in it: (directory, token).

    Locally it is 0700 and the token 0600 (module docstring, part 3); the scratch directories
    of ended jobs in the same location are removed first.
    """
    root = _scratch_root(options)
    scratch = FileSystems.join(root, f"{prefix}_{_owner()}_{uuid.uuid4().hex}")
    token = secrets.token_hex(16)
    try:
        if _is_local(root):
            _remove_dead_scratch(root)
            os.makedirs(root, exist_ok=True)
            os.mkdir(scratch, 0o700)
            os.chmod(scratch, 0o700)
            _write_private(os.path.join(scratch, _TOKEN_FILE), token.encode("utf-8"))
        else:
            FileSystems.mkdirs(scratch)
            with FileSystems.create(FileSystems.join(scratch, _TOKEN_FILE)) as handle:
                handle.write(token.encode("utf-8"))
    except Exception:
        raise TempLocationError(
            f"cannot write the job's temporary location {root} (check "
            "--temp_location, its file system and access to it)"
        ) from None
    return scratch, token


def _remove(scratch: str) -> None:
    try:
        if _is_local(scratch):
            shutil.rmtree(scratch)
        else:
            FileSystems.delete([scratch])
    except FileNotFoundError:
        pass
    except Exception:  # never hide the job's own error; name the (public) directory
        LOG.warning("could not remove the temporary directory %s", scratch)


class _Probe(beam.DoFn):
    def __init__(self, scratch: str, token: str):
        super().__init__()
        self._scratch = scratch
        self._token = token

    def process(self, element: int) -> Iterable[int]:
        _require_token(self._scratch, self._token)
        yield element


def check_temp_location(options: PipelineOptions) -> None:
    """Check, before the ledger is charged and before any data is read, that this process can
    write the scratch location the job will use, and, unless every worker is a process this
    job starts on this host (the DirectRunner, the Dask runner's own local cluster), with a
    probe job that reads no data, that the workers see it too.

    Raises:
        TempLocationError: the location cannot be written, or the workers cannot see it (or
            the probe could not run there).
    """
    scratch, token = _new_scratch(options, "beam_dp_probe")
    if _workers_on_this_host(options):
        _remove(scratch)
        return
    try:
        LOG.info(
            "checking that the workers share the temporary location %s", _scratch_root(options)
        )
        pipeline = beam.Pipeline(runner=_runner(options), options=options)
        _ = (
            pipeline
            | "ProbeTempLocation" >> beam.Create(list(range(8)))
            | "Spread" >> beam.Reshuffle()
            | "SeeToken" >> beam.ParDo(_Probe(scratch, token))
        )
        try:
            run_pipeline(pipeline)
        except Exception:
            raise TempLocationError(
                f"the workers cannot see the temporary location {_scratch_root(options)}: give "
                "--temp_location a location that every worker and this process share (a "
                "bucket, or a shared file system); no data was read"
            ) from None
    finally:
        _remove(scratch)


_WORKER_LOST = (
    "a worker process of the pipeline ended while it ran (killed, or out of memory): the job "
    "stopped its other workers and published nothing"
)
#: How long a lost worker's siblings get to end once killed (they are SIGKILLed).
_WORKER_STOP_SECONDS = 10.0


class _WorkerWatch:
    """What the job's SDK worker processes did during one run (one job runs at a time)."""

    def __init__(self) -> None:
        self.lost = threading.Event()


_WATCH = _WorkerWatch()


def _descendants() -> list[int]:
    """The processes this process started, directly or not (from ``/proc``; [] without)."""
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with (
                    contextlib.suppress(OSError, IndexError, ValueError),
                    open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat,
                ):
                    parents[int(name)] = int(stat.read().rsplit(")", 1)[-1].split()[1])
    found, frontier = [], [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def _kill_sdk_workers() -> None:
    """SIGKILL every SDK worker process this job started (``sdk_worker_main`` and its shell)."""
    for pid in _descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
        except OSError:
            continue
        if b"sdk_worker_main" in command:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _watched_worker_handler() -> type:
    """Beam's handler of a subprocess SDK worker (``--direct_running_mode multi_processing``),
    watched: Beam's own raises in a thread of its own when the worker's process ends with an
    error (a raw traceback on stderr) and tells no one, so the runner waits for the dead
    worker forever (measured: no exit after 420 s). This one, when a worker's process ends
    with an error before the runner stopped it, marks the run's workers lost, fails every
    request the runner is waiting for from that worker (its control and data channels), and,
    when the runner then closes its workers, kills the others instead of waiting for them."""
    from apache_beam.runners.portability import local_job_service
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    class WatchedSubprocessWorker(worker_handlers.SubprocessSdkWorkerHandler):
        def start_worker(self) -> None:
            self._stopping = False
            self.worker = local_job_service.SubprocessSdkWorker(
                self._worker_command_line, self.control_address, self.provision_info,
                self.worker_id,
            )  # fmt: skip
            self.worker_thread = threading.Thread(
                name="beam_dp_sdk_worker", target=self._run_worker, daemon=True
            )
            self.worker_thread.start()

        def _run_worker(self) -> None:
            try:
                self.worker.run()  # returns when the worker's process ends with status 0
            except Exception:  # it ended with an error status (its text: a status, no value)
                if self._stopping:
                    return
                _WATCH.lost.set()
                lost = WorkerLostError(_WORKER_LOST)
                self.control_conn.abort(lost)
                # the runner also waits on the worker's data; its channel fails the wait
                self.data_conn._exception = lost

        def stop_worker(self) -> None:
            self._stopping = True
            if _WATCH.lost.is_set():
                _kill_sdk_workers()
            self.worker_thread.join(_WORKER_STOP_SECONDS if _WATCH.lost.is_set() else None)

    return WatchedSubprocessWorker


@contextlib.contextmanager
def _watching_workers() -> Iterator[_WorkerWatch]:
    """While a pipeline runs: subprocess SDK workers are watched (:func:`_watched_worker_handler`)
    and, once one is lost, the runner's threads that fail because of it print nothing."""
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    registry = worker_handlers.WorkerHandler._registered_environments
    urn = python_urns.SUBPROCESS_SDK
    saved, saved_hook = registry.get(urn), threading.excepthook
    _WATCH.lost.clear()

    def quiet_once_lost(args: Any) -> None:
        if not _WATCH.lost.is_set():
            saved_hook(args)

    registry[urn] = (_watched_worker_handler(), bytes)
    threading.excepthook = quiet_once_lost
    try:
        yield _WATCH
    finally:
        if saved is None:
            registry.pop(urn, None)
        else:
            registry[urn] = saved
        threading.excepthook = saved_hook
        if _WATCH.lost.is_set():
            _kill_sdk_workers()


def run_pipeline(pipeline: beam.Pipeline) -> Any:
    """Run a pipeline and wait until it ends (:func:`wait_for`); return its result.

    A multi-process DirectRunner's worker that dies (killed, out of memory) ends the run
    within seconds with :class:`WorkerLostError` instead of a wait without end, and leaves
    no worker process behind.

    Raises:
        WorkerLostError: a worker process ended while the pipeline ran (one line).
    """
    with _watching_workers() as watch:
        try:
            return wait_for(pipeline.run())
        except Exception:
            if watch.lost.is_set():
                raise WorkerLostError(_WORKER_LOST) from None
            raise


def wait_for(result: Any) -> Any:
    """Wait until a pipeline's run ends; return its result.

    Whatever the outcome, the Dask runner's ``distributed.Client`` (``result.client``) is
    closed: the run is over, and an open client would hold its sockets until collected.
    """
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner's distributed.Client
        if client is not None:
            client.close()
    return result


def check_releases(
    files: Sequence[str], gathered: Sequence[Any], planned: Sequence[PlannedRelease] | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The gathered records and skipped files, if they are exactly the planned releases.

    ``files`` are the committed release files found (exactly one is expected); ``gathered``
    its content. ``planned=None`` accepts any set of releases, each identity once (a library
    caller whose plan is unknown).

    Raises:
        ReleaseCheckError: naming only identities and counts, never a released value.
    """
    if len(files) != 1:
        raise ReleaseCheckError(
            "the pipeline committed its releases "
            + ("nowhere (no worker could write them)" if not files else f"{len(files)} times")
            + "; a run must commit exactly once"
        )
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    for kind, item in gathered:
        if kind == "release" and isinstance(item, dict):
            records.append(item)
        elif kind == "skipped":
            skipped.append(str(item))
        else:
            raise ReleaseCheckError("the committed releases hold an element of an unknown kind")
    seen: dict[str, int] = {}
    for record in records:
        seen[_identity(record)] = seen.get(_identity(record), 0) + 1
    repeated = sorted(identity for identity, count in seen.items() if count > 1)
    if repeated:
        raise ReleaseCheckError(
            f"release {repeated[0]} was committed {seen[repeated[0]]} times (a task ran more "
            "than once and its samples reached the commit); nothing is published"
        )
    if planned is not None:
        required = {release.identity() for release in planned if not release.optional}
        allowed = {release.identity() for release in planned}
        missing = sorted(required - seen.keys())
        extra = sorted(seen.keys() - allowed)
        if missing or extra:
            # An unplanned release is named by its name alone: its key could be a sample.
            what = (
                f"release {missing[0]} is missing"
                if missing
                else f"a release named {json.loads(extra[0])[0]!r} was not planned"
            )
            raise ReleaseCheckError(
                f"the committed releases are not the planned ones: {what} "
                f"({len(missing)} missing, {len(extra)} unplanned); nothing is published"
            )
    return records, sorted(set(skipped))


def run_releases(
    build: Callable[[beam.Pipeline], tuple[Sequence[PCollection], PCollection | None]],
    *,
    budget: PrivacyBudget,
    options: PipelineOptions,
    planned: Sequence[PlannedRelease] | None,
    before_run: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Build the pipeline with ``build``, run it, check and record the releases.

    ``before_run`` is called once everything is built, right before the pipeline runs (the
    ledger's :meth:`~beam_dp.ledger.Reservation.start`): nothing has read data before it.

    ``build`` returns the PCollections of :class:`beam_dp.release.Release` and, optionally,
    a PCollection of the names of files skipped under ``on_bad_record="skip"``. Returns the
    ``release.json`` document (written by :func:`write_document`, after the ledger commits).
    Each transform is charged to ``budget`` once, whatever the number of keys it released
    (their epsilon is accounted by the transform: parallel composition or a split, as its
    ledger says).

    Raises:
        ReleaseCheckError, TempLocationError: the run could not deliver exactly its planned
            releases (module docstring): fail closed.
    """
    STATE.phase = "prepare"
    STATE.writing_outputs = False
    scratch, token = _new_scratch(options, "beam_dp_releases")
    try:
        pipeline = beam.Pipeline(runner=_runner(options), options=options)
        outputs, skipped_files = build(pipeline)
        tagged = [
            release | f"Tag{i}" >> beam.Map(_tag("release")) for i, release in enumerate(outputs)
        ]
        if skipped_files is not None:
            tagged.append(skipped_files | "TagSkipped" >> beam.Map(_tag("skipped")))
        _ = (
            tuple(tagged)
            | ALL_RELEASES >> beam.Flatten()
            | COLLECT >> beam.transforms.combiners.ToList()
            | COMMIT >> beam.ParDo(_CommitReleases(scratch, token))
        )
        stages = _Stages()
        pipeline.visit(stages)
        STATE.stages = frozenset(stages.labels)
        top = [label for label in stages.top_level() if not label.startswith("Tag")]
        shown = ", ".join(top)
        if before_run is not None:
            before_run()
        STATE.phase = "run"
        started = time.monotonic()
        LOG.info("running %d stage(s): %s", len(top), shown)
        result = run_pipeline(pipeline)
        LOG.info(
            "the pipeline finished in %.1f s; %d stage(s) done: %s",
            time.monotonic() - started,
            len(top),
            shown,
        )
        STATE.phase = "write"
        _log_metrics(result)
        found = [
            match.path
            for match in FileSystems.match([FileSystems.join(scratch, "releases*.json")])[
                0
            ].metadata_list
        ]
        gathered: list[Any] = []
        if len(found) == 1:
            with FileSystems.open(found[0]) as handle:
                gathered = json.loads(handle.read().decode("utf-8"))
        records, skipped = check_releases(found, gathered, planned)
    finally:
        _remove(scratch)
    order = {share.name: i for i, share in enumerate(budget.shares)}
    records.sort(
        key=lambda r: (
            order.get(r["name"], len(order)),
            json.dumps(r.get("key")),
            r.get("window") or "",
        )
    )
    # Charge the budget once per transform: a .PerKey transform's releases cost as many of
    # their entries as keys a unit can reach, as the library's ledger says.
    releases = [
        Release(
            value=r["value"],
            ledger=LedgerEntry.from_dict(r),
            key=r.get("key"),
            window=r.get("window"),
        )
        for r in records
    ]
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)
    document: dict[str, Any] = {
        "run": {
            "id": uuid.uuid4().hex,
            "released_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
        "releases": records,
        "budget": budget.to_json(),
    }
    if skipped:
        document["skipped_files"] = skipped
    return document


def write_document(document: dict[str, Any], output: str) -> None:
    """Write ``release.json``, ``release.avro`` and ``report.html`` (after the ledger commit)."""
    STATE.writing_outputs = True
    write_outputs(document, output)
