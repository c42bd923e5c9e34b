r"""The state machine of a run: reserve, start, then commit, return, abandon or release.

A job drives it through a :class:`~beam_dp.ledger.store.Reservation` (which holds the ledger's
connection, so it lives with :class:`~beam_dp.ledger.store.Ledger`); each transition is a
function of :class:`~beam_dp.ledger._tables.Tables` here.

State machine of a run (one row per reservation)::

                    reserve()  (one transaction, before any data is read; refused with
                       |        the remaining budget if the dataset cannot afford it, or if
                       |        an input file lies outside the dataset's registration)
                       v
                  [reserved] --- release() by the job -------> [returned]   not charged
                       |          (it failed before it started reading)
                    start()   (recorded before the pipeline reads any data: started_at)
                       |
                       v
            [reserved, started] ---- commit() -------------> [committed]   charged
                       |   \--- abandon() by the job ------> [abandoned]   charged
                       \------ (the process died, or the commit failed: the row stays
                                reserved and started, charged; `show` says so)

        [reserved] never started, its process gone --- release by an owner ---> [released]

- *Charged* states count against the dataset: ``reserved``, ``committed``, ``abandoned``.
- **A run that may have published is never refunded.** Once :meth:`Reservation.start` has
  recorded that the pipeline is about to read data, neither the job nor an owner can lift the
  charge: whether the job fails may depend on the records (a bad record), and a release may have
  escaped. Only a run that never started can be returned (by the job) or released (by an owner,
  with a reason, once its process is gone).
- ``commit()`` records the ledger entries and the output location; it charges the larger of the
  reservation and what the entries spent. A job commits *before* it writes its outputs, so no
  output exists that the ledger does not record; a commit that cannot get the ledger is retried
  for a bounded time (:func:`commit_with_retries`), and if it still fails the run stays charged
  (reserved and started) and its releases are not written.
- ``committed`` is final: an overwrite of a run's output location is a new run, recorded
  with the ids of the runs it overwrote; their spend stays spent.
- Runs are charged to the renewal period in which they reserved (:mod:`beam_dp.ledger.periods`),
  at the ledger's time (:meth:`Tables.time <beam_dp.ledger._tables.Tables.time>`: the server's
  clock on PostgreSQL).

Remaining budget = the period's allowance − committed − (reserved + abandoned), exactly.

Concurrency (why two jobs cannot both spend what only one may):
    Every transition below is one *write* transaction (:meth:`Backend.write
    <beam_dp.ledger._backend.Backend.write>`) whose first read is the dataset's row with
    ``lock=True``. On SQLite the transaction began with ``BEGIN IMMEDIATE``, so it already
    holds the database's write lock; on PostgreSQL the read is ``SELECT ... FOR UPDATE`` under
    ``READ COMMITTED``, so writers of one dataset queue on that row, and each statement after
    the lock sees every transaction committed before it was granted. Hence in
    :func:`reserve` the sum of the period's charges, the comparison with the allowance and
    the insert of the new run are one atomic step against every other writer of the dataset:
    of two runs that each fit alone but not together, the second sees the first's row and is
    refused. A period that ended is replaced by the next one under the same lock, so two runs
    crossing a renewal at once charge the same new period. A transition on an existing run
    (:func:`commit`, :func:`close`, :func:`release_run`) finds the run, locks its dataset,
    and reads the run again (:func:`_locked_run`): its state may have changed in between
    (another process committed or released it), and the decision is taken on the state
    under the lock.

Privacy:
    The ledger stores public parameters only: dataset names, totals, amounts, the names of
    statistics, the ledger entries of releases (mechanism, ε, Δ, bounds, accuracy bounds),
    input file names, output locations, config digests, hosts and process ids. Never a record,
    never a data-dependent count.
"""

from __future__ import annotations

import json
from typing import Literal

from beam_dp.accounting import Composition, LedgerEntry
from beam_dp.ledger._backend import Transaction
from beam_dp.ledger._records import (
    Period,
    RunRecord,
    dataset_status,
    process_gone,
    shown_time,
    timestamp,
)
from beam_dp.ledger._tables import Tables
from beam_dp.ledger.errors import BudgetExceededError, LedgerError
from beam_dp.ledger.inputs import check_inputs
from beam_dp.ledger.plan import Plan, RunInfo, cost_of_entries

__all__ = [
    "COMMIT_ATTEMPTS",
    "close",
    "commit",
    "release_run",
    "reserve",
    "start",
]


#: A commit that finds the ledger locked or unreachable is tried this many times in all, with
#: pauses of 1, 2, 4, ... seconds (each attempt waits up to the ledger's timeout for the lock):
#: at most ``COMMIT_ATTEMPTS * timeout + 2 ** (COMMIT_ATTEMPTS - 1) - 1`` seconds in all.
COMMIT_ATTEMPTS = 4


def reserve(tables: Tables, dataset: str, plan: Plan, run: RunInfo) -> tuple[int, Period]:
    """Reserve ``plan`` for a new run of ``dataset`` (:meth:`Ledger.reserve
    <beam_dp.ledger.Ledger.reserve>`); return the run's id and the period it is charged to.

    The check of the inputs against every dataset's registration, the check of what is left
    and the insert are one step under the dataset's lock (see the concurrency argument
    above); a refusal reserves nothing.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"'plan' must be a Plan; received {type(plan).__name__}")
    if not isinstance(run, RunInfo):
        raise TypeError(f"'run' must be a RunInfo; received {type(run).__name__}")
    if not run.inputs:
        raise LedgerError(
            "a run must name the files it reads (RunInfo.inputs): the ledger checks them "
            "against what each dataset protects (one export, one budget)"
        )
    with tables.backend.write() as transaction:
        data = tables.dataset_row(transaction, dataset, lock=True)
        now = tables.time(transaction, forward_of=dataset)
        check_inputs(dataset, tables.registrations(transaction), run.inputs)
        kind: Composition = data["composition"]
        if plan.composition != kind:
            raise LedgerError(
                f"dataset {dataset!r} composes by {kind!r} composition "
                f"({'rho adds up' if kind == 'zcdp' else 'epsilon and delta add up'}), but "
                f"this run's budget uses composition={plan.composition!r}; the two do not "
                f"mix on one dataset: set the job's composition to {kind!r}"
            )
        if plan.relation != data["relation"]:
            raise LedgerError(
                f"dataset {dataset!r} accounts releases under relation="
                f"{data['relation']!r}, but this run declares relation={plan.relation!r}; "
                "budgets under different neighbouring relations do not add up"
            )
        period = tables.current_period(transaction, data, now, materialise=True)
        committed, held = tables.period_charges(transaction, period)
        remaining = period.allowance - committed - held
        if not remaining.covers(plan.cost):
            status = dataset_status(dataset, data, period, committed, held)
            renews = (
                f"; the allowance renews at {shown_time(period.ends_at)}"
                if period.ends_at is not None and data["renewal"] != "none"
                else ""
            )
            raise BudgetExceededError(
                f"dataset {dataset!r} cannot afford this run: it asks "
                f"{plan.cost.describe(kind)}, and there is {status.describe_remaining()}"
                f"{renews}. Nothing was reserved and no data was read"
            )
        details = {**dict(run.details), "inputs": list(run.inputs)}
        run_id = transaction.insert(
            "INSERT INTO beam_dp_runs (dataset, period_id, state, reserved_at, closed_at, "
            "epsilon, delta, rho, job, config_digest, statistics, host, pid, details, "
            "output_location, overwrite, overwrites, entries, note, started_at) "
            "VALUES (?, ?, 'reserved', ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '[]', "
            "'[]', '', NULL)",
            (
                dataset,
                period.id,
                timestamp(now),
                str(plan.cost.epsilon),
                str(plan.cost.delta),
                str(plan.cost.rho),
                run.job,
                run.config_digest,
                json.dumps(list(plan.statistics)),
                run.host,
                run.pid,
                json.dumps(details, sort_keys=True, default=str),
                run.output_location,
            ),
        )
    return run_id, period


def _locked_run(
    tables: Tables, transaction: Transaction, run_id: int
) -> tuple[RunRecord, Composition]:
    runs = tables.runs(transaction, "r.id = ?", (run_id,))
    if not runs:
        raise LedgerError(f"ledger {tables.url} has no run {run_id}")
    data = tables.dataset_row(transaction, runs[0].dataset, lock=True)
    # Read again under the dataset's lock: the state may have changed meanwhile.
    return tables.runs(transaction, "r.id = ?", (run_id,))[0], data["composition"]


def start(tables: Tables, run_id: int) -> None:
    """Record that a reserved run begins reading data (:meth:`Reservation.start`)."""
    with tables.backend.write() as transaction:
        record, _kind = _locked_run(tables, transaction, run_id)
        if record.state != "reserved" or record.started_at is not None:
            raise LedgerError(
                f"run {run_id} is {record.shown_state}: only a reserved run that has not "
                "started can start reading data"
            )
        now = tables.time(transaction, forward_of=record.dataset)
        transaction.execute(
            "UPDATE beam_dp_runs SET started_at = ? WHERE id = ?", (timestamp(now), run_id)
        )


def commit(
    tables: Tables,
    run_id: int,
    entries: list[LedgerEntry],
    output_location: str | None,
    overwrite: bool,
    *,
    retry: bool = False,
) -> RunRecord:
    """Commit a run (:meth:`Reservation.commit`). On a ``retry``, a run found committed is the
    earlier attempt's commit, whose answer was lost with the connection: it is returned."""
    for entry in entries:
        if not isinstance(entry, LedgerEntry):
            raise TypeError(f"'entries' must be LedgerEntry; received {type(entry).__name__}")
    if output_location is not None and not isinstance(output_location, str):
        raise TypeError("'output_location' must be a string")
    with tables.backend.write() as transaction:
        record, kind = _locked_run(tables, transaction, run_id)
        if record.state == "committed":
            if retry:
                return record
            raise LedgerError(f"run {run_id} is already committed")
        now = tables.time(transaction)
        charged = record.cost.at_least(cost_of_entries(entries, kind))
        overwrites = (
            [
                int(row[0])
                for row in transaction.all(
                    "SELECT id FROM beam_dp_runs WHERE output_location = ? AND "
                    "state = 'committed' AND id <> ? ORDER BY id",
                    (output_location, run_id),
                )
            ]
            if output_location is not None
            else []
        )
        note = record.note
        if record.state in ("returned", "released"):
            note = (note + "; " if note else "") + (
                f"committed after it was {record.state}: charged again"
            )
        transaction.execute(
            "UPDATE beam_dp_runs SET state = 'committed', closed_at = ?, epsilon = ?, "
            "delta = ?, rho = ?, output_location = ?, overwrite = ?, overwrites = ?, "
            "entries = ?, note = ? WHERE id = ?",
            (
                timestamp(now),
                str(charged.epsilon),
                str(charged.delta),
                str(charged.rho),
                output_location if output_location is not None else record.output_location,
                1 if overwrite else 0,
                json.dumps(overwrites),
                json.dumps([entry.to_dict() for entry in entries], sort_keys=True),
                note,
                run_id,
            ),
        )
        return tables.runs(transaction, "r.id = ?", (run_id,))[0]


def close(
    tables: Tables,
    run_id: int,
    state: Literal["returned", "abandoned"],
    reason: str,
) -> None:
    with tables.backend.write() as transaction:
        record, _kind = _locked_run(tables, transaction, run_id)
        if state == "returned":
            if record.state in ("returned", "released"):
                return
            if record.state != "reserved" or record.started_at is not None:
                raise LedgerError(
                    f"run {run_id} is {record.shown_state}: only a reserved run that never "
                    "started reading data can be returned (its outputs may have been written)"
                )
        elif record.state != "reserved":
            if record.state == "abandoned":
                return
            raise LedgerError(f"run {run_id} is {record.state}; it cannot be abandoned")
        now = tables.time(transaction)
        transaction.execute(
            "UPDATE beam_dp_runs SET state = ?, closed_at = ?, note = ? WHERE id = ?",
            (state, timestamp(now), reason, run_id),
        )


def release_run(tables: Tables, run_id: int, *, reason: str) -> RunRecord:
    """An owner lifts a run's charge (:meth:`Ledger.release_run
    <beam_dp.ledger.Ledger.release_run>`): only a reserved run that never started reading data
    and whose process is not running on this host. A run that may have published (it started,
    was abandoned or committed) is never refunded."""
    if not isinstance(reason, str) or not reason.strip():
        raise LedgerError("'reason' must say why the run's charge is lifted")
    with tables.backend.write() as transaction:
        record, _kind = _locked_run(tables, transaction, int(run_id))
        if record.state == "committed":
            raise LedgerError(
                f"run {run_id} is committed: its outputs were written and its spend stays spent"
            )
        if record.state in ("returned", "released"):
            raise LedgerError(f"run {run_id} is already {record.state}: it is not charged")
        if record.state == "abandoned" or record.started_at is not None:
            began = f" at {shown_time(record.started_at)}" if record.started_at is not None else ""
            raise LedgerError(
                f"run {run_id} began reading data{began}: it may have published a release, so "
                "its charge stays (a run that may have published is never refunded)"
            )
        if process_gone(record.host, record.pid) is False:
            raise LedgerError(
                f"run {run_id} is still running on this host (pid {record.pid}); stop it "
                "first (it may still start reading data)"
            )
        now = tables.time(transaction)
        transaction.execute(
            "UPDATE beam_dp_runs SET state = 'released', closed_at = ?, note = ? WHERE id = ?",
            (timestamp(now), reason.strip(), record.id),
        )
        tables.add_event(
            transaction,
            record.dataset,
            now,
            "release",
            {"run": record.id, "from_state": record.state, "reason": reason.strip()},
        )
        return tables.runs(transaction, "r.id = ?", (record.id,))[0]
