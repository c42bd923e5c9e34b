"""The ledger's tables as one connection reads them: checked rows become records.

:class:`Tables` holds the reads every operation shares (a dataset's row, its current period,
what the period's runs charge, runs and events) and the read-only queries a job or an owner
asks (:meth:`Tables.status`, :meth:`Tables.history`). Each takes the open transaction of its
caller: a change (:mod:`._runs`, :mod:`._datasets`) reads the dataset's row first, with
``lock=True``, and everything it reads after that sees the state the lock protects (see
:mod:`._backend`). A row that does not parse stops the operation as a damaged ledger.

Periods are materialised lazily: the first write after a period ended inserts the next one
(:meth:`Tables.current_period`); a read computes it without writing.

Time comes from the ledger, not from the job (:meth:`Tables.time`): on PostgreSQL the server's
``now()`` in the transaction, so a client whose clock is set ahead cannot open the next renewal
period early; on SQLite (one host) the host's clock, which is trusted, but never one earlier
than the latest time the ledger recorded (a clock set back is refused).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from beam_dp._validation import check_relation
from beam_dp.accounting import Composition
from beam_dp.ledger._amounts import parse_stored
from beam_dp.ledger._backend import Backend, Transaction
from beam_dp.ledger._records import (
    STATES,
    DatasetStatus,
    Event,
    Period,
    RunRecord,
    dataset_status,
    parse_timestamp,
    timestamp,
)
from beam_dp.ledger._schema import damaged
from beam_dp.ledger.errors import LedgerCorruptError, LedgerError
from beam_dp.ledger.periods import Renewal, check_renewal, period_containing
from beam_dp.ledger.plan import Cost, check_composition
from beam_dp.ledger.urls import LedgerURL

__all__ = ["AMOUNT_KEYS", "Tables", "allowance", "check_dataset_name"]

AMOUNT_KEYS = ("epsilon", "delta", "rho")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_RUN_COLUMNS = (
    "r.id, r.dataset, p.starts_at, r.state, r.reserved_at, r.closed_at, r.epsilon, r.delta, "
    "r.rho, r.job, r.config_digest, r.statistics, r.host, r.pid, r.details, "
    "r.output_location, r.overwrite, r.overwrites, r.entries, r.note, r.started_at"
)
_RUNS_FROM = "beam_dp_runs r JOIN beam_dp_periods p ON p.id = r.period_id"


def check_dataset_name(name: object) -> str:
    """Return ``name`` if it is a dataset name (letters, digits, ``_.:-``, at most 128)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise LedgerError(
            "'dataset' must be 1 to 128 letters, digits or '_', '.', ':', '-', starting with a "
            f"letter or digit; received {name!r}"
        )
    return name


def allowance(composition: Composition, amounts: Mapping[str, Fraction]) -> Cost:
    """The coordinates of ``amounts`` a dataset of ``composition`` is charged in."""
    if composition == "zcdp":
        return Cost(rho=amounts["rho"])
    return Cost(epsilon=amounts["epsilon"], delta=amounts["delta"])


class Tables:
    """Reads (and the period and event rows every change writes) over one connection."""

    def __init__(
        self, backend: Backend, url: LedgerURL, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.backend = backend
        self.url = url
        self._clock = clock

    def time(self, transaction: Transaction, *, forward_of: str | None = None) -> datetime:
        """The ledger's time now: a test's clock if one was given, else the server's (on
        PostgreSQL) or this host's (on SQLite), in UTC. Read it after the dataset's lock.

        With ``forward_of`` a dataset's name (every change that charges or creates), a time
        earlier than the latest one the ledger recorded for that dataset is refused: on
        SQLite the host's clock is trusted, and this keeps a clock set back from reopening a
        renewal period that has ended. (Per dataset: its changes are serialised by its lock,
        so their times are in order whatever other datasets do meanwhile.)
        """
        source = "a test's clock"
        if self._clock is not None:
            now = self._clock()
            if now.tzinfo is None:
                raise ValueError("the ledger's clock must return timezone-aware datetimes")
        else:
            server = self.backend.server_time(transaction)
            source = "this host's clock" if server is None else "the database server's clock"
            now = datetime.now(UTC) if server is None else server
        now = now.astimezone(UTC)
        if forward_of is not None:
            row = transaction.one(
                "SELECT max(t) FROM ("
                " SELECT max(reserved_at) AS t FROM beam_dp_runs WHERE dataset = ?"
                " UNION ALL SELECT max(closed_at) FROM beam_dp_runs WHERE dataset = ?"
                " UNION ALL SELECT max(started_at) FROM beam_dp_runs WHERE dataset = ?"
                " UNION ALL SELECT max(created_at) FROM beam_dp_datasets WHERE name = ?"
                " UNION ALL SELECT max(at) FROM beam_dp_events WHERE dataset = ?) AS recorded",
                (forward_of,) * 5,
            )
            latest = None if row is None or row[0] is None else str(row[0])
            if latest is not None and timestamp(now) < latest:
                raise LedgerError(
                    f"{source} reads {timestamp(now)}, earlier than the latest time ledger "
                    f"{self.url} recorded for dataset {forward_of!r} ({latest}); the ledger "
                    "takes its time from that clock: fix it before running any job (nothing "
                    "was changed)"
                )
        return now

    def corrupt(self, what: str) -> LedgerCorruptError:
        return damaged(self.url, what)

    def datasets(self) -> list[str]:
        """Names of every dataset, sorted."""
        with self.backend.read() as transaction:
            rows = transaction.all("SELECT name FROM beam_dp_datasets ORDER BY name")
        return [str(row[0]) for row in rows]

    def dataset_row(self, transaction: Transaction, name: str, *, lock: bool) -> dict[str, Any]:
        check_dataset_name(name)
        row = transaction.one(
            "SELECT name, composition, relation, epsilon, delta, rho, renewal, created_at, note, "
            "inputs FROM beam_dp_datasets WHERE name = ?"
            + (self.backend.lock_clause if lock else ""),
            (name,),
        )
        if row is None:
            names = [str(r[0]) for r in transaction.all("SELECT name FROM beam_dp_datasets")]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise LedgerError(
                f"ledger {self.url} has no dataset {name!r}{hint} (known: {sorted(names)}; an "
                "owner creates one with: python -m pipelines.budget create)"
            )
        keys = ("name", "composition", "relation", "epsilon", "delta", "rho", "renewal")
        data = dict(zip(keys, row[:7], strict=True))
        # Each stored field is checked under its own name; the error names the dataset and the
        # field, never the stored text (the checks' own messages may quote it).
        field = ""
        try:
            field = "composition"
            data["composition"] = check_composition(data["composition"])
            field = "renewal"
            data["renewal"] = check_renewal(data["renewal"])
            field = "relation"
            check_relation(data["relation"])
            for key in ("epsilon", "delta", "rho"):
                field = key
                data[key] = parse_stored(data[key], key)
            field = "created_at"
            data["created_at"] = parse_timestamp(row[7], field)
        except ValueError:
            raise self.corrupt(f"dataset {name!r}: its stored {field} is not valid") from None
        data["note"] = str(row[8])
        data["inputs"] = self._inputs(row[9], name)
        return data

    def _inputs(self, stored: object, name: str) -> tuple[str, ...]:
        try:
            inputs = json.loads(str(stored))
            if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
                raise ValueError
        except ValueError:
            raise self.corrupt(f"dataset {name!r} inputs cannot be read") from None
        return tuple(inputs)

    def registrations(self, transaction: Transaction) -> dict[str, tuple[str, ...]]:
        """What every dataset protects (:mod:`beam_dp.ledger.inputs`), by dataset name."""
        return {
            str(name): self._inputs(stored, str(name))
            for name, stored in transaction.all("SELECT name, inputs FROM beam_dp_datasets")
        }

    def add_event(
        self,
        transaction: Transaction,
        dataset: str,
        at: datetime,
        action: str,
        detail: Mapping[str, Any],
    ) -> None:
        transaction.execute(
            "INSERT INTO beam_dp_events (dataset, at, action, detail) VALUES (?, ?, ?, ?)",
            (dataset, timestamp(at), action, json.dumps(detail, sort_keys=True)),
        )

    def current_period(
        self,
        transaction: Transaction,
        data: Mapping[str, Any],
        now: datetime,
        *,
        materialise: bool,
    ) -> Period:
        """The period containing ``now``; a new one starts when the last has ended."""
        name = data["name"]
        row = transaction.one(
            "SELECT id, starts_at, ends_at, epsilon, delta, rho FROM beam_dp_periods "
            "WHERE dataset = ? ORDER BY starts_at DESC LIMIT 1",
            (name,),
        )
        if row is None:
            raise self.corrupt(f"dataset {name!r} has no period")
        try:
            starts_at = parse_timestamp(row[1], "starts_at")
            ends_at = None if row[2] is None else parse_timestamp(row[2], "ends_at")
            stored = {
                key: parse_stored(value, key)
                for key, value in zip(("epsilon", "delta", "rho"), row[3:6], strict=True)
            }
        except ValueError:  # the checks' messages may quote the stored text: not passed on
            raise self.corrupt(
                f"dataset {name!r}: a stored period (its times or amounts) is not valid"
            ) from None
        if ends_at is None or now < ends_at:
            return Period(int(row[0]), starts_at, ends_at, allowance(data["composition"], stored))
        rule: Renewal = data["renewal"]
        start, end = period_containing(rule, now)
        start = max(start, ends_at)  # periods never overlap, whatever the rule was before
        if rule == "none":
            start, end = ends_at, None
        renewed = allowance(data["composition"], data)
        period_id: int | None = None
        if materialise:
            period_id = transaction.insert(
                "INSERT INTO beam_dp_periods (dataset, starts_at, ends_at, epsilon, delta, rho) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    timestamp(start),
                    None if end is None else timestamp(end),
                    *(str(data[key]) for key in ("epsilon", "delta", "rho")),
                ),
            )
        return Period(period_id, start, end, renewed)

    def period_charges(self, transaction: Transaction, period: Period) -> tuple[Cost, Cost]:
        """(committed, reserved-or-abandoned) of a period, exactly."""
        if period.id is None:
            return Cost(), Cost()
        committed = Cost()
        held = Cost()
        rows = transaction.all(
            "SELECT state, epsilon, delta, rho FROM beam_dp_runs "
            "WHERE period_id = ? AND state IN ('reserved', 'committed', 'abandoned')",
            (period.id,),
        )
        for state, *amounts in rows:
            cost = self.stored_cost(amounts, "a run's amount")
            if state == "committed":
                committed += cost
            else:
                held += cost
        return committed, held

    def stored_cost(self, amounts: list[Any] | tuple[Any, ...], what: str) -> Cost:
        try:
            epsilon, delta, rho = (parse_stored(value, what) for value in amounts)
        except ValueError:  # named by field and rule, never the check's text
            raise self.corrupt(f"{what} is not a valid stored amount") from None
        return Cost(epsilon, delta, rho)

    def status(self, name: str) -> DatasetStatus:
        """The dataset's budget now (read-only)."""
        with self.backend.read() as transaction:
            now = self.time(transaction)
            data = self.dataset_row(transaction, name, lock=False)
            period = self.current_period(transaction, data, now, materialise=False)
            committed, held = self.period_charges(transaction, period)
            all_committed = Cost()
            for amounts in transaction.all(
                "SELECT epsilon, delta, rho FROM beam_dp_runs WHERE dataset = ? "
                "AND state = 'committed'",
                (name,),
            ):
                all_committed += self.stored_cost(amounts, "a run's amount")
            count_row = transaction.one(
                "SELECT count(*) FROM beam_dp_periods WHERE dataset = ?", (name,)
            )
            periods = int(count_row[0]) if count_row else 0
            if period.id is None:
                periods += 1
            open_runs = self.runs(
                transaction, "r.dataset = ? AND r.state IN ('reserved', 'abandoned')", (name,)
            )
        return dataset_status(
            name,
            data,
            period,
            committed,
            held,
            committed_all_periods=all_committed,
            periods=periods,
            open_runs=tuple(open_runs),
        )

    def runs(
        self, transaction: Transaction, where: str, params: tuple[Any, ...]
    ) -> list[RunRecord]:
        rows = transaction.all(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS_FROM} WHERE {where} ORDER BY r.id", params
        )
        return [self.run_record(row) for row in rows]

    def run_record(self, row: tuple[Any, ...]) -> RunRecord:
        what = f"run {row[0]!r}"
        try:
            state = row[3]
            if state not in STATES:
                raise ValueError(f"{what} has an unknown state")
            return RunRecord(
                id=int(row[0]),
                dataset=str(row[1]),
                period_start=parse_timestamp(row[2], what),
                state=state,
                reserved_at=parse_timestamp(row[4], what),
                closed_at=None if row[5] is None else parse_timestamp(row[5], what),
                cost=Cost(*(parse_stored(value, what) for value in row[6:9])),
                job=str(row[9]),
                config_digest=str(row[10]),
                statistics=tuple(str(name) for name in json.loads(row[11])),
                host=str(row[12]),
                pid=int(row[13]),
                details=json.loads(row[14]),
                output_location=None if row[15] is None else str(row[15]),
                overwrite=bool(row[16]),
                overwrites=tuple(int(run) for run in json.loads(row[17])),
                entries=tuple(json.loads(row[18])),
                note=str(row[19]),
                started_at=None if row[20] is None else parse_timestamp(row[20], what),
            )
        except (ValueError, TypeError) as error:
            raise self.corrupt(f"{what} cannot be read ({type(error).__name__})") from None

    def run(self, run_id: int) -> RunRecord:
        """One run by id."""
        with self.backend.read() as transaction:
            runs = self.runs(transaction, "r.id = ?", (int(run_id),))
        if not runs:
            raise LedgerError(f"ledger {self.url} has no run {run_id}")
        return runs[0]

    def history(self, name: str) -> tuple[list[RunRecord], list[Event]]:
        """Every run of a dataset and every owner's action on it, oldest first."""
        with self.backend.read() as transaction:
            self.dataset_row(transaction, name, lock=False)
            runs = self.runs(transaction, "r.dataset = ?", (name,))
            rows = transaction.all(
                "SELECT id, dataset, at, action, detail FROM beam_dp_events WHERE dataset = ? "
                "ORDER BY id",
                (name,),
            )
        events = []
        for row in rows:
            try:
                events.append(
                    Event(
                        int(row[0]),
                        str(row[1]),
                        parse_timestamp(row[2], "an event"),
                        str(row[3]),
                        json.loads(row[4]),
                    )
                )
            except (ValueError, TypeError):
                raise self.corrupt(f"event {row[0]!r} cannot be read") from None
        return runs, events
