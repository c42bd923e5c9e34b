"""What the modules of one running job share: its phase, its stages, its progress logger.

One job runs at a time in a process (:func:`pipelines.cli.cli` resets the state when it
starts and ends). :func:`pipelines.cli.cli` reads it to decide what a failure may say;
:func:`pipelines.execute.run_releases` moves the phase on; the ledger charge reads it to
decide whether a failed run's reservation may go back (:mod:`pipelines.ledger_charge`).
"""

from __future__ import annotations

import logging

__all__ = ["LOG", "SKIP_HINT_CONFIG", "SKIP_HINT_FLAG", "STATE", "JobState"]

#: The job's progress lines (public facts only; exact counts only with --log_exact_counts).
LOG = logging.getLogger("beam_dp.pipelines")
LOG.setLevel(logging.INFO)

#: How a job's user asks to skip bad records: a flag, or the release job's config key.
SKIP_HINT_FLAG = "--on_bad_record skip"
SKIP_HINT_CONFIG = 'on_bad_record = "skip" in the config\'s [input]'


class JobState:
    """What :func:`pipelines.cli.cli` needs to know when a job fails (one job at a time).

    Attributes:
        in_cli: Whether the job runs under :func:`pipelines.cli.cli`.
        phase: ``"prepare"`` (parse and build), ``"run"`` (the pipeline reads data), then
            ``"write"`` (the releases are collected and written).
        writing_outputs: Once True, a release may have escaped.
        stages: The full labels of the job's pipeline (public: they come from the job).
        sources: The input files the job matched (public: paths, never contents).
        columns: The columns the job names (public: they come from its flags or config).
        show_tracebacks: ``--show_tracebacks_unsafe`` was given (not private).
        skip_hint: How the job's user asks to skip bad records.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self, *, in_cli: bool = False) -> None:
        self.in_cli = in_cli
        self.phase = "prepare"
        self.writing_outputs = False
        self.stages: frozenset[str] = frozenset()
        self.sources: frozenset[str] = frozenset()
        self.columns: frozenset[str] = frozenset()
        self.show_tracebacks = False
        self.skip_hint = SKIP_HINT_FLAG


STATE = JobState()
