"""What the spawned jobs of ``test_ledger_jobs.py`` run (importable by name in a fresh
interpreter: the test puts this directory on ``sys.path``, which spawned processes inherit)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import apache_beam as beam

from beam_dp.ledger import BudgetExceededError


def run_job(job: str, argv: list[str], index: int, start: Any, results: Any, marks: str) -> None:
    """Run ``pipelines.<job>`` once ``start`` lets every racer go; report what became of it.

    A marker file ``ran-<index>`` in ``marks`` says that this job ran its pipeline (read its
    data); a refused job must leave none. Reports ``(index, outcome, message, ledger record)``
    with outcome ``committed``, ``refused`` (the budget) or ``error`` (anything else).
    """
    module = importlib.import_module(f"pipelines.{job}")
    original = beam.Pipeline.run

    def recorded(self: beam.Pipeline, *args: Any, **kwargs: Any) -> Any:
        (Path(marks) / f"ran-{index}").write_text("the pipeline ran")
        return original(self, *args, **kwargs)

    setattr(beam.Pipeline, "run", recorded)  # noqa: B010 (mypy: no method assignment)
    try:
        start.wait(timeout=120)
        try:
            document = module.run(argv)
        except BudgetExceededError as error:
            results.put((index, "refused", str(error), None))
            return
        results.put((index, "committed", "", document["budget"].get("ledger")))
    except Exception as error:  # reported to the test, which fails on it
        results.put((index, "error", f"{type(error).__name__}: {error}", None))
