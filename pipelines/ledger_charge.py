"""A job's charge in a persistent budget ledger: reserved before any data is read, then
committed, or (only when no data was read yet) given back.

Fail closed: the reservation goes back only when the job failed before the pipeline ran
(parameters, files, the ledger itself). Once records were read, whether the job fails may
depend on them (a bad record with ``on_bad_record=fail``), and a refund would let such a
one-bit leak repeat for free; a release may also have escaped while the outputs were written.
If the ledger fails too, the charge stays.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from beam_dp.accounting import PrivacyBudget
from beam_dp.ledger import LedgerError, Plan, Reservation, RunInfo, open_ledger
from pipelines._state import STATE

__all__ = ["check_ledger_flags", "commit", "reserve", "settle_failure"]

_HISTORY_FIELDS = (
    "run", "shown_state", "reserved_at", "epsilon", "delta", "rho", "job", "statistics",
    "output_location",
)  # fmt: skip


def check_ledger_flags(ledger: str | None, dataset: str | None) -> None:
    """A ledger is given by both --ledger URL and --dataset NAME, or not at all."""
    if (ledger is None) != (dataset is None):
        raise ValueError("give both --ledger URL and --dataset NAME, or neither")


def reserve(
    ledger: str | None, dataset: str | None, budget: PrivacyBudget, relation: str, run: RunInfo
) -> tuple[Reservation, dict[str, Any]] | None:
    """Reserve the final budget's whole spend in the ledger, before any data is read.

    Returns the reservation and the record that goes into ``release.json`` and the report:
    this run's reservation, the dataset's budget with it, and the dataset's earlier runs
    (public facts only: amounts, times, jobs, statistics' names, output locations).
    """
    check_ledger_flags(ledger, dataset)
    if ledger is None or dataset is None:
        return None
    with open_ledger(ledger) as opened:  # closed while the pipeline runs; commit reconnects
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


def settle_failure(reservation: Reservation) -> None:
    """After a failed run: give the reservation back, or leave it charged (module docstring)."""
    with contextlib.suppress(LedgerError):
        if STATE.phase == "prepare":
            reservation.release()
        elif STATE.writing_outputs:
            reservation.abandon("the job failed while writing its outputs")
        else:
            reservation.abandon("the job failed after it began reading data")


def commit(reservation: Reservation, budget: PrivacyBudget, output: str, overwrite: bool) -> None:
    """After a successful run: the budget's ledger entries, charged where the outputs are."""
    location = output if "://" in output else os.path.abspath(output)
    reservation.commit(budget.ledger, location, overwrite=overwrite)
