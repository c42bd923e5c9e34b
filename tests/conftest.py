import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Test helpers (tests/stats_helpers.py) import as a top-level module.
sys.path.insert(0, str(Path(__file__).parent))

from beam_hangups import is_beam_harness_hang_up
from hypothesis import settings

# CI runs the same examples every time (a failure there is reproducible); locally Hypothesis
# explores new examples on every run. The key properties run with fresh random examples under
# every profile (tests/property_settings.py: fresh_examples), so that a counterexample outside
# the derandomized ones cannot hide; HYPOTHESIS_PROFILE=fresh runs every property that way.
# No profile has a deadline: a per-example time limit is a timing assertion, and on a shared
# machine it fails on load, not on a bug.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("fresh", derandomize=False, database=None, deadline=None, print_blob=True)
settings.register_profile("local", deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "local")
)


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[Any]:
    """A dask.distributed LocalCluster of 2 worker processes, started and stopped per module.

    One cluster per module, not per session: the Dask runner's clients leave sockets that a
    later test would otherwise see closed under it (a ResourceWarning, an error here).
    """
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Drop Beam harness hang-ups (tests/beam_hangups.py) before pytest's thread check.

    ``trylast``: pytest's own hook (its threadexception plugin) is installed first; this wraps
    it, so every other exception of a thread still reaches pytest.
    """
    report = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if is_beam_harness_hang_up(args):
            logging.getLogger(__name__).info(
                "a Beam SDK harness thread ended on its runner's closed channel: %s",
                args.thread.name if args.thread is not None else "<unknown>",
            )
            return
        report(args)

    threading.excepthook = hook
