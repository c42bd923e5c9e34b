"""What the engine tests need beyond benchmarks/engine_processes.py (the processes they
share): failing or skipping when this machine lacks them, other test modules' helpers, and
collecting a pipeline's output through files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.engine_processes import (  # noqa: F401  (re-exported for the tests)
    JOB_TIMEOUT,
    REPO,
    FlinkCluster,
    JobServer,
    WorkerPool,
    flink_home,
    java_home,
    job_server_jar,
)


def unavailable(reason: str) -> None:
    """Fail under CI (it must run the engine tests: `make test` installs what they need),
    skip with the reason elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the engine tests; `make engines` installs them)")
    pytest.skip(reason)


def load_test_module(path: Path, name: str) -> Any:
    """Another test directory's module (its data and helpers, not its tests), importable by
    ``name`` in this process (so that Beam pickles its classes by reference)."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class DumpElements:
    """``DumpElements.into(directory)``: a DoFn pickling each bundle's ``(element, window)``
    pairs into one file of ``directory`` (on a machine whose workers share its disk), and
    ``DumpElements.read(directory)`` to get them back."""

    @staticmethod
    def into(directory: Path) -> Any:
        import apache_beam as beam

        class _Dump(beam.DoFn):  # type: ignore[misc]
            def __init__(self, target: str) -> None:
                self._target = target

            def start_bundle(self) -> None:
                self._items: list[tuple[Any, Any]] = []

            def process(self, element: Any, window: Any = beam.DoFn.WindowParam) -> None:
                self._items.append((element, window))

            def finish_bundle(self) -> None:
                if self._items:
                    import pickle
                    import uuid

                    path = os.path.join(self._target, uuid.uuid4().hex)
                    with open(path + ".partial", "wb") as handle:
                        pickle.dump(self._items, handle)
                    os.replace(path + ".partial", path)

        directory.mkdir(parents=True, exist_ok=True)
        return beam.ParDo(_Dump(str(directory)))

    @staticmethod
    def read(directory: Path) -> list[tuple[Any, Any]]:
        import pickle

        found: list[tuple[Any, Any]] = []
        for path in sorted(directory.iterdir()):
            if not path.name.endswith(".partial"):
                with path.open("rb") as handle:
                    found.extend(pickle.load(handle))
        return found
