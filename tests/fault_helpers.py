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
