"""Fixtures of the Beam tests: run a pipeline in process and collect what it outputs."""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp import telemetry
from beam_dp.batching import VALUE


class _Dump(beam.DoFn):
    """Pickle each bundle's elements (with their window) into one file."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._items: list[tuple[Any, Any]] = []

    def process(self, element: Any, window: Any = beam.DoFn.WindowParam) -> None:
        self._items.append((element, window))

    def finish_bundle(self) -> None:
        if self._items:
            with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
                pickle.dump(self._items, handle)


Collect = Callable[..., list[tuple[Any, Any]]]


@pytest.fixture
def collect(tmp_path: Path) -> Collect:
    """``collect(build, runner=None, options=None)`` runs ``build(pipeline)`` on ``runner``
    (the in-process FnApiRunner by default) with ``options`` and returns the
    ``(element, window)`` pairs of the PCollection it returns."""

    def run(
        build: Callable[[beam.Pipeline], Any],
        runner: Any = None,
        options: PipelineOptions | None = None,
    ) -> list[tuple[Any, Any]]:
        directory = tmp_path / uuid.uuid4().hex
        directory.mkdir()
        with beam.Pipeline(runner=runner or FnApiRunner(), options=options) as pipeline:
            _ = build(pipeline) | "Collect" >> beam.ParDo(_Dump(str(directory)))
        found: list[tuple[Any, Any]] = []
        for path in directory.iterdir():
            with open(path, "rb") as handle:
                found.extend(pickle.load(handle))
        return found

    return run


@pytest.fixture
def exact_counts() -> Iterator[None]:
    """Switch exact counts on for one test (and always off again)."""
    telemetry.enable_exact_counts()
    try:
        yield
    finally:
        telemetry.disable_exact_counts()


class _MarkerPresent(beam.CombineFn):
    """Scores ["spam", "no spam"]: whether a row whose value is ``marker`` reached the window
    (a probe: the flooding unit's rows carry the marker)."""

    def __init__(self, marker: float) -> None:
        self._marker = marker

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, accumulator: int, batch: dict[str, Any]) -> int:
        return accumulator + int(np.count_nonzero(batch[VALUE] == self._marker))

    def merge_accumulators(self, accumulators: Any) -> int:
        return sum(accumulators)

    def extract_output(self, accumulator: int) -> list[int]:
        return [1, 0] if accumulator else [0, 1]


@pytest.fixture
def marker_present() -> Callable[[float], beam.CombineFn]:
    """``marker_present(value)``: a score over ["spam", "no spam"], whether a row with that
    value reached the window."""
    return _MarkerPresent
