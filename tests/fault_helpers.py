"""Faults for tests, installed in Dask worker processes (importable by name there)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import distributed


class MarkFirstRelease(distributed.WorkerPlugin):  # type: ignore[misc]
    """In each worker: the first time a release leaves its transform (``Release.to_dict``),
    create ``marker``, so that a test can kill the workers right after a release exists."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def setup(self, worker: Any) -> None:
        import beam_dp.release as module

        original = module.Release.to_dict
        if getattr(original, "marks", None) == self.marker:
            return
        marker = self.marker

        def to_dict(release: Any) -> Any:
            with contextlib.suppress(FileExistsError):
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return original(release)

        to_dict.marks = marker  # type: ignore[attr-defined]
        module.Release.to_dict = to_dict  # type: ignore[method-assign]


def slow_file_moves(seconds: float) -> None:
    """In this process, every ``os.rename`` and ``os.replace`` first waits ``seconds`` (a slow
    file system), so that a test can kill a job while it moves its outputs into place."""
    import time

    def slowed(move: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return move(*args, **kwargs)

        return call

    os.rename = slowed(os.rename)
    os.replace = slowed(os.replace)


def run_job_slowly(module: str, seconds: float, argv: list[str]) -> None:
    """Run ``python -m <module> argv`` in this process with :func:`slow_file_moves`."""
    import runpy
    import sys

    slow_file_moves(seconds)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
