"""The ledger: datasets with a total privacy budget, and the runs that spend it.

:class:`Ledger` is one connection to a ledger; what it does is written once, by concern:

- :mod:`beam_dp.ledger._runs`: the state machine of a run (reserve, start, commit, return,
  abandon, an owner's release) and the concurrency argument that keeps two jobs from spending
  what only one may; a job drives it through a :class:`Reservation` (here, with the
  connection it uses).
- :mod:`beam_dp.ledger._datasets`: an owner creates a dataset and changes its renewal.
- :mod:`beam_dp.ledger._tables`: reading checked rows (a dataset, its current period, what
  its runs charge) and the queries (status, history).
- :mod:`beam_dp.ledger._records`: the records read back (:class:`RunRecord`,
  :class:`DatasetStatus`, ...).
- :mod:`beam_dp.ledger._schema`: the tables, creating them, and checking a ledger's format.
- :mod:`beam_dp.ledger._backend` with ``_sqlite`` and ``_postgres``: the storage adapters.

Privacy:
    The ledger stores public parameters only: dataset names, totals, amounts, the names of
    statistics, the ledger entries of releases (mechanism, ε, Δ, bounds, accuracy bounds),
    output locations, config digests, hosts and process ids. Never a record, never a
    data-dependent count. URLs are shown with their password redacted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from beam_dp.accounting import LedgerEntry
from beam_dp.ledger import _datasets, _runs
from beam_dp.ledger._backend import Backend
from beam_dp.ledger._records import (
    DatasetStatus,
    Event,
    Period,
    RunRecord,
    RunState,
    amounts_json,
    timestamp,
)
from beam_dp.ledger._runs import COMMIT_ATTEMPTS
from beam_dp.ledger._schema import check_schema
from beam_dp.ledger._tables import Tables, check_dataset_name
from beam_dp.ledger.errors import LedgerError, LedgerUnavailableError
from beam_dp.ledger.plan import Cost, Plan, RunInfo
from beam_dp.ledger.urls import LedgerURL

__all__ = [
    "DatasetStatus",
    "Event",
    "Ledger",
    "Period",
    "Reservation",
    "RunRecord",
    "RunState",
    "check_dataset_name",
]


_T = TypeVar("_T")


class Reservation:
    """A run's reservation: start it before reading data, commit it before writing outputs.

    Obtained from :meth:`Ledger.reserve`; each method is a transition of the state machine of
    :mod:`beam_dp.ledger._runs`.
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

    @property
    def plan(self) -> Plan:
        return self._plan

    def status(self) -> DatasetStatus:
        """The dataset's budget now (a fresh connection if the reserving one was closed)."""
        return self._with_ledger(lambda tables: tables.status(self._dataset))

    def start(self) -> None:
        """Record that the run is about to read data: from now on its charge stays.

        Call it after the last check that may fail without reading data, and before the
        pipeline runs. If it raises, no data may be read (the run can still be returned).
        """
        self._with_ledger(lambda tables: _runs.start(tables, self._run_id))

    def commit(
        self,
        entries: Iterable[LedgerEntry] = (),
        output_location: str | None = None,
        *,
        overwrite: bool = False,
        attempts: int = COMMIT_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RunRecord:
        """Record the run's releases: the reservation becomes a committed charge.

        A ledger that is locked or unreachable (:class:`LedgerUnavailableError`) is tried
        again, ``attempts`` times in all, with pauses of 1, 2, 4, ... seconds; any other
        refusal is final. If every attempt fails the run stays charged as it was.

        Args:
            entries: The ledger entries of the releases (``PrivacyBudget.ledger``).
            output_location: Where the outputs will be written (public).
            overwrite: Whether the run was allowed to overwrite an earlier release there.
            attempts: How many times to try (>= 1).
            sleep: How to pause between attempts (tests pass a fake).

        Returns:
            The committed run; ``overwrites`` lists earlier committed runs that wrote to
            the same location (their spend stays spent).
        """
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"'attempts' must be an integer >= 1; received {attempts!r}")
        listed = list(entries)
        for attempt in range(attempts):
            retry = attempt > 0

            def action(tables: Tables, retry: bool = retry) -> RunRecord:
                return _runs.commit(
                    tables, self._run_id, listed, output_location, overwrite, retry=retry
                )

            try:
                return self._with_ledger(action, fresh=retry)
            except LedgerUnavailableError:
                if attempt == attempts - 1:
                    raise
                sleep(float(2**attempt))
        raise AssertionError("unreachable")

    def release(self) -> None:
        """Give the reservation back: only for a run that never started reading data. No-op
        if it was already returned or released."""
        self._with_ledger(lambda tables: _runs.close(tables, self._run_id, "returned", ""))

    def abandon(self, reason: str) -> None:
        """Mark a failed run that started reading data: it stays charged."""
        self._with_ledger(lambda tables: _runs.close(tables, self._run_id, "abandoned", reason))

    def _with_ledger(self, action: Callable[[Tables], _T], *, fresh: bool = False) -> _T:
        """Run ``action`` on the reserving connection, or on a fresh one if it was closed
        (or ``fresh``: a retry after a lost connection).

        A job may close its ledger while its pipeline runs (hours, for a large export): the
        commit then opens a new, short connection instead of relying on an idle one.
        """
        if not self._ledger.closed and not fresh:
            return action(self._ledger._tables)
        with self._ledger.reopen() as ledger:
            return action(ledger._tables)

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


class Ledger:
    """A persistent privacy-budget ledger (open one with :func:`beam_dp.ledger.open_ledger`).

    Not safe to share between threads; open one per process (or thread).
    """

    def __init__(
        self,
        backend: Backend,
        url: LedgerURL,
        *,
        create: bool,
        clock: Callable[[], datetime] | None = None,
        reopen: Callable[[], Ledger] | None = None,
    ) -> None:
        self._backend = backend
        self._url = url
        self._tables = Tables(backend, url, clock)
        self._reopen = reopen
        self._closed = False
        created = clock or (lambda: datetime.now(UTC))
        try:
            check_schema(backend, url, create=create, now=lambda: timestamp(created()))
        except BaseException:
            backend.close()
            raise

    # ------------------------------------------------------------------ basics

    @property
    def url(self) -> str:
        """The ledger's URL with any password redacted."""
        return self._url.redacted

    def close(self) -> None:
        """Close the connection (a :class:`Reservation` reopens one when it needs it)."""
        self._closed = True
        self._backend.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def reopen(self) -> Ledger:
        """A new connection to the same ledger (same URL, timeout and clock)."""
        if self._reopen is None:
            raise LedgerError(f"ledger {self._url} cannot be reopened")
        return self._reopen()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self._url.redacted!r})"

    # ------------------------------------------------------------------ datasets (owners)

    def datasets(self) -> list[str]:
        """Names of every dataset, sorted."""
        return self._tables.datasets()

    def create_dataset(
        self,
        name: str,
        *,
        epsilon: object = None,
        delta: object = 0,
        rho: object = None,
        composition: str = "basic",
        relation: str = "add_remove",
        renewal: str = "none",
        note: str = "",
        inputs: Sequence[str] = (),
    ) -> DatasetStatus:
        """Create a dataset (a population of privacy units) with its allowance and the export
        it protects.

        Args:
            name: The dataset's name, e.g. ``"survey_users"``.
            epsilon: Total ε (per period when renewed). For ``"zcdp"``, the ε whose largest
                ρ at ``delta`` is the allowance, if ``rho`` is not given.
            delta: Total δ (basic); for ``"zcdp"``, the δ at which ρ is reported (> 0).
            rho: Total ρ for a ``"zcdp"`` dataset.
            composition: ``"basic"`` (ε and δ add across runs) or ``"zcdp"`` (ρ adds).
            relation: The neighbouring relation every run must declare.
            renewal: A rule from :data:`beam_dp.ledger.RENEWALS`.
            note: Free public text (who owns the dataset, what population it is).
            inputs: The locations of the export it protects (required): path prefixes or
                globs, local or ``scheme://``; every file a run reads must lie inside them and
                inside no other dataset's (:mod:`beam_dp.ledger.inputs`).

        Raises:
            LedgerError: for a bad parameter, an existing name, or inputs that may overlap
                another dataset's (nothing is changed).
        """
        _datasets.create_dataset(
            self._tables,
            name,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            composition=composition,
            relation=relation,
            renewal=renewal,
            note=note,
            inputs=inputs,
        )
        return self.status(name)

    def protect(self, name: str, inputs: Sequence[str]) -> DatasetStatus:
        """Register more locations of the export a dataset protects (never fewer).

        Raises:
            LedgerError: for an unknown dataset, or a location that may overlap another
                dataset's registration (nothing is changed).
        """
        _datasets.protect(self._tables, name, inputs)
        return self.status(name)

    def set_renewal(
        self,
        name: str,
        renewal: str,
        *,
        epsilon: object = None,
        delta: object = None,
        rho: object = None,
    ) -> DatasetStatus:
        """Change a dataset's renewal rule, and optionally its allowance, for later periods.

        The current period keeps its allowance and its charges (nothing is refunded or
        topped up). If the current period is open-ended (no renewal so far), it now ends
        at the end of the calendar period of the new rule that contains this moment.

        Raises:
            LedgerError: for an unknown dataset or a bad parameter (nothing is changed).
        """
        _datasets.set_renewal(self._tables, name, renewal, epsilon=epsilon, delta=delta, rho=rho)
        return self.status(name)

    # ------------------------------------------------------------------ queries

    def status(self, name: str) -> DatasetStatus:
        """The dataset's budget now (read-only)."""
        return self._tables.status(name)

    def run(self, run_id: int) -> RunRecord:
        """One run by id."""
        return self._tables.run(run_id)

    def history(self, name: str) -> tuple[list[RunRecord], list[Event]]:
        """Every run of a dataset and every owner's action on it, oldest first."""
        return self._tables.history(name)

    # ------------------------------------------------------------------ runs (the state machine)

    def reserve(self, dataset: str, plan: Plan, run: RunInfo) -> Reservation:
        """Reserve a run's whole planned spend, in one transaction, before it reads data.

        ``run.inputs`` must list the files the run reads: each must lie inside what the
        dataset protects and inside no other dataset's registration. The period is the one
        containing the ledger's time (the server's clock on PostgreSQL).

        Raises:
            BudgetExceededError: if the dataset cannot afford the plan in its current period
                (the message gives what is left); nothing is reserved.
            LedgerError: for an unknown dataset, a composition or relation that differs from
                the dataset's, an input file outside the dataset's registration, a clock
                earlier than the ledger's latest record, or a ledger that cannot be used.
        """
        run_id, period = _runs.reserve(self._tables, dataset, plan, run)
        return Reservation(self, run_id, dataset, plan, period)

    def resume(self, run_id: int) -> Reservation:
        """The reservation of an existing run that is still reserved (a job's own process
        picking up a run it reserved earlier: a streaming job's window, after a restart).

        Raises:
            LedgerError: for an unknown run, or one that is no longer reserved.
        """
        record = self._tables.run(run_id)
        if record.state != "reserved":
            raise LedgerError(f"run {run_id} is {record.state}: only a reserved run resumes")
        plan = Plan(
            self.status(record.dataset).composition,
            self.status(record.dataset).relation,
            record.cost,
            record.statistics,
        )
        period = Period(None, record.period_start, None, record.cost)
        return Reservation(self, record.id, record.dataset, plan, period)

    def release_run(self, run_id: int, *, reason: str) -> RunRecord:
        """An owner lifts the charge of a reserved or abandoned run (recorded with a reason).

        Only a run that never started reading data can be released (the job died between its
        reservation and its first read); a run that may have published is never refunded.

        Raises:
            LedgerError: if the run started reading data, was abandoned or committed (its spend
                stays spent), is already returned or released, or still runs on this host.
        """
        return _runs.release_run(self._tables, run_id, reason=reason)
