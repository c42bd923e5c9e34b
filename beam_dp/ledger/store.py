"""The ledger: datasets with a total privacy budget, and the runs that spend it.

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
- Runs are charged to the renewal period in which they reserved (:mod:`periods`).

Remaining budget = the period's allowance − committed − (reserved + abandoned), exactly.

Privacy:
    The ledger stores public parameters only: dataset names, totals, amounts, the names of
    statistics, the ledger entries of releases (mechanism, ε, Δ, bounds, accuracy bounds),
    output locations, config digests, hosts and process ids. Never a record, never a
    data-dependent count. URLs are shown with their password redacted.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal, TypeVar

from beam_dp._validation import check_relation
from beam_dp.accounting import Composition, LedgerEntry
from beam_dp.accounting.zcdp import (
    approx_dp_to_zcdp,
    ceil_float,
    zcdp_to_approx_dp,
)
from beam_dp.ledger._amounts import exact_amount, parse_stored, show_amount
from beam_dp.ledger._backend import (
    LEDGER_FORMAT,
    SCHEMA_VERSION,
    TABLES,
    Backend,
    Transaction,
)
from beam_dp.ledger.errors import (
    BudgetExceededError,
    LedgerCorruptError,
    LedgerError,
)
from beam_dp.ledger.periods import Renewal, check_renewal, period_containing, renewal_phrase
from beam_dp.ledger.plan import Cost, Plan, RunInfo, check_composition, cost_of_entries
from beam_dp.ledger.urls import LedgerURL

__all__ = [
    "DatasetStatus",
    "Event",
    "Ledger",
    "Period",
    "Reservation",
    "RunRecord",
    "RunState",
]

_T = TypeVar("_T")
RunState = Literal["reserved", "committed", "returned", "abandoned", "released"]
_STATES: tuple[RunState, ...] = ("reserved", "committed", "returned", "abandoned", "released")
_CHARGED = ("reserved", "committed", "abandoned")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_RUN_COLUMNS = (
    "r.id, r.dataset, p.starts_at, r.state, r.reserved_at, r.closed_at, r.epsilon, r.delta, "
    "r.rho, r.job, r.config_digest, r.statistics, r.host, r.pid, r.details, "
    "r.output_location, r.overwrite, r.overwrites, r.entries, r.note"
)
_RUNS_FROM = "beam_dp_runs r JOIN beam_dp_periods p ON p.id = r.period_id"


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_timestamp(text: object, what: str) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"{what} is not a timestamp")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"{what} is not a timestamp") from None


def _shown_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _process_gone(host: str, pid: int) -> bool | None:
    """True if ``pid`` is gone from this host, False if it runs, None if not on this host."""
    if host != socket.gethostname():
        return None
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    except OSError:
        return None
    return False


@dataclass(frozen=True)
class Period:
    """A renewal period: ``[starts_at, ends_at)`` with its allowance."""

    id: int | None
    starts_at: datetime
    ends_at: datetime | None
    allowance: Cost

    def describe(self) -> str:
        if self.ends_at is None:
            return f"since {_shown_time(self.starts_at)}"
        return f"{_shown_time(self.starts_at)} to {_shown_time(self.ends_at)}"


@dataclass(frozen=True)
class RunRecord:
    """One reservation and what became of it (public facts only)."""

    id: int
    dataset: str
    period_start: datetime
    state: RunState
    reserved_at: datetime
    closed_at: datetime | None
    cost: Cost
    job: str
    config_digest: str
    statistics: tuple[str, ...]
    host: str
    pid: int
    details: Mapping[str, Any]
    output_location: str | None
    overwrite: bool
    overwrites: tuple[int, ...]
    entries: tuple[Mapping[str, Any], ...]
    note: str

    @property
    def charged(self) -> bool:
        """Whether the run counts against its dataset."""
        return self.state in _CHARGED

    @property
    def process_gone(self) -> bool | None:
        """For a ``reserved`` run: whether its process is gone (None: another host)."""
        if self.state != "reserved":
            return None
        return _process_gone(self.host, self.pid)

    @property
    def shown_state(self) -> str:
        """The state, with ``abandoned?`` for a reserved run whose process is gone."""
        if self.state == "reserved" and self.process_gone:
            return "reserved (abandoned: process gone)"
        return self.state

    def to_json(self, composition: Composition) -> dict[str, Any]:
        """Plain JSON (amounts as floats, and exact under ``exact``)."""
        amounts = _amounts_json(self.cost, composition)
        return {
            "run": self.id,
            "dataset": self.dataset,
            "state": self.state,
            "shown_state": self.shown_state,
            "charged": self.charged,
            "period_start": _timestamp(self.period_start),
            "reserved_at": _timestamp(self.reserved_at),
            "closed_at": None if self.closed_at is None else _timestamp(self.closed_at),
            **amounts["float"],
            "exact": amounts["exact"],
            "job": self.job,
            "config_digest": self.config_digest,
            "statistics": list(self.statistics),
            "host": self.host,
            "pid": self.pid,
            "details": dict(self.details),
            "output_location": self.output_location,
            "overwrite": self.overwrite,
            "overwrites": list(self.overwrites),
            "entries": [dict(entry) for entry in self.entries],
            "note": self.note,
        }


def _amounts_json(cost: Cost, composition: Composition) -> dict[str, dict[str, Any]]:
    if composition == "zcdp":
        return {"float": {"rho": float(cost.rho)}, "exact": {"rho": str(cost.rho)}}
    return {
        "float": {"epsilon": float(cost.epsilon), "delta": float(cost.delta)},
        "exact": {"epsilon": str(cost.epsilon), "delta": str(cost.delta)},
    }


@dataclass(frozen=True)
class Event:
    """An owner's action on a dataset: ``create``, ``renew`` or ``release``."""

    id: int
    dataset: str
    at: datetime
    action: str
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.id,
            "dataset": self.dataset,
            "at": _timestamp(self.at),
            "action": self.action,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True)
class DatasetStatus:
    """A dataset's budget in its current period.

    Attributes:
        name, composition, relation, renewal, note, created_at: As created.
        period: The current period and its allowance (``total``).
        conversion_delta: δ of the dataset: the total δ under basic composition; under zCDP
            the δ at which ρ is reported as (ε, δ).
        committed: What committed runs of this period spent.
        reserved: What runs in progress (reserved or abandoned) hold.
        remaining: total − committed − reserved, never below 0.
        committed_all_periods: What committed runs of every period spent (privacy loss
            composes across periods; renewal is a policy).
        periods: How many periods the dataset has had (the current one included).
        open_runs: Runs still reserved or abandoned, in any period.
    """

    name: str
    composition: Composition
    relation: str
    renewal: Renewal
    note: str
    created_at: datetime
    period: Period
    conversion_delta: Fraction
    committed: Cost
    reserved: Cost
    committed_all_periods: Cost
    periods: int
    open_runs: tuple[RunRecord, ...] = field(default=())

    @property
    def total(self) -> Cost:
        return self.period.allowance

    @property
    def remaining(self) -> Cost:
        return (self.total - self.committed - self.reserved).clamp()

    def epsilon_equivalent(self, cost: Cost) -> float | None:
        """Under zCDP, the ε (at ``conversion_delta``) that ``cost.rho`` guarantees."""
        if self.composition != "zcdp":
            return None
        return zcdp_to_approx_dp(ceil_float(cost.rho), float(self.conversion_delta))

    def describe_remaining(self) -> str:
        """One line: remaining of total, with what is committed and reserved."""
        c = self.composition
        text = (
            f"{self.remaining.describe(c)} left of {self.total.describe(c)} in the period "
            f"{self.period.describe()} ({self.committed.describe(c)} committed, "
            f"{self.reserved.describe(c)} reserved by runs in progress or abandoned)"
        )
        if c == "zcdp":
            left = self.epsilon_equivalent(self.total) or 0.0
            used = self.epsilon_equivalent(self.committed + self.reserved) or 0.0
            text += (
                f"; as (epsilon, delta={show_amount(self.conversion_delta)}): {used:.6g} of "
                f"{left:.6g} used"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: amounts as floats per coordinate, exact text under ``exact``."""
        coordinates = ("rho",) if self.composition == "zcdp" else ("epsilon", "delta")
        parts = {
            "total": self.total,
            "committed": self.committed,
            "reserved": self.reserved,
            "remaining": self.remaining,
        }
        amounts: dict[str, Any] = {}
        exact: dict[str, Any] = {}
        for coordinate in coordinates:
            values = {key: getattr(cost, coordinate) for key, cost in parts.items()}
            amounts[coordinate] = {key: float(value) for key, value in values.items()}
            exact[coordinate] = {key: str(value) for key, value in values.items()}
        result: dict[str, Any] = {
            "dataset": self.name,
            "composition": self.composition,
            "relation": self.relation,
            "renewal": self.renewal,
            "renews": renewal_phrase(self.renewal),
            "note": self.note,
            "created_at": _timestamp(self.created_at),
            "period": {
                "number": self.periods,
                "start": _timestamp(self.period.starts_at),
                "end": None if self.period.ends_at is None else _timestamp(self.period.ends_at),
            },
            **amounts,
            "exact": exact,
            "all_periods": {
                "committed": _amounts_json(self.committed_all_periods, self.composition)["float"],
                "periods": self.periods,
            },
            "open_runs": [run.to_json(self.composition) for run in self.open_runs],
        }
        if self.composition == "zcdp":
            result["delta"] = float(self.conversion_delta)
            result["epsilon_equivalent"] = {
                "delta": float(self.conversion_delta),
                "total": self.epsilon_equivalent(self.total),
                "committed": self.epsilon_equivalent(self.committed),
                "charged": self.epsilon_equivalent(self.committed + self.reserved),
                "all_periods_committed": self.epsilon_equivalent(self.committed_all_periods),
            }
        return result


def _dataset_status(
    name: str,
    data: dict[str, Any],
    period: Period,
    committed: Cost,
    held: Cost,
    *,
    committed_all_periods: Cost | None = None,
    periods: int = 0,
    open_runs: tuple[RunRecord, ...] = (),
) -> DatasetStatus:
    """A dataset's status from its checked row (``Ledger._dataset_row``) and its period."""
    return DatasetStatus(
        name=name,
        composition=data["composition"],
        relation=data["relation"],
        renewal=data["renewal"],
        note=data["note"],
        created_at=data["created_at"],
        period=period,
        conversion_delta=data["delta"],
        committed=committed,
        reserved=held,
        committed_all_periods=Cost() if committed_all_periods is None else committed_all_periods,
        periods=periods,
        open_runs=open_runs,
    )


def check_dataset_name(name: object) -> str:
    """Return ``name`` if it is a dataset name (letters, digits, ``_.:-``, at most 128)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise LedgerError(
            "'dataset' must be 1 to 128 letters, digits or '_', '.', ':', '-', starting with a "
            f"letter or digit; received {name!r}"
        )
    return name


class Reservation:
    """A run's reservation: commit it when its outputs are written, or give it back.

    Obtained from :meth:`Ledger.reserve`. See the state machine in the module docstring.
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
            lambda ledger: ledger._commit(self._run_id, listed, output_location, overwrite)
        )

    def release(self) -> None:
        """Give the reservation back: only for a run that failed before any release could
        escape (nothing was written). No-op if it was already returned or released."""
        self._with_ledger(lambda ledger: ledger._close(self._run_id, "returned", ""))

    def abandon(self, reason: str) -> None:
        """Mark a failed run whose outputs may have escaped: it stays charged."""
        self._with_ledger(lambda ledger: ledger._close(self._run_id, "abandoned", reason))

    def _with_ledger(self, action: Callable[[Ledger], _T]) -> _T:
        """Run ``action`` on the reserving connection, or on a fresh one if it was closed.

        A job may close its ledger while its pipeline runs (hours, for a large export): the
        commit then opens a new, short connection instead of relying on an idle one.
        """
        if not self._ledger.closed:
            return action(self._ledger)
        with self._ledger.reopen() as ledger:
            return action(ledger)

    def describe(self) -> dict[str, Any]:
        """Public facts for the ``budget`` section of ``release.json`` (URL redacted)."""
        amounts = _amounts_json(self._plan.cost, self._plan.composition)
        return {
            "ledger": self._ledger.url,
            "dataset": self._dataset,
            "run": self._run_id,
            "composition": self._plan.composition,
            "reserved": {**amounts["float"], "exact": amounts["exact"]},
            "period_start": _timestamp(self._period.starts_at),
            "period_end": None
            if self._period.ends_at is None
            else _timestamp(self._period.ends_at),
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
        clock: Callable[[], datetime],
        reopen: Callable[[], Ledger] | None = None,
    ) -> None:
        self._backend = backend
        self._url = url
        self._clock = clock
        self._reopen = reopen
        self._closed = False
        try:
            self._check_schema(create)
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

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the ledger's clock must return timezone-aware datetimes")
        return now.astimezone(UTC)

    def _corrupt(self, what: str) -> LedgerCorruptError:
        return LedgerCorruptError(
            f"ledger {self._url} is damaged: {what}; restore it from a backup before running "
            "any job"
        )

    def _check_schema(self, create: bool) -> None:
        with self._backend.write() if create else self._backend.read() as transaction:
            present = [t for t in TABLES if self._backend.has_table(transaction, t)]
            if not present and create:
                self._backend.prepare_schema(transaction)
                if not self._backend.has_table(transaction, "beam_dp_meta"):
                    for statement in self._backend.ddl():
                        transaction.execute(statement)
                    transaction.execute(
                        "INSERT INTO beam_dp_meta (key, value) VALUES (?, ?), (?, ?), (?, ?)",
                        (
                            "format",
                            LEDGER_FORMAT,
                            "schema_version",
                            SCHEMA_VERSION,
                            "created_at",
                            _timestamp(self._now()),
                        ),
                    )
                present = list(TABLES)
            if not present:
                raise LedgerError(
                    f"{self._url} holds no beam-dp ledger yet (create one and its dataset "
                    "with: python -m pipelines.budget create --ledger URL ...)"
                )
            if len(present) != len(TABLES):
                raise self._corrupt("some of its tables are missing")
            rows = dict(transaction.all("SELECT key, value FROM beam_dp_meta"))
        if rows.get("format") != LEDGER_FORMAT:
            raise self._corrupt("its tables do not carry the beam-dp ledger format")
        if rows.get("schema_version") != SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self._url} has schema version {rows.get('schema_version')!r}; this "
                f"beam-dp reads version {SCHEMA_VERSION!r} (upgrade beam-dp)"
            )

    # ------------------------------------------------------------------ datasets

    def datasets(self) -> list[str]:
        """Names of every dataset, sorted."""
        with self._backend.read() as transaction:
            rows = transaction.all("SELECT name FROM beam_dp_datasets ORDER BY name")
        return [str(row[0]) for row in rows]

    def _dataset_row(self, transaction: Transaction, name: str, *, lock: bool) -> dict[str, Any]:
        check_dataset_name(name)
        row = transaction.one(
            "SELECT name, composition, relation, epsilon, delta, rho, renewal, created_at, note "
            "FROM beam_dp_datasets WHERE name = ?" + (self._backend.lock_clause if lock else ""),
            (name,),
        )
        if row is None:
            names = [str(r[0]) for r in transaction.all("SELECT name FROM beam_dp_datasets")]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise LedgerError(
                f"ledger {self._url} has no dataset {name!r}{hint} (known: {sorted(names)}; an "
                "owner creates one with: python -m pipelines.budget create)"
            )
        keys = ("name", "composition", "relation", "epsilon", "delta", "rho", "renewal")
        data = dict(zip(keys, row[:7], strict=True))
        try:
            data["composition"] = check_composition(data["composition"])
            data["renewal"] = check_renewal(data["renewal"])
            check_relation(data["relation"])
            for key in ("epsilon", "delta", "rho"):
                data[key] = parse_stored(data[key], f"dataset {name!r} {key}")
            data["created_at"] = _parse_timestamp(row[7], f"dataset {name!r} created_at")
        except ValueError as error:
            raise self._corrupt(str(error)) from None
        data["note"] = str(row[8])
        return data

    @staticmethod
    def _allowance(composition: Composition, data: Mapping[str, Fraction]) -> Cost:
        if composition == "zcdp":
            return Cost(rho=data["rho"])
        return Cost(epsilon=data["epsilon"], delta=data["delta"])

    def _amounts(
        self, composition: Composition, epsilon: object, delta: object, rho: object
    ) -> dict[str, Fraction]:
        """Validated (ε, δ, ρ) of an allowance; ρ from (ε, δ) for zCDP when not given."""
        delta_f = exact_amount(delta, "delta")
        if not delta_f < 1:
            raise LedgerError(f"'delta' must be in [0, 1); received {delta!r}")
        if composition == "basic":
            if rho is not None:
                raise LedgerError("'rho' is for zCDP datasets; give epsilon (and delta)")
            if epsilon is None:
                raise LedgerError("a basic-composition dataset needs 'epsilon'")
            return {
                "epsilon": exact_amount(epsilon, "epsilon", allow_zero=False),
                "delta": delta_f,
                "rho": Fraction(0),
            }
        if delta_f == 0:
            raise LedgerError(
                "a zCDP dataset needs 'delta' > 0: the delta at which its rho is reported as "
                "(epsilon, delta)"
            )
        if (epsilon is None) == (rho is None):
            raise LedgerError("a zCDP dataset needs exactly one of 'rho' or 'epsilon'")
        if rho is not None:
            rho_f = exact_amount(rho, "rho", allow_zero=False)
        else:
            epsilon_f = exact_amount(epsilon, "epsilon", allow_zero=False)
            # The largest rho whose conversion fits (epsilon, delta), a float rounded down.
            rho_f = Fraction(approx_dp_to_zcdp(float(epsilon_f), float(delta_f)))
            if rho_f <= 0:
                raise LedgerError(f"epsilon={epsilon!r} at delta={delta!r} leaves no rho")
        return {"epsilon": Fraction(0), "delta": delta_f, "rho": rho_f}

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
    ) -> DatasetStatus:
        """Create a dataset (a population of privacy units) with its allowance.

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

        Raises:
            LedgerError: for a bad parameter or an existing name (nothing is changed).
        """
        check_dataset_name(name)
        try:
            kind = check_composition(composition)
            check_relation(relation)
            rule = check_renewal(renewal)
            amounts = self._amounts(kind, epsilon, delta, rho)
        except (ValueError, TypeError) as error:
            raise LedgerError(str(error)) from None
        if not isinstance(note, str):
            raise LedgerError("'note' must be text")
        now = self._now()
        start, end = period_containing(rule, now)
        with self._backend.write() as transaction:
            if transaction.one("SELECT 1 FROM beam_dp_datasets WHERE name = ?", (name,)):
                raise LedgerError(
                    f"ledger {self._url} already has a dataset {name!r}; its total is set once "
                    "(use 'renew' to change its renewal from the next period on)"
                )
            stored = [str(amounts[key]) for key in ("epsilon", "delta", "rho")]
            transaction.execute(
                "INSERT INTO beam_dp_datasets (name, composition, relation, epsilon, delta, rho, "
                "renewal, created_at, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, kind, relation, *stored, rule, _timestamp(now), note),
            )
            transaction.execute(
                "INSERT INTO beam_dp_periods (dataset, starts_at, ends_at, epsilon, delta, rho) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (name, _timestamp(now), None if end is None else _timestamp(end), *stored),
            )
            del start
            self._event(
                transaction,
                name,
                now,
                "create",
                {
                    "composition": kind,
                    "relation": relation,
                    "renewal": rule,
                    "epsilon": None if epsilon is None else str(epsilon),
                    "delta": str(amounts["delta"]),
                    "rho": str(amounts["rho"]) if kind == "zcdp" else None,
                    "note": note,
                },
            )
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
        try:
            rule = check_renewal(renewal)
        except ValueError as error:
            raise LedgerError(str(error)) from None
        now = self._now()
        with self._backend.write() as transaction:
            data = self._dataset_row(transaction, name, lock=True)
            kind: Composition = data["composition"]
            period = self._current_period(transaction, data, now, materialise=True)
            amounts = {key: data[key] for key in ("epsilon", "delta", "rho")}
            if epsilon is not None or rho is not None or delta is not None:
                try:
                    amounts = self._amounts(
                        kind,
                        epsilon if epsilon is not None or kind == "zcdp" else data["epsilon"],
                        delta if delta is not None else data["delta"],
                        rho,
                    )
                except (ValueError, TypeError) as error:
                    raise LedgerError(str(error)) from None
            transaction.execute(
                "UPDATE beam_dp_datasets SET renewal = ?, epsilon = ?, delta = ?, rho = ? "
                "WHERE name = ?",
                (rule, *(str(amounts[k]) for k in ("epsilon", "delta", "rho")), name),
            )
            ends_at = period.ends_at
            if ends_at is None and rule != "none":
                ends_at = period_containing(rule, now)[1]
                transaction.execute(
                    "UPDATE beam_dp_periods SET ends_at = ? WHERE id = ?",
                    (None if ends_at is None else _timestamp(ends_at), period.id),
                )
            self._event(
                transaction,
                name,
                now,
                "renew",
                {
                    "renewal": {"from": data["renewal"], "to": rule},
                    "allowance": {
                        "from": {k: str(data[k]) for k in ("epsilon", "delta", "rho")},
                        "to": {k: str(amounts[k]) for k in ("epsilon", "delta", "rho")},
                    },
                    "effective_from": None if ends_at is None else _timestamp(ends_at),
                },
            )
        return self.status(name)

    def _event(
        self,
        transaction: Transaction,
        dataset: str,
        at: datetime,
        action: str,
        detail: Mapping[str, Any],
    ) -> None:
        transaction.execute(
            "INSERT INTO beam_dp_events (dataset, at, action, detail) VALUES (?, ?, ?, ?)",
            (dataset, _timestamp(at), action, json.dumps(detail, sort_keys=True)),
        )

    def _current_period(
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
            raise self._corrupt(f"dataset {name!r} has no period")
        try:
            starts_at = _parse_timestamp(row[1], f"a period of {name!r}")
            ends_at = None if row[2] is None else _parse_timestamp(row[2], f"a period of {name!r}")
            stored = {
                key: parse_stored(value, f"a period of {name!r}")
                for key, value in zip(("epsilon", "delta", "rho"), row[3:6], strict=True)
            }
        except ValueError as error:
            raise self._corrupt(str(error)) from None
        if ends_at is None or now < ends_at:
            allowance = self._allowance(data["composition"], stored)
            return Period(int(row[0]), starts_at, ends_at, allowance)
        rule: Renewal = data["renewal"]
        start, end = period_containing(rule, now)
        start = max(start, ends_at)  # periods never overlap, whatever the rule was before
        if rule == "none":
            start, end = ends_at, None
        renewed = self._allowance(data["composition"], data)
        period_id: int | None = None
        if materialise:
            period_id = transaction.insert(
                "INSERT INTO beam_dp_periods (dataset, starts_at, ends_at, epsilon, delta, rho) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    _timestamp(start),
                    None if end is None else _timestamp(end),
                    *(str(data[key]) for key in ("epsilon", "delta", "rho")),
                ),
            )
        return Period(period_id, start, end, renewed)

    def _period_charges(self, transaction: Transaction, period: Period) -> tuple[Cost, Cost]:
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
            cost = self._stored_cost(amounts, "a run's amount")
            if state == "committed":
                committed += cost
            else:
                held += cost
        return committed, held

    def _stored_cost(self, amounts: list[Any] | tuple[Any, ...], what: str) -> Cost:
        try:
            epsilon, delta, rho = (parse_stored(value, what) for value in amounts)
        except ValueError as error:
            raise self._corrupt(str(error)) from None
        return Cost(epsilon, delta, rho)

    def status(self, name: str) -> DatasetStatus:
        """The dataset's budget now (read-only)."""
        now = self._now()
        with self._backend.read() as transaction:
            data = self._dataset_row(transaction, name, lock=False)
            period = self._current_period(transaction, data, now, materialise=False)
            committed, held = self._period_charges(transaction, period)
            all_committed = Cost()
            for amounts in transaction.all(
                "SELECT epsilon, delta, rho FROM beam_dp_runs WHERE dataset = ? "
                "AND state = 'committed'",
                (name,),
            ):
                all_committed += self._stored_cost(amounts, "a run's amount")
            count_row = transaction.one(
                "SELECT count(*) FROM beam_dp_periods WHERE dataset = ?", (name,)
            )
            periods = int(count_row[0]) if count_row else 0
            if period.id is None:
                periods += 1
            open_runs = self._runs(
                transaction, "r.dataset = ? AND r.state IN ('reserved', 'abandoned')", (name,)
            )
        return _dataset_status(
            name,
            data,
            period,
            committed,
            held,
            committed_all_periods=all_committed,
            periods=periods,
            open_runs=tuple(open_runs),
        )

    # ------------------------------------------------------------------ runs

    def _runs(
        self, transaction: Transaction, where: str, params: tuple[Any, ...]
    ) -> list[RunRecord]:
        rows = transaction.all(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS_FROM} WHERE {where} ORDER BY r.id", params
        )
        return [self._run_record(row) for row in rows]

    def _run_record(self, row: tuple[Any, ...]) -> RunRecord:
        what = f"run {row[0]!r}"
        try:
            state = row[3]
            if state not in _STATES:
                raise ValueError(f"{what} has an unknown state")
            return RunRecord(
                id=int(row[0]),
                dataset=str(row[1]),
                period_start=_parse_timestamp(row[2], what),
                state=state,
                reserved_at=_parse_timestamp(row[4], what),
                closed_at=None if row[5] is None else _parse_timestamp(row[5], what),
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
            )
        except (ValueError, TypeError) as error:
            raise self._corrupt(f"{what} cannot be read ({type(error).__name__})") from None

    def run(self, run_id: int) -> RunRecord:
        """One run by id."""
        with self._backend.read() as transaction:
            runs = self._runs(transaction, "r.id = ?", (int(run_id),))
        if not runs:
            raise LedgerError(f"ledger {self._url} has no run {run_id}")
        return runs[0]

    def history(self, name: str) -> tuple[list[RunRecord], list[Event]]:
        """Every run of a dataset and every owner's action on it, oldest first."""
        with self._backend.read() as transaction:
            self._dataset_row(transaction, name, lock=False)
            runs = self._runs(transaction, "r.dataset = ?", (name,))
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
                        _parse_timestamp(row[2], "an event"),
                        str(row[3]),
                        json.loads(row[4]),
                    )
                )
            except (ValueError, TypeError):
                raise self._corrupt(f"event {row[0]!r} cannot be read") from None
        return runs, events

    def reserve(self, dataset: str, plan: Plan, run: RunInfo) -> Reservation:
        """Reserve a run's whole planned spend, in one transaction, before it reads data.

        Raises:
            BudgetExceededError: if the dataset cannot afford the plan in its current period
                (the message gives what is left); nothing is reserved.
            LedgerError: for an unknown dataset, a composition or relation that differs from
                the dataset's, or a ledger that cannot be used.
        """
        if not isinstance(plan, Plan):
            raise TypeError(f"'plan' must be a Plan; received {type(plan).__name__}")
        if not isinstance(run, RunInfo):
            raise TypeError(f"'run' must be a RunInfo; received {type(run).__name__}")
        now = self._now()
        with self._backend.write() as transaction:
            data = self._dataset_row(transaction, dataset, lock=True)
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
            period = self._current_period(transaction, data, now, materialise=True)
            committed, held = self._period_charges(transaction, period)
            remaining = period.allowance - committed - held
            if not remaining.covers(plan.cost):
                status = _dataset_status(dataset, data, period, committed, held)
                renews = (
                    f"; the allowance renews at {_shown_time(period.ends_at)}"
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
                    _timestamp(now),
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
        return Reservation(self, run_id, dataset, plan, period)

    def _locked_run(self, transaction: Transaction, run_id: int) -> tuple[RunRecord, Composition]:
        runs = self._runs(transaction, "r.id = ?", (run_id,))
        if not runs:
            raise LedgerError(f"ledger {self._url} has no run {run_id}")
        data = self._dataset_row(transaction, runs[0].dataset, lock=True)
        # Read again under the dataset's lock: the state may have changed meanwhile.
        return self._runs(transaction, "r.id = ?", (run_id,))[0], data["composition"]

    def _commit(
        self,
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
        now = self._now()
        with self._backend.write() as transaction:
            record, kind = self._locked_run(transaction, run_id)
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
                    _timestamp(now),
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
            return self._runs(transaction, "r.id = ?", (run_id,))[0]

    def _close(self, run_id: int, state: Literal["returned", "abandoned"], reason: str) -> None:
        now = self._now()
        with self._backend.write() as transaction:
            record, _kind = self._locked_run(transaction, run_id)
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
                (state, _timestamp(now), reason, run_id),
            )

    def release_run(self, run_id: int, *, reason: str) -> RunRecord:
        """An owner lifts the charge of a reserved or abandoned run (recorded with a reason).

        Use it only when no output of the run can have escaped (the job was killed before
        writing, or its outputs were destroyed unread).

        Raises:
            LedgerError: if the run is committed (its spend stays spent), already returned or
                released, or still running on this host.
        """
        if not isinstance(reason, str) or not reason.strip():
            raise LedgerError("'reason' must say why the run's charge is lifted")
        now = self._now()
        with self._backend.write() as transaction:
            record, _kind = self._locked_run(transaction, int(run_id))
            if record.state == "committed":
                raise LedgerError(
                    f"run {run_id} is committed: its outputs were written and its spend stays spent"
                )
            if record.state in ("returned", "released"):
                raise LedgerError(f"run {run_id} is already {record.state}: it is not charged")
            if record.state == "reserved" and _process_gone(record.host, record.pid) is False:
                raise LedgerError(
                    f"run {run_id} is still running on this host (pid {record.pid}); stop it "
                    "first (it may still write outputs)"
                )
            transaction.execute(
                "UPDATE beam_dp_runs SET state = 'released', closed_at = ?, note = ? WHERE id = ?",
                (_timestamp(now), reason.strip(), record.id),
            )
            self._event(
                transaction,
                record.dataset,
                now,
                "release",
                {"run": record.id, "from_state": record.state, "reason": reason.strip()},
            )
            return self._runs(transaction, "r.id = ?", (record.id,))[0]
