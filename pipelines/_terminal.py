"""What reaches a user's terminal from a job: our lines, not other libraries' noise.

Imports no Beam (and nothing heavy), so that :func:`quiet_third_party` can run before Apache
Beam is imported: Beam logs ``apitools not found`` on the root logger while it imports its GCP
modules, and that import happens when a job module is loaded, before :func:`pipelines.common.cli`
runs. ``pipelines/__init__.py`` therefore calls it when Python is locating a ``python -m
pipelines.<job>`` module (documented: ``sys.argv[0]`` is ``"-m"`` then), and sets
:data:`QUIET_ENV` so that worker processes a runner spawns from the job (Dask's nannies) do the
same; :func:`pipelines.common.cli` calls it too. Nothing here is installed by the library
(``beam_dp``), and importing ``pipelines`` from other code (tests, notebooks) changes nothing.

Only known messages that a user cannot act on are dropped, by exact text: Beam's
``apitools not found`` warning, its Dask runner's ``Discarding unparseable args`` and default
partition-size warnings, Dask's own partition warnings, its dashboard's "port already in
use" warning and its nanny's "worker process still alive" at shutdown; Dask's
``distributed`` INFO chatter (scheduler and worker start-up) is raised to WARNING.

A job run from the command line goes further once its flags are parsed
(:func:`divert_stderr`, unless ``--show_tracebacks_unsafe``): the process's file descriptor 2
is pointed at a file of the run's temporary directory, so that whatever else writes there
(Beam's SDK harness printing a failed bundle's traceback, the root logger that Beam's portable
runner relays job messages through, processes the job starts: SDK workers, Dask's, a job
server's JVM, native libraries) never reaches the terminal. Our own lines (the ``beam_dp``
loggers: progress, public facts) and the one ``error:`` line still do (:func:`say`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import TextIO

__all__ = [
    "ENVIRONMENT",
    "LOG_FORMAT",
    "QUIET_ENV",
    "divert_stderr",
    "quiet_third_party",
    "say",
    "stderr_diverted",
]

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
QUIET_ENV = "BEAM_DP_QUIET_CLI"
_DASK_LOGGING = "DASK_LOGGING__DISTRIBUTED"
ENVIRONMENT = (QUIET_ENV, _DASK_LOGGING)  # the variables quiet_third_party sets

# (logger name, start of the message) of the records dropped.
_DROPPED = (
    ("root", "apitools not found"),
    # Beam's job server for Flink or Spark, while the JVM starts (a few seconds, every run)
    ("root", "Waiting for grpc channel to be ready"),
    ("apache_beam.options.pipeline_options", "Discarding unparseable args"),
    ("apache_beam.runners.dask.transform_evaluator", "The new default partition size"),
    # a local Dask cluster's nanny killing a worker slow to stop, after the job finished
    ("distributed.nanny", "Worker process still alive after"),
)


class _DropKnownNoise(logging.Filter):
    """Drops a record whose unformatted message starts with one of the known texts."""

    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self._starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self._starts))


def _install(logger: logging.Logger, starts: tuple[str, ...]) -> None:
    if not any(isinstance(f, _DropKnownNoise) for f in logger.filters):
        logger.addFilter(_DropKnownNoise(starts))


def quiet_third_party() -> None:
    """Install the filters (idempotent) and set up our log format on a bare root logger.

    A filter on a logger sees the records logged on that very logger, which is where each of
    these messages is logged. ``logging.basicConfig`` here also keeps Beam's module-level
    ``logging.warning`` from setting up the root logger with its own format first (it does
    nothing when the root logger already has a handler, as under pytest).
    """
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for name, start in _DROPPED:
        _install(logging.getLogger() if name == "root" else logging.getLogger(name), (start,))
    distributed = logging.getLogger("distributed")
    if distributed.level == logging.NOTSET or distributed.level < logging.WARNING:
        distributed.setLevel(logging.WARNING)
    # Dask's own UserWarnings about partitions (dask.bag) are not a user's to act on either.
    warnings.filterwarnings("ignore", message=r".*partition", category=UserWarning, module="dask")
    # A local Dask cluster's dashboard finding its default port taken moves to another port.
    warnings.filterwarnings(
        "ignore", message=r"Port \d+ is already in use", category=UserWarning, module="distributed"
    )
    # Dask reads its logging levels from the environment when it is imported, here and in
    # the worker processes its local cluster spawns; a user's own setting wins.
    os.environ.setdefault(_DASK_LOGGING, "warning")
    os.environ[QUIET_ENV] = "1"  # inherited by the processes a runner spawns


# The terminal once descriptor 2 is diverted: a stream on a copy of the original descriptor 2
# (at most one; diverted once, for the process's life).
_terminal: list[TextIO] = []


def divert_stderr(log_path: str) -> None:
    """Point descriptor 2 at ``log_path`` (created 0600) for the rest of the process.

    Called once a job run as a program has parsed its flags. ``sys.stderr`` writes to
    descriptor 2, so Python's writes follow it, and so do the processes started from now (they
    inherit it). Records of the ``beam_dp`` loggers are written to the terminal by a handler
    of their own, and still reach every other handler (the root logger's writes to the file).
    Not undone when the job ends: Beam's exit handlers, its harness threads and a job server's
    shutdown may still write after our last line. Idempotent.
    """
    if _terminal:
        return
    sys.stderr.flush()
    terminal_fd = os.dup(2)  # not inheritable (PEP 446): no process the job starts gets it
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(log_fd, 2)  # inheritable: what the job starts from now writes to the file
    finally:
        os.close(log_fd)
    terminal = os.fdopen(terminal_fd, "w", buffering=1, encoding="utf-8", errors="replace")
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger("beam_dp").addHandler(handler)
    _terminal.append(terminal)


def stderr_diverted() -> bool:
    """Whether :func:`divert_stderr` ran in this process."""
    return bool(_terminal)


def say(line: str) -> None:
    """Write ``line`` to the terminal: descriptor 2 as it was before a diversion."""
    stream = _terminal[0] if _terminal else sys.stderr
    stream.write(line + "\n")
    stream.flush()
