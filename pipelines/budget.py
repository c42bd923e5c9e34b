"""Manage privacy budgets that outlive a job: datasets in a persistent ledger.

    python -m pipelines.budget create  --ledger URL --dataset NAME --input LOCATION --epsilon 1.0 \
                                       [--renewal monthly]
    python -m pipelines.budget protect --ledger URL --dataset NAME --input LOCATION
    python -m pipelines.budget show    --ledger URL [--dataset NAME] [--json]
    python -m pipelines.budget history --ledger URL --dataset NAME [--json]
    python -m pipelines.budget renew   --ledger URL --dataset NAME --renewal monthly [--epsilon E]
    python -m pipelines.budget release --ledger URL --dataset NAME --run ID --reason TEXT

URL is ``sqlite:///absolute/path/budget.db`` (``sqlite:relative/path.db``) or
``postgresql://user@host:5432/dbname``. ``--ledger`` defaults to the environment variable
``BEAM_DP_LEDGER_URL``; keep a PostgreSQL password out of the command line with that variable,
``PGPASSWORD`` or ``~/.pgpass``. Every message shows the URL with its password redacted.

``create`` sets a dataset's total once: ``--epsilon`` (and ``--delta``) under basic
composition, or ``--composition zcdp`` with ``--rho`` (or ``--epsilon`` to derive the largest
ρ) and ``--delta`` > 0, the δ at which ρ is reported as (ε, δ). With ``--renewal`` the total
is an allowance granted afresh each calendar period in UTC ("1.0 per calendar month":
``--epsilon 1.0 --renewal monthly``). ``renew`` changes the rule, or the allowance, from the
next period on: the current period keeps its allowance and its charges. ``release`` lifts the
charge of a reservation whose job died before it began reading data (an owner's decision,
recorded with its reason); a run that began reading may have published and is never refunded.
Amounts are read exactly as written (``0.1``, ``1e-6``, ``1/3``).

One export, one budget: ``--input`` (repeatable; required at ``create``) registers the
locations of the export the dataset protects, a path prefix or a glob (``/data/people/``,
``'gs://bucket/people/*.parquet'``). A job charged to the dataset must read files inside them,
and no job may charge another dataset for them; ``protect`` adds locations later. Two datasets'
locations may not overlap. A copy of the data elsewhere is the operator's to keep out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from beam_dp.ledger import (
    RENEWALS,
    DatasetStatus,
    Event,
    Ledger,
    LedgerError,
    RunRecord,
    open_ledger,
    renewal_phrase,
    show_amount,
)

__all__ = ["main", "run"]

ENV_URL = "BEAM_DP_LEDGER_URL"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.budget",
        description=__doc__.splitlines()[0],
        allow_abbrev=False,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, *, dataset: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        sub.add_argument(
            "--ledger",
            default=os.environ.get(ENV_URL),
            help="the ledger: sqlite:///path/budget.db or postgresql://user@host/db. Default: "
            f"${ENV_URL} (required if it is not set)",
        )
        sub.add_argument(
            "--dataset",
            required=dataset,
            help="the dataset's name (the population its budget protects)"
            + (". Required" if dataset else ". Default: every dataset"),
        )
        sub.add_argument(
            "--json", action="store_true", help="print JSON instead of a table. Default: a table"
        )
        return sub

    create = command("create", "create a dataset with its total (creates the ledger if new)")
    create.add_argument(
        "--composition",
        choices=["basic", "zcdp"],
        default="basic",
        help="how the runs' spending adds up: basic (default: epsilons and deltas add) or zcdp "
        "(zero-concentrated DP: rhos add, tighter for many releases; give --rho or --epsilon "
        "and --delta)",
    )
    create.add_argument(
        "--epsilon",
        help="the dataset's total epsilon (per period with --renewal). No default: give it "
        "(or --rho for zcdp)",
    )
    create.add_argument(
        "--delta",
        default="0",
        help="the total delta; for zcdp, the delta at which its epsilon is reported. Default 0",
    )
    create.add_argument("--rho", help="the total rho of a zcdp dataset. Default: none")
    create.add_argument(
        "--relation",
        choices=["add_remove", "replace"],
        default="add_remove",
        help="what the guarantee hides: add_remove (default) whether a person is in the data; "
        "replace what a person's records say when who is in the data is public",
    )
    create.add_argument(
        "--renewal",
        choices=list(RENEWALS),
        default="none",
        help="whether the allowance starts afresh each period (daily, weekly, ...). Default: "
        "none, one total for all time",
    )
    create.add_argument(
        "--note",
        default="",
        help="public text shown with the dataset (owner, population). Default: empty",
    )
    inputs_help = (
        "a location of the export the dataset protects: a path prefix or a glob, local or "
        "scheme:// (repeat for several); jobs charged to the dataset read only inside them"
    )
    create.add_argument("--input", action="append", required=True, help=inputs_help + ". Required")
    protect = command("protect", "register more input locations the dataset protects")
    protect.add_argument("--input", action="append", required=True, help=inputs_help + ". Required")

    command("show", "the budget of one dataset, or of every dataset", dataset=False)
    command("history", "every run and owner action of a dataset")

    renew = command("renew", "change the renewal rule (and allowance) from the next period on")
    renew.add_argument(
        "--renewal",
        choices=list(RENEWALS),
        required=True,
        help="the new renewal rule, from the next period on. Required",
    )
    renew.add_argument(
        "--epsilon", help="the allowance's epsilon in later periods. Default: unchanged"
    )
    renew.add_argument("--delta", help="the allowance's delta in later periods. Default: unchanged")
    renew.add_argument(
        "--rho", help="the allowance's rho in later periods (zcdp). Default: unchanged"
    )

    release = command("release", "lift the charge of a run that never began reading data (owner)")
    release.add_argument(
        "--run", type=int, required=True, help="the run's id (see history). Required"
    )
    release.add_argument(
        "--reason", required=True, help="why no output of it can have escaped. Required"
    )
    return parser


def _time(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "  ") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for number, row in enumerate(rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print(indent + line.rstrip(), file=out)
        if number == 0:
            print(indent + "  ".join("-" * width for width in widths), file=out)


def _coordinates(status: DatasetStatus) -> tuple[str, ...]:
    return ("rho",) if status.composition == "zcdp" else ("epsilon", "delta")


def print_status(status: DatasetStatus, out: TextIO) -> None:
    """The dataset's budget as a table."""
    print(
        f"dataset {status.name}: {status.composition} composition, relation "
        f"{status.relation}, {status.total.describe(status.composition)} "
        f"{renewal_phrase(status.renewal)}" + (f"; {status.note}" if status.note else ""),
        file=out,
    )
    print(
        f"protects: {', '.join(status.inputs) or 'no input yet (register one: protect)'}", file=out
    )
    print(f"period {status.periods}: {status.period.describe()}", file=out)
    coordinates = _coordinates(status)
    rows = [("", *coordinates)]
    for label, cost in (
        ("total", status.total),
        ("committed", status.committed),
        ("reserved", status.reserved),
        ("remaining", status.remaining),
    ):
        rows.append((label, *(show_amount(getattr(cost, c)) for c in coordinates)))
    if status.composition == "zcdp":
        rows[0] = (*rows[0], f"epsilon at delta={show_amount(status.conversion_delta)}")
        equivalents = {
            "total": status.epsilon_equivalent(status.total),
            "committed": status.epsilon_equivalent(status.committed),
            "reserved": None,
            "remaining": None,
        }
        rows[1:] = [
            (*row, "-" if equivalents[row[0]] is None else f"{equivalents[row[0]]:.6g}")
            for row in rows[1:]
        ]
    _table(rows, out)
    all_periods = ", ".join(
        f"{c} {show_amount(getattr(status.committed_all_periods, c))}" for c in coordinates
    )
    print(f"committed over all {status.periods} period(s): {all_periods}", file=out)
    if status.open_runs:
        print("runs in progress or abandoned (charged until committed or released):", file=out)
        _runs_table(list(status.open_runs), status, out)


def _runs_table(runs: list[RunRecord], status: DatasetStatus, out: TextIO) -> None:
    coordinates = _coordinates(status)
    rows = [("run", "state", "reserved at (UTC)", *coordinates, "job", "host/pid", "output")]
    for run in runs:
        output = run.output_location or "-"
        if run.overwrites:
            output += " (overwrote run " + ", ".join(map(str, run.overwrites)) + ")"
        rows.append(
            (
                str(run.id),
                run.shown_state,
                _time(run.reserved_at),
                *(show_amount(getattr(run.cost, c)) for c in coordinates),
                run.job,
                f"{run.host}/{run.pid}",
                output,
            )
        )
    _table(rows, out)


def print_history(
    status: DatasetStatus, runs: list[RunRecord], events: list[Event], out: TextIO
) -> None:
    """Every run (with its statistics and config digest) and every owner's action."""
    print(f"dataset {status.name}: {len(runs)} run(s)", file=out)
    if runs:
        _runs_table(runs, status, out)
        rows = [("run", "closed at (UTC)", "statistics", "config digest", "note")]
        for run in runs:
            digest = run.config_digest[:19] + "..." if len(run.config_digest) > 22 else ""
            rows.append(
                (
                    str(run.id),
                    _time(run.closed_at),
                    ", ".join(run.statistics) or "-",
                    digest or run.config_digest or "-",
                    run.note or "-",
                )
            )
        _table(rows, out)
    print("owner actions:", file=out)
    for event in events:
        detail = json.dumps(dict(event.detail), sort_keys=True)
        print(f"  {_time(event.at)}  {event.action}  {detail}", file=out)


def run(argv: Sequence[str] | None = None, out: TextIO | None = None) -> dict[str, Any]:
    """Run one command; return what ``--json`` prints. Raises LedgerError on refusal."""
    out = out if out is not None else sys.stdout
    args = _parser().parse_args(argv)
    if not args.ledger:
        raise LedgerError(f"give --ledger URL (or set {ENV_URL})")
    create = args.command == "create"
    with open_ledger(args.ledger, create=create) as ledger:
        result = _dispatch(ledger, args, out)
    if args.json:
        json.dump(result, out, indent=2, sort_keys=True)
        print(file=out)
    return result


def _dispatch(ledger: Ledger, args: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    table = not args.json
    if args.command == "create":
        status = ledger.create_dataset(
            args.dataset,
            epsilon=args.epsilon,
            delta=args.delta,
            rho=args.rho,
            composition=args.composition,
            relation=args.relation,
            renewal=args.renewal,
            note=args.note,
            inputs=args.input,
        )
        if table:
            print(f"created dataset {status.name} in {ledger.url}", file=out)
            print_status(status, out)
        return {"ledger": ledger.url, **status.to_json()}
    if args.command == "protect":
        status = ledger.protect(args.dataset, args.input)
        if table:
            print(f"dataset {status.name} now protects {', '.join(status.inputs)}", file=out)
        return {"ledger": ledger.url, **status.to_json()}
    if args.command == "show":
        names = [args.dataset] if args.dataset else ledger.datasets()
        statuses = [ledger.status(name) for name in names]
        if table:
            if not statuses:
                print(f"ledger {ledger.url} has no dataset yet", file=out)
            for number, status in enumerate(statuses):
                if number:
                    print(file=out)
                print_status(status, out)
        return {"ledger": ledger.url, "datasets": [status.to_json() for status in statuses]}
    if args.command == "history":
        status = ledger.status(args.dataset)
        runs, events = ledger.history(args.dataset)
        if table:
            print_history(status, runs, events, out)
        return {
            "ledger": ledger.url,
            "dataset": status.name,
            "composition": status.composition,
            "runs": [run.to_json(status.composition) for run in runs],
            "events": [event.to_json() for event in events],
        }
    if args.command == "renew":
        status = ledger.set_renewal(
            args.dataset,
            args.renewal,
            epsilon=args.epsilon,
            delta=args.delta,
            rho=args.rho,
        )
        if table:
            print(
                f"dataset {status.name} now renews {args.renewal} from the next period on; "
                "the current period keeps its allowance and its charges",
                file=out,
            )
            print_status(status, out)
        return {"ledger": ledger.url, **status.to_json()}
    # release
    record = ledger.run(args.run)
    if record.dataset != args.dataset:
        raise LedgerError(
            f"run {args.run} belongs to dataset {record.dataset!r}, not {args.dataset!r}"
        )
    released = ledger.release_run(args.run, reason=args.reason)
    status = ledger.status(args.dataset)
    if table:
        print(
            f"released run {released.id} ({record.state} before): it is no longer charged", file=out
        )
        print_status(status, out)
    return {
        "ledger": ledger.url,
        "run": released.to_json(status.composition),
        "dataset": status.to_json(),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point: a refusal ends the program with one line on stderr."""
    try:
        run(argv)
    except LedgerError as error:
        raise SystemExit(f"budget: error: {error}") from None


if __name__ == "__main__":
    main()
