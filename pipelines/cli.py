"""What a job's user sees when it ends: one line for a failure, never a record's value.

:func:`cli` runs a job. A failure prints one line: the message of a
:class:`beam_dp.errors.BeamDPError` (built from file, field and rule), or of a
ValueError/TypeError raised while the job was parsed and built (parameter validation);
anything raised while the pipeline runs prints only the stage that failed, unless
``--show_tracebacks_unsafe`` (NOT private) is given. What a job logs otherwise is public
(:mod:`beam_dp.telemetry`): the statistics, the input pattern and its number of files,
elapsed time; ``--log_exact_counts`` (an operator's choice, NOT private) adds exact
data-dependent counts. Nothing else reaches the terminal of a job run as a program, whatever
the runner: the rest of its stderr, and its child processes', goes to a file of the run's
temporary directory (:mod:`pipelines._terminal`).

Each run's temporary directory (``beam_dp_job_*``) records its owner; a job's start removes
those of runs killed before their end, and stops the job servers they left running
(:func:`remove_stale_runs`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from beam_dp import BeamDPError, telemetry
from pipelines import _terminal
from pipelines._state import SKIP_HINT_CONFIG, SKIP_HINT_FLAG, STATE

__all__ = [
    "RUN_TEMP_PREFIX",
    "SKIP_HINT_CONFIG",
    "SKIP_HINT_FLAG",
    "cli",
    "configure_logging",
    "failure_message",
    "remove_stale_runs",
]

_LIBRARY_SKIP_HINT = re.compile(r"on_bad_record='skip'")

_UNSAFE_HINT = (
    "details are withheld because they may contain data; rerun with --show_tracebacks_unsafe "
    "to see them (not private)"
)


def configure_logging(*, exact_counts: bool, show_tracebacks: bool) -> None:
    """Under :func:`cli`: library logs at INFO only with exact counts; Beam's only if unsafe.

    A job run as a program (``python -m pipelines.<job>``) also diverts descriptor 2 to a
    file of its run's temporary directory here, once its flags are parsed, unless
    ``show_tracebacks`` (:func:`pipelines._terminal.divert_stderr`).
    """
    logging.getLogger("beam_dp").setLevel(logging.INFO if exact_counts else logging.WARNING)
    # Beam logs a failing step's exception (which may quote a record) at ERROR.
    logging.getLogger("apache_beam").setLevel(
        logging.NOTSET if show_tracebacks else logging.CRITICAL
    )
    # Enabled for _HarnessFailures, which drops its records unless show_tracebacks.
    harness_level = logging.NOTSET if show_tracebacks else logging.ERROR
    logging.getLogger(_HARNESS_LOGGER).setLevel(harness_level)
    if _divert_into and not show_tracebacks:
        _terminal.divert_stderr(_divert_into[0])


# Set by cli() while a job that is the program runs: the file descriptor 2 is diverted to.
_divert_into: list[str] = []

# Beam's SDK harness logs a failed bundle on this logger, while it handles the exception.
_HARNESS_LOGGER = "apache_beam.runners.worker.sdk_worker"


class _HarnessFailures(logging.Filter):
    """Keeps the first of our own errors that failed a bundle in this process's SDK harness.

    A portable runner (Flink, Spark) reports a failed bundle to the job as text, relayed from
    the harness; with a harness in the job's process (LOOPBACK), the exception object itself is
    at hand when the harness logs the failure: the first :class:`beam_dp.BeamDPError` of its
    chain (an object of our class, not text that a value could imitate) gives the job's
    ``error:`` line what it gives on the DirectRunner. The record itself is dropped, unless
    ``--show_tracebacks_unsafe``: its text is the bundle's traceback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.first: BeamDPError | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.first is None:
            self.first = _own_error_in(sys.exc_info()[1])
        return STATE.show_tracebacks


def _own_error_in(error: BaseException | None) -> BeamDPError | None:
    """The first :class:`BeamDPError` of ``error``'s chain (causes and contexts)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, BeamDPError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class _RootRecordsWithheld(logging.Filter):
    """Drops the records logged on the root logger itself while a job runs, unless
    ``--show_tracebacks_unsafe``: Beam's portable runner relays the job's messages there (a
    failed bundle's traceback, which may quote a record). Our code logs on ``beam_dp``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return STATE.show_tracebacks


_STAGE = re.compile(r"\[while running '([^']*)'\]")
# Where our own code lives: beam_dp's package (where its errors module is) and the pipelines'.
_OWN_CODE = tuple(
    os.path.dirname(os.path.abspath(module)) + os.sep
    for module in (inspect.getfile(BeamDPError), __file__)
)


def _raised_by_own_code(error: BaseException) -> bool:
    """Whether ``error`` was raised in beam_dp or the pipelines (its innermost Python frame):
    a library's ValueError (pyarrow, fastavro, Beam), whose text may quote a value it read, is
    not, even when our code called it."""
    trace = error.__traceback__
    if trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    return os.path.abspath(trace.tb_frame.f_code.co_filename).startswith(_OWN_CODE)


# Our BadRecordError as a worker in another process hands it back, as text:
# "BadRecordError: <file>: [<position>: ]field '<field>'<the rule>".
_BAD_RECORD_TEXT = re.compile(r"BadRecordError: ([^\n]+?): (?:[^\n:]+: )?field '([^'\n]+)'")


def _bad_record_in_text(text: str) -> str | None:
    """The one line for a bad record that failed a worker in another process (the
    multi-process DirectRunner, an external worker pool), which hands the job only text.

    Text is never passed through: a record's value could imitate our message. Only a file the
    job matched and a column the job names are taken from it, each checked against the job's
    own public lists; the position and the rule are not (a value could forge them).
    """
    for found in _BAD_RECORD_TEXT.finditer(text):
        source, field = found.group(1), found.group(2)
        names = {path.rsplit("/", 1)[-1] for path in STATE.sources}
        if (source in STATE.sources or source in names) and field in STATE.columns:
            return (
                f"{source}: field '{field}' (a bad record: its value breaks the column's rule; "
                f"{STATE.skip_hint} drops such records)"
            )
    return None


def failure_message(error: Exception) -> str:
    """The one line :func:`cli` prints: never a library's text from a running pipeline."""
    if isinstance(error, BeamDPError):
        # The library's hint names its parameter; a user of a job sets a flag or a config key.
        text = str(error).split(" [while running")[0]
        return _LIBRARY_SKIP_HINT.sub(lambda _: STATE.skip_hint, text)
    if (
        STATE.phase == "prepare"
        and isinstance(error, (ValueError, TypeError))
        and _raised_by_own_code(error)
    ):
        return str(error)  # our parameter validation: its messages name public parameters
    if STATE.phase != "run" and isinstance(error, OSError) and error.strerror:
        # A path the job chose (config, candidates, output, temp location) and the OS's words.
        target = f" {error.filename!r}" if error.filename else ""
        return f"cannot access{target}: {error.strerror}"
    kind = type(error).__name__
    if STATE.phase == "prepare":
        return f"the job failed while it was being prepared ({kind}); {_UNSAFE_HINT}"
    if STATE.phase == "write":
        return f"the job failed while writing its outputs ({kind}); {_UNSAFE_HINT}"
    # Only a label of this job's own pipeline is named (they are public), never other text.
    text = str(error)
    bad_record = _bad_record_in_text(text)
    if bad_record is not None:
        return bad_record
    stages = [label for label in _STAGE.findall(text) if label in STATE.stages]
    where = f"in stage {stages[0]!r}" if stages else "while the pipeline ran"
    return f"the pipeline failed {where} ({kind}); {_UNSAFE_HINT}"


def cli(run: Callable[[], Any], *, skip_hint: str = SKIP_HINT_FLAG) -> None:
    """Run a job from the command line: a failure ends it with one line and a non-zero status.

    The line is the message of a :class:`beam_dp.errors.BeamDPError` (it names file, field and
    rule, never a value), or of a ValueError/TypeError raised while the job is parsed and
    built (parameter validation). Any other failure, and anything raised while the pipeline
    runs, prints only where it happened (the stage, when known): library messages can quote
    records. Beam's own error logs are silenced for the same reason, and so are the records
    logged on the root logger (Beam's portable runner relays the job's messages there) and
    Beam's SDK harness's report of a failed bundle; a job run as a program
    (``python -m pipelines.<job>``) also sends everything else written to its stderr, and to
    the stderr of the processes it starts, to a file of its run's temporary directory, once
    its flags are parsed (:func:`pipelines._terminal.divert_stderr`): only our own lines reach
    the terminal. Where the job's SDK harness runs in this process (Beam's LOOPBACK
    environment: FlinkRunner, SparkRunner), our own error that failed a bundle gives the line,
    as on the DirectRunner; a worker in another process hands only text, and the line then names
    the stage. ``--show_tracebacks_unsafe`` shows everything (not private). The output
    directory is left untouched (outputs are written only when the job succeeds).

    A data error's hint to skip bad records names the library's parameter; it is shown as
    ``skip_hint`` instead (the job's flag by default; the release job names its config key).
    Known third-party noise (Beam's ``apitools`` warning, Dask's start-up logs and partition
    warnings) is filtered while the job runs (:mod:`pipelines._terminal`).

    Temporary files go to a directory of this run (``tempfile``'s directory and ``TMPDIR``
    for the processes it starts), removed when the job ends, whether it succeeded or not:
    Beam leaves its staging directories (``beam-temp*``, ``tmp*``) behind otherwise. A job
    server that Beam started for the run (FlinkRunner, SparkRunner without ``--job_endpoint``)
    keeps its files in that directory until Beam's exit handler stops it: the directory is then
    removed at exit, after that handler (:func:`_remove_run_temp`).
    """
    STATE.reset(in_cli=True)
    STATE.skip_hint = skip_hint
    exact_counts = telemetry.exact_counts_enabled()
    environment = {name: os.environ.get(name) for name in (*_terminal.ENVIRONMENT, "TMPDIR")}
    _terminal.quiet_third_party()
    saved_tempdir = tempfile.tempdir
    remove_stale_runs(tempfile.gettempdir())
    run_temp = tempfile.mkdtemp(prefix=RUN_TEMP_PREFIX)
    _record_owner(run_temp)
    tempfile.tempdir = os.environ["TMPDIR"] = run_temp
    # Registered before the run, so at exit it runs after every handler Beam registers during
    # the run (atexit runs them last in, first out): see _remove_run_temp.
    remove_at_exit = functools.partial(shutil.rmtree, run_temp, ignore_errors=True)
    atexit.register(remove_at_exit)
    saved = {
        name: logging.getLogger(name).level
        for name in ("beam_dp", "beam_dp.pipelines", "apache_beam", _HARNESS_LOGGER)
    }
    harness_failures = _HarnessFailures()
    root_withheld = _RootRecordsWithheld()
    logging.getLogger(_HARNESS_LOGGER).addFilter(harness_failures)
    logging.getLogger().addFilter(root_withheld)
    logging.getLogger("beam_dp.pipelines").setLevel(logging.INFO)
    configure_logging(exact_counts=False, show_tracebacks=False)
    if _job_is_the_program():  # diverted once the flags are parsed (a usage error is not)
        _divert_into[:] = [os.path.join(run_temp, "stderr.log")]
    try:
        run()
    except Exception as error:
        if STATE.show_tracebacks:
            raise
        own = harness_failures.first
        line = f"error: {failure_message(error if own is None else own)}"
        if _terminal.stderr_diverted():
            _terminal.say(line)  # the interpreter's copy of it goes to the diverted file
        raise SystemExit(line) from None
    except KeyboardInterrupt:
        if _terminal.stderr_diverted():  # its traceback goes to the diverted file
            _terminal.say("error: interrupted")
        raise
    finally:
        _divert_into.clear()
        logging.getLogger(_HARNESS_LOGGER).removeFilter(harness_failures)
        logging.getLogger().removeFilter(root_withheld)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if not exact_counts:
            telemetry.disable_exact_counts()
        for name, was in environment.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was
        if tempfile.tempdir == run_temp:  # not if a job started after this one replaced it
            still_there = saved_tempdir is None or os.path.isdir(saved_tempdir)
            tempfile.tempdir = saved_tempdir if still_there else None
        _remove_run_temp(run_temp, remove_at_exit)
        STATE.reset()


def _job_servers_in(run_temp: str) -> bool:
    """Whether a job server Beam started during the run still keeps its files in ``run_temp``.

    Beam's FlinkRunner and SparkRunner start their job server (a JVM) with its files in a
    ``beam-temp*`` directory of the temporary directory, and stop it from an exit handler that
    first deletes that directory: were it gone, the handler would fail before it stops the JVM,
    which would outlive the job.
    """
    try:
        names = os.listdir(run_temp)
    except OSError:
        return False
    return any(
        name.startswith("beam-temp") and os.path.isdir(os.path.join(run_temp, name))
        for name in names
    )


def _remove_run_temp(run_temp: str, remove_at_exit: Callable[[], Any]) -> None:
    """Remove the run's temporary directory now, or, while a job server of the run keeps its
    files there, leave it to the exit handler registered before the run (so after Beam's)."""
    if _job_servers_in(run_temp):
        return
    atexit.unregister(remove_at_exit)  # a partial: equal only to itself
    shutil.rmtree(run_temp, ignore_errors=True)


def _job_is_the_program() -> bool:
    """Whether this process is a job run as ``python -m pipelines.<job>`` (its ``__main__``
    module's spec names it, as documented for ``-m``), not code that calls :func:`cli`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and str(spec.name).startswith("pipelines.")


# ------------------------------------------------------------ runs killed before their end

#: The prefix of a run's temporary directory, in the system's temporary directory.
RUN_TEMP_PREFIX = "beam_dp_job_"
_OWNER_FILE = "owner.json"


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat``), or None
    when there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def _this_boot_and_namespace() -> tuple[str, str] | None:
    """This machine's boot id and this process's PID namespace, or None without ``/proc``."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        return boot, os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _record_owner(run_temp: str) -> None:
    """Write who owns ``run_temp`` (this process: pid, start time, boot, PID namespace, host),
    so that the next job can tell the directory of a killed run from a running one."""
    where = _this_boot_and_namespace()
    start = _process_start(os.getpid())
    if where is None or start is None:
        return  # without /proc, no run can tell: the directory is never taken for stale
    owner = {
        "pid": os.getpid(),
        "start": start,
        "boot": where[0],
        "pid_namespace": where[1],
        "host": socket.gethostname(),
    }
    path = os.path.join(run_temp, _OWNER_FILE)
    with open(path + ".partial", "w", encoding="utf-8") as handle:
        json.dump(owner, handle)
    os.replace(path + ".partial", path)


def _owner_is_gone(run_temp: str) -> bool:
    """Whether the process that made ``run_temp`` has ended (False when it cannot be told:
    no owner file yet, another host, another PID namespace, no ``/proc``)."""
    where = _this_boot_and_namespace()
    try:
        with open(os.path.join(run_temp, _OWNER_FILE), encoding="utf-8") as handle:
            owner = json.load(handle)
        pid, start = int(owner["pid"]), int(owner["start"])
        boot, namespace, host = str(owner["boot"]), str(owner["pid_namespace"]), owner["host"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if where is None or host != socket.gethostname():
        return False
    if boot != where[0]:
        return True  # the machine restarted since
    if namespace != where[1]:
        return False
    return _process_start(pid) != start  # no such process, or another one with its number


def _processes_naming(path: str) -> list[int]:
    """This user's processes (not this one) whose command line names ``path`` or a path
    under it: a job server Beam started keeps its files in the run's directory, and says so
    in its arguments (``--artifacts-dir``)."""
    needle = path.encode()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                words = handle.read().split(b"\0")
        except OSError:
            continue
        if any(w == needle or w.startswith(needle + os.sep.encode()) for w in words):
            found.append(int(entry))
    return found


def remove_stale_runs(system_temp: str) -> None:
    """Remove the temporary directories of runs killed before their end (SIGKILL, a lost
    machine), and stop the job servers they left running.

    A run's directory (``beam_dp_job_*`` in the system's temporary directory) records its
    owner (:func:`_record_owner`); a killed run could not remove it, nor stop the job server
    Beam started for it (a JVM that outlives its parent). Each job, when it starts, looks for
    directories of this user whose owner has ended: it kills the processes that name the
    directory in their arguments, then removes it. A directory whose owner cannot be told
    (no owner file yet: a run starting at this moment) is left alone.
    """
    try:
        names = [name for name in os.listdir(system_temp) if name.startswith(RUN_TEMP_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(system_temp, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if not _owner_is_gone(path):
            continue
        for pid in _processes_naming(path):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)
