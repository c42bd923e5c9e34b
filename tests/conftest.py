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


# The modules whose tests took longest in the clean-clone CI runs (--durations=40 of CI run 4,
# 2 workers), heaviest first (the two audits are xdist groups, below: groups go first anyway).
# pytest-xdist's loadgroup scheduler hands out its xdist groups first, then the other tests
# one by one in collection order: a test of a minute or more collected near the end starts
# late and runs alone while the other worker is idle. Started first, the long ones overlap and
# the short ones fill the tail. Order only: a module missing from this list, or one that has
# become fast, changes no test's outcome.
LONGEST_FIRST = (
    "tests/mechanisms/test_selection_distribution.py",
    "tests/mechanisms/test_ks_cdf.py",
    "tests/pipelines/test_kill_publication.py",
    "tests/mechanisms/test_ks_timing.py",
    "tests/mechanisms/test_privacy_audit.py",
    "tests/mechanisms/test_per_key_selection.py",
    "tests/engines/test_job_server_cleanup.py",  # its slow marks come later (engines conftest)
    "tests/beam/test_quantiles.py",
    "tests/mechanisms/test_ks_release.py",
    "tests/benchmarks/test_real_data_smoke.py",
    "tests/benchmarks/test_jointexp_smoke.py",
    "tests/ledger/test_exactly_once.py",
    "tests/test_readme_commands.py",
    "tests/benchmarks/test_jobs_smoke.py",
)


# Modules whose module-scoped fixture runs pipelines for most of a minute (the audits' runs on
# D and D'), each one xdist group: with its tests shared by both workers, each worker built the
# fixture (CI run 4: setup 54.7 s and 31.6 s for the end-to-end audit, 54.7 s and 30.1 s for
# the window audit), and once more whenever a worker came back to the module after another.
ONE_WORKER_MODULES = {
    "tests/audit/test_end_to_end_audit.py": "end-to-end-audit",
    "tests/audit/test_window_audit.py": "window-audit",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker, put the modules of ``LONGEST_FIRST`` first (in its order), then
    every other module that holds a ``slow`` test, then the rest; and mark the tests of
    ``ONE_WORKER_MODULES`` with their xdist group.

    Whole modules move, each keeping its tests' order: split up, a module-scoped fixture would
    be built once more. ``tryfirst``: pytest-xdist reads the group marks in its own
    ``pytest_collection_modifyitems`` (tests/test_xdist_groups.py checks a group reaches the
    node id). A run without workers keeps the collection order.
    """
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        group = ONE_WORKER_MODULES.get(item.nodeid.split("::", 1)[0])
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    rank = {module: index for index, module in enumerate(LONGEST_FIRST)}
    slow_modules = {
        item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")
    }

    def order(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        if module in rank:
            return (0, rank[module])
        return (1, 0) if module in slow_modules else (2, 0)

    items.sort(key=order)
