"""A job's charge in a persistent budget ledger: reserved before any data is read, started
right before the pipeline runs, committed before the outputs are written, or (only when the
pipeline never started) given back.

Fail closed: the reservation goes back only when the job failed before the pipeline ran
(parameters, files, the temporary location, the ledger itself). Once the ledger recorded the
start, whether the job fails may depend on the records (a bad record with
``on_bad_record=fail``), and a refund would let such a one-bit leak repeat for free; neither
the job nor an owner can lift the charge then. The commit comes before the outputs: a commit
that cannot reach the ledger is retried for a bounded time (``COMMIT_ATTEMPTS`` attempts of up
to ``--ledger_timeout`` seconds each, with pauses of 1, 2, 4 s), and if it still fails the
releases are not written and the run stays charged for its reservation.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from beam_dp import PrivacyBudget
from beam_dp.ledger import COMMIT_ATTEMPTS, LedgerError, Plan, Reservation, RunInfo, open_ledger

__all__ = [
    "LEDGER_TIMEOUT",
    "check_ledger_flags",
    "commit",
    "reserve",
    "settle_failure",
    "start",
]

#: Seconds a job waits for the ledger (its lock, or a PostgreSQL connection) at each attempt.
LEDGER_TIMEOUT = 30.0

_HISTORY_FIELDS = (
    "run", "shown_state", "reserved_at", "epsilon", "delta", "rho", "job", "statistics",
    "output_location",
)  # fmt: skip


def check_ledger_flags(ledger: str | None, dataset: str | None) -> None:
    """A ledger is given by both --ledger URL and --dataset NAME, or not at all."""
    if (ledger is None) != (dataset is None):
        raise ValueError("give both --ledger URL and --dataset NAME, or neither")


def reserve(
    ledger: str | None,
    dataset: str | None,
    budget: PrivacyBudget,
    relation: str,
    run: RunInfo,
    *,
    timeout: float = LEDGER_TIMEOUT,
) -> tuple[Reservation, dict[str, Any]] | None:
    """Reserve the final budget's whole spend in the ledger, before any data is read.

    Returns the reservation and the record that goes into ``release.json`` and the report:
    this run's reservation, the dataset's budget with it, and the dataset's earlier runs
    (public facts only: amounts, times, jobs, statistics' names, output locations).
    """
    check_ledger_flags(ledger, dataset)
    if ledger is None or dataset is None:
        return None
    with open_ledger(ledger, timeout=timeout) as opened:  # closed while the pipeline runs
        reservation = opened.reserve(dataset, Plan.from_budget(budget, relation=relation), run)
        status = opened.status(dataset)
        runs, _ = opened.history(dataset)
    record = {
        **reservation.describe(),
        "dataset_budget": status.describe_remaining(),
        "earlier_runs": [
            {
                key: value
                for key, value in past.to_json(status.composition).items()
                if key in _HISTORY_FIELDS
            }
            for past in runs
            if past.id != reservation.run_id
        ],
    }
    return reservation, record


def start(reservation: Reservation) -> None:
    """Record in the ledger that the run starts reading data; if that fails, give the
    reservation back (nothing was read) and stop the job."""
    try:
        reservation.start()
    except LedgerError:
        with contextlib.suppress(LedgerError):
            reservation.release()
        raise


def settle_failure(reservation: Reservation, *, started: bool) -> None:
    """After a failed run: give the reservation back if the pipeline never started, else leave
    it charged (module docstring)."""
    with contextlib.suppress(LedgerError):
        if not started:
            reservation.release()
        else:
            reservation.abandon("the job failed after it began reading data")


def commit(
    reservation: Reservation, budget: PrivacyBudget, output: str, overwrite: bool
) -> dict[str, Any]:
    """After a successful run, before the outputs: the budget's ledger entries, charged where
    the outputs will be. Returns what the ledger charged and what the period has left.

    Raises:
        LedgerError: the ledger could not record the run after every attempt: the releases
            must not be written, and the run stays charged.
    """
    location = output if "://" in output else os.path.abspath(output)
    composition = reservation.plan.composition
    try:
        record = reservation.commit(budget.ledger, location, overwrite=overwrite)
    except LedgerError as error:
        raise LedgerError(
            f"{error} -- the ledger could not record run {reservation.run_id} after "
            f"{COMMIT_ATTEMPTS} attempts, so its releases were NOT written; the run stays "
            f"charged its reservation ({reservation.cost.describe(composition)}) on dataset "
            f"{reservation.dataset!r} because its pipeline read data, and no one can lift that "
            "charge (a run that may have published is never refunded); nothing needs "
            "reconciling: `python -m pipelines.budget history` lists it as reserved (started)"
        ) from None
    summary: dict[str, Any] = {"run": record.id, "charged": record.cost.describe(composition)}
    with contextlib.suppress(LedgerError):
        summary["remaining"] = reservation.status().describe_remaining()
    return summary
