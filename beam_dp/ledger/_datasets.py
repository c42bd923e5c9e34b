"""An owner's changes to a dataset: create it with its allowance and the input it protects,
change its renewal, register more input locations.

A dataset's total is set once; :func:`set_renewal` changes the rule (and optionally the
allowance) from the next period on, so the current period keeps both its allowance and its
charges: nothing is refunded or topped up. Every change is one write transaction that also
records an owner's event (``create``, ``renew``), shown by ``python -m pipelines.budget
history``. Amounts are validated and kept exact (:mod:`beam_dp.ledger._amounts`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction

from beam_dp._validation import check_relation
from beam_dp.accounting import Composition
from beam_dp.accounting.zcdp import approx_dp_to_zcdp
from beam_dp.ledger._amounts import exact_amount
from beam_dp.ledger._backend import Transaction
from beam_dp.ledger._records import timestamp
from beam_dp.ledger._tables import AMOUNT_KEYS, Tables, check_dataset_name
from beam_dp.ledger.errors import LedgerError
from beam_dp.ledger.inputs import normalise_location, overlap
from beam_dp.ledger.periods import check_renewal, period_containing
from beam_dp.ledger.plan import check_composition

__all__ = ["check_allowance", "create_dataset", "protect", "set_renewal"]


def check_allowance(
    composition: Composition, epsilon: object, delta: object, rho: object
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


def _checked_inputs(
    tables: Tables, transaction: Transaction, name: str, inputs: object
) -> list[str]:
    """``inputs`` normalised; refused if empty or if one may overlap another dataset's (read
    under the registration lock, so that two changes at once cannot both pass)."""
    if isinstance(inputs, str) or not isinstance(inputs, Sequence) or not inputs:
        raise LedgerError(
            "'inputs' must list the locations of the export the dataset protects (a path "
            "prefix or a glob, e.g. /data/people/ or gs://bucket/people/*.parquet)"
        )
    locations = list(dict.fromkeys(normalise_location(location) for location in inputs))
    tables.backend.lock_registrations(transaction)
    for other, registered in sorted(tables.registrations(transaction).items()):
        if other == name:
            continue
        for location in locations:
            clash = next((r for r in registered if overlap(location, r)), None)
            if clash is not None:
                raise LedgerError(
                    f"input location {location} may overlap {clash}, which dataset {other!r} "
                    "protects: one export, one budget (register a location that is disjoint "
                    "from every other dataset's)"
                )
    return locations


def create_dataset(
    tables: Tables,
    name: str,
    *,
    epsilon: object,
    delta: object,
    rho: object,
    composition: str,
    relation: str,
    renewal: str,
    note: str,
    inputs: object,
) -> None:
    """Create a dataset (:meth:`beam_dp.ledger.Ledger.create_dataset`)."""
    check_dataset_name(name)
    try:
        kind = check_composition(composition)
        check_relation(relation)
        rule = check_renewal(renewal)
        amounts = check_allowance(kind, epsilon, delta, rho)
    except (ValueError, TypeError) as error:
        raise LedgerError(str(error)) from None
    if not isinstance(note, str):
        raise LedgerError("'note' must be text")
    with tables.backend.write() as transaction:
        now = tables.time(transaction, forward_of=name)
        end = period_containing(rule, now)[1]
        if transaction.one("SELECT 1 FROM beam_dp_datasets WHERE name = ?", (name,)):
            raise LedgerError(
                f"ledger {tables.url} already has a dataset {name!r}; its total is set once "
                "(use 'renew' to change its renewal from the next period on)"
            )
        locations = _checked_inputs(tables, transaction, name, inputs)
        stored = [str(amounts[key]) for key in AMOUNT_KEYS]
        transaction.execute(
            "INSERT INTO beam_dp_datasets (name, composition, relation, epsilon, delta, rho, "
            "renewal, created_at, note, inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (name, kind, relation, *stored, rule, timestamp(now), note, json.dumps(locations)),
        )
        transaction.execute(
            "INSERT INTO beam_dp_periods (dataset, starts_at, ends_at, epsilon, delta, rho) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (name, timestamp(now), None if end is None else timestamp(end), *stored),
        )
        tables.add_event(
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
                "inputs": locations,
            },
        )


def protect(tables: Tables, name: str, inputs: object) -> None:
    """Register more input locations for a dataset (:meth:`beam_dp.ledger.Ledger.protect`).

    Locations are only ever added (a job's earlier runs stay accounted to the dataset), and
    each must be disjoint from every other dataset's registration.
    """
    with tables.backend.write() as transaction:
        data = tables.dataset_row(transaction, name, lock=True)
        now = tables.time(transaction, forward_of=name)
        added = [
            location
            for location in _checked_inputs(tables, transaction, name, inputs)
            if location not in data["inputs"]
        ]
        if not added:
            return
        transaction.execute(
            "UPDATE beam_dp_datasets SET inputs = ? WHERE name = ?",
            (json.dumps([*data["inputs"], *added]), name),
        )
        tables.add_event(transaction, name, now, "protect", {"inputs": added})


def set_renewal(
    tables: Tables,
    name: str,
    renewal: str,
    *,
    epsilon: object,
    delta: object,
    rho: object,
) -> None:
    """Change a dataset's renewal (:meth:`beam_dp.ledger.Ledger.set_renewal`)."""
    try:
        rule = check_renewal(renewal)
    except ValueError as error:
        raise LedgerError(str(error)) from None
    with tables.backend.write() as transaction:
        data = tables.dataset_row(transaction, name, lock=True)
        now = tables.time(transaction, forward_of=name)
        kind: Composition = data["composition"]
        period = tables.current_period(transaction, data, now, materialise=True)
        amounts = {key: data[key] for key in AMOUNT_KEYS}
        if epsilon is not None or rho is not None or delta is not None:
            try:
                amounts = check_allowance(
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
            (rule, *(str(amounts[k]) for k in AMOUNT_KEYS), name),
        )
        ends_at = period.ends_at
        if ends_at is None and rule != "none":
            ends_at = period_containing(rule, now)[1]
            transaction.execute(
                "UPDATE beam_dp_periods SET ends_at = ? WHERE id = ?",
                (None if ends_at is None else timestamp(ends_at), period.id),
            )
        tables.add_event(
            transaction,
            name,
            now,
            "renew",
            {
                "renewal": {"from": data["renewal"], "to": rule},
                "allowance": {
                    "from": {k: str(data[k]) for k in AMOUNT_KEYS},
                    "to": {k: str(amounts[k]) for k in AMOUNT_KEYS},
                },
                "effective_from": None if ends_at is None else timestamp(ends_at),
            },
        )
