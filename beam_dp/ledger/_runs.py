"""The state machine of a run: reserve, then commit, return, abandon or (an owner) release.

State machine of a run (one row per reservation)::

                    reserve()  (one transaction, before any data is read; refused with
                       |        the remaining budget if the dataset cannot afford it)
                       v
                  [reserved] ---- commit() ----------------> [committed]   charged
                   |   |  \\                                      ^
                   |   |   \\-- release() by the job ----> [returned]    not charged
                   |   |        (it failed before any release could escape)
                   |   \\------ abandon() by the job ----> [abandoned]   charged
                   |            (it failed after a release could have escaped)
                   \\---------- (the process died: the row stays reserved; `show`
                                reports it abandoned when its process is gone)

        [reserved] or [abandoned] --- release by an owner (with a reason) ---> [released]

- *Charged* states count against the dataset: ``reserved``, ``committed``, ``abandoned``.
  A run that crashed, was killed, or lost its connection stays charged (fail closed): only
  the run itself, before any output, or an owner, explicitly, can lift a charge.
- ``commit()`` always succeeds on a run that is not committed yet, whatever its state: the
  outputs exist, so the spend is recorded (and charged again if an owner had released it).
  It charges the larger of the reservation and what the ledger entries spent.
- ``committed`` is final: an overwrite of a run's output location is a new run, recorded
  with the ids of the runs it overwrote; their spend stays spent.
- Runs are charged to the renewal period in which they reserved (:mod:`beam_dp.ledger.periods`).

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
    output locations, config digests, hosts and process ids. Never a record, never a
    data-dependent count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from beam_dp.accounting import Composition, LedgerEntry
from beam_dp.ledger._backend import Transaction
from beam_dp.ledger._records import (
    Period,
    RunRecord,
    amounts_json,
    dataset_status,
    process_gone,
    shown_time,
    timestamp,
)
from beam_dp.ledger._tables import Tables
from beam_dp.ledger.errors import BudgetExceededError, LedgerError
from beam_dp.ledger.plan import Cost, Plan, RunInfo, cost_of_entries

if TYPE_CHECKING:
    from beam_dp.ledger.store import Ledger

__all__ = ["Reservation", "close", "commit", "release_run", "reserve"]

_T = TypeVar("_T")


class Reservation:
    """A run's reservation: commit it when its outputs are written, or give it back.

    Obtained from :meth:`Ledger.reserve`. See the state machine in :mod:`beam_dp.ledger._runs`.
    """

    def __init__(self, ledger: Ledger, run_id: int, dataset: str, plan: Plan, period: Period):
        self._ledger = ledger
        self._run_id = run_id
        self._dataset = dataset
        self._plan = plan
        self._period = period

    @property
    def run_id(self) -> int:
        return self._run_id

    @property
    def dataset(self) -> str:
        return self._dataset

    @property
    def cost(self) -> Cost:
        return self._plan.cost

    def commit(
        self,
        entries: Iterable[LedgerEntry] = (),
        output_location: str | None = None,
        *,
        overwrite: bool = False,
    ) -> RunRecord:
        """Record the run's releases: the reservation becomes a committed charge.

        Args:
            entries: The ledger entries of the releases (``PrivacyBudget.ledger``).
            output_location: Where the outputs were written (public).
            overwrite: Whether the run was allowed to overwrite an earlier release there.

        Returns:
            The committed run; ``overwrites`` lists earlier committed runs that wrote to
            the same location (their spend stays spent).
        """
        listed = list(entries)
        return self._with_ledger(
            lambda tables, now: commit(
                tables, now, self._run_id, listed, output_location, overwrite
            )
        )

    def release(self) -> None:
        """Give the reservation back: only for a run that failed before any release could
        escape (nothing was written). No-op if it was already returned or released."""
        self._with_ledger(lambda tables, now: close(tables, now, self._run_id, "returned", ""))

    def abandon(self, reason: str) -> None:
        """Mark a failed run whose outputs may have escaped: it stays charged."""
        self._with_ledger(lambda tables, now: close(tables, now, self._run_id, "abandoned", reason))

    def _with_ledger(self, action: Callable[[Tables, datetime], _T]) -> _T:
        """Run ``action`` on the reserving connection, or on a fresh one if it was closed.

        A job may close its ledger while its pipeline runs (hours, for a large export): the
        commit then opens a new, short connection instead of relying on an idle one.
        """
        if not self._ledger.closed:
            return action(self._ledger._tables, self._ledger._now())
        with self._ledger.reopen() as ledger:
            return action(ledger._tables, ledger._now())

    def describe(self) -> dict[str, Any]:
        """Public facts for the ``budget`` section of ``release.json`` (URL redacted)."""
        amounts = amounts_json(self._plan.cost, self._plan.composition)
        return {
            "ledger": self._ledger.url,
            "dataset": self._dataset,
            "run": self._run_id,
            "composition": self._plan.composition,
            "reserved": {**amounts["float"], "exact": amounts["exact"]},
            "period_start": timestamp(self._period.starts_at),
            "period_end": None if self._period.ends_at is None else timestamp(self._period.ends_at),
        }

    def __repr__(self) -> str:
        return (
            f"Reservation(run={self._run_id}, dataset={self._dataset!r}, "
            f"{self._plan.cost.describe(self._plan.composition)})"
        )


def reserve(
    tables: Tables, now: datetime, dataset: str, plan: Plan, run: RunInfo
) -> tuple[int, Period]:
    """Reserve ``plan`` for a new run of ``dataset`` (:meth:`Ledger.reserve
    <beam_dp.ledger.Ledger.reserve>`); return the run's id and the period it is charged to.

    The check of what is left and the insert are one step under the dataset's lock (see the
    concurrency argument above); a refusal reserves nothing.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"'plan' must be a Plan; received {type(plan).__name__}")
    if not isinstance(run, RunInfo):
        raise TypeError(f"'run' must be a RunInfo; received {type(run).__name__}")
    with tables.backend.write() as transaction:
        data = tables.dataset_row(transaction, dataset, lock=True)
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
        run_id = transaction.insert(
            "INSERT INTO beam_dp_runs (dataset, period_id, state, reserved_at, closed_at, "
            "epsilon, delta, rho, job, config_digest, statistics, host, pid, details, "
            "output_location, overwrite, overwrites, entries, note) "
            "VALUES (?, ?, 'reserved', ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, '[]', "
            "'[]', '')",
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
                json.dumps(dict(run.details), sort_keys=True, default=str),
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


def commit(
    tables: Tables,
    now: datetime,
    run_id: int,
    entries: list[LedgerEntry],
    output_location: str | None,
    overwrite: bool,
) -> RunRecord:
    for entry in entries:
        if not isinstance(entry, LedgerEntry):
            raise TypeError(f"'entries' must be LedgerEntry; received {type(entry).__name__}")
    if output_location is not None and not isinstance(output_location, str):
        raise TypeError("'output_location' must be a string")
    with tables.backend.write() as transaction:
        record, kind = _locked_run(tables, transaction, run_id)
        if record.state == "committed":
            raise LedgerError(f"run {run_id} is already committed")
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
                output_location,
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
    now: datetime,
    run_id: int,
    state: Literal["returned", "abandoned"],
    reason: str,
) -> None:
    with tables.backend.write() as transaction:
        record, _kind = _locked_run(tables, transaction, run_id)
        if state == "returned":
            if record.state in ("returned", "released"):
                return
            if record.state != "reserved":
                raise LedgerError(
                    f"run {run_id} is {record.state}: only a reserved run can be returned "
                    "(its outputs may have been written)"
                )
        elif record.state != "reserved":
            if record.state == "abandoned":
                return
            raise LedgerError(f"run {run_id} is {record.state}; it cannot be abandoned")
        transaction.execute(
            "UPDATE beam_dp_runs SET state = ?, closed_at = ?, note = ? WHERE id = ?",
            (state, timestamp(now), reason, run_id),
        )


def release_run(tables: Tables, now: datetime, run_id: int, *, reason: str) -> RunRecord:
    """An owner lifts a run's charge (:meth:`Ledger.release_run
    <beam_dp.ledger.Ledger.release_run>`): never a committed run's, nor a run's whose process
    still runs on this host (it may still write outputs)."""
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
        if record.state == "reserved" and process_gone(record.host, record.pid) is False:
            raise LedgerError(
                f"run {run_id} is still running on this host (pid {record.pid}); stop it "
                "first (it may still write outputs)"
            )
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
