"""The ledger's accounting on both backends: exact sums, refusals, the state machine."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.accounting.zcdp import zcdp_to_approx_dp
from beam_dp.ledger import (
    BudgetExceededError,
    Cost,
    LedgerError,
    Plan,
    RunInfo,
    open_ledger,
)

JOB = RunInfo(job="test-job", config_digest="sha256:" + "0" * 64)


def job(dataset: str) -> RunInfo:
    """The test job, reading a file of the export ``dataset`` protects (``/data/<name>/``)."""
    return dataclasses.replace(JOB, inputs=(f"/data/{dataset}/export.avro",))


def entry(name: str = "top", epsilon: float = 0.3, **extra: object) -> LedgerEntry:
    fields: dict[str, object] = {
        "name": name,
        "statistic": "heavy_hitter",
        "mechanism": "exponential",
        "epsilon": epsilon,
        "sensitivity": 1.0,
        "neighbouring": "add_remove",
        "monotone": True,
        "num_candidates": 3,
        "contribution_bounds": {"max_contributions": 1},
        "accuracy": {"confidence": 0.95, "score_loss": 12.5},
    }
    fields.update(extra)
    return LedgerEntry(**fields)  # type: ignore[arg-type]


def test_sums_are_exact_ten_tenths_fit_in_one(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon=1.0)
        for _ in range(10):  # 0.1 as a float ten times: 1.0000000000000002 in float sums
            ledger.reserve("d", Plan.basic(0.1), job("d")).commit([], "out")
        with pytest.raises(BudgetExceededError) as refused:
            ledger.reserve("d", Plan.basic(Fraction(1, 10**30)), job("d"))
        status = ledger.status("d")
        assert status.committed.epsilon == 1
        assert status.remaining == Cost()
        assert len(ledger.history("d")[0]) == 10  # the refusal left no row
    message = str(refused.value)
    assert "\n" not in message
    assert "epsilon=0, delta=0 left of epsilon=1, delta=0" in message
    assert "Nothing was reserved and no data was read" in message


def test_reserved_runs_count_until_returned(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1", delta="1e-6")
        first = ledger.reserve("d", Plan.basic("0.6", "1e-6"), job("d"))
        with pytest.raises(BudgetExceededError, match=r"epsilon=0\.4, delta=0 left"):
            ledger.reserve("d", Plan.basic("0.5"), job("d"))
        with pytest.raises(BudgetExceededError):  # δ is spent too
            ledger.reserve("d", Plan.basic("0.1", "1e-9"), job("d"))
        first.release()  # failed before any release could escape
        first.release()  # idempotent
        assert ledger.status("d").remaining == Cost(Fraction(1), Fraction(1, 10**6))
        second = ledger.reserve("d", Plan.basic("0.5"), job("d"))
        with pytest.raises(LedgerError, match="only a reserved run that never started"):
            second.commit([entry(epsilon=0.5)], "out") and second.release()
        assert ledger.run(first.run_id).state == "returned"
        assert ledger.run(second.run_id).state == "committed"


def test_commit_charges_at_least_what_the_entries_spent(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="2")
        reservation = ledger.reserve("d", Plan.basic("0.5"), job("d"))
        record = reservation.commit([entry("a", 0.4), entry("b", 0.3)], "out")
        assert record.cost.epsilon == Fraction(7, 10)  # more than reserved: the truth counts
        assert [e["name"] for e in record.entries] == ["a", "b"]
        smaller = ledger.reserve("d", Plan.basic("0.5"), job("d")).commit([entry("a", 0.1)], "o2")
        assert smaller.cost.epsilon == Fraction(1, 2)  # the reservation is the least charge
        with pytest.raises(LedgerError, match="already committed"):
            reservation.commit([], "out")
        with pytest.raises(TypeError):
            ledger.reserve("d", Plan.basic("0.1"), job("d")).commit(
                [{"name": "a", "value": "a private value"}],  # type: ignore[list-item]
                "out",
            )


def test_the_ledger_keeps_only_public_fields(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        record = ledger.reserve("d", Plan.basic("0.3", statistics=["top"]), job("d")).commit(
            [entry()], "gs://bucket/out"
        )
        described = ledger.run(record.id).to_json("basic")
    assert set(described["entries"][0]) == set(entry().to_dict())
    assert "value" not in json.dumps(described["entries"])
    assert described["statistics"] == ["top"]
    assert described["config_digest"] == JOB.config_digest


def test_abandoned_and_owner_released_runs(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        crashed = ledger.reserve("d", Plan.basic("0.5"), job("d"))
        crashed.start()
        crashed.abandon("writing outputs failed halfway")
        with pytest.raises(LedgerError, match="only a reserved run that never started"):
            crashed.release()
        assert ledger.status("d").reserved.epsilon == Fraction(1, 2)  # still charged
        assert ledger.status("d").open_runs[0].state == "abandoned"
        with pytest.raises(LedgerError, match="must say why"):
            ledger.release_run(crashed.run_id, reason=" ")
        # A run that began reading may have published: never refunded, by anyone.
        with pytest.raises(LedgerError, match="may have published"):
            ledger.release_run(crashed.run_id, reason="outputs deleted before anyone read them")
        assert ledger.status("d").reserved.epsilon == Fraction(1, 2)
        # A run that never started (its job died between reserving and reading) can be.
        idle = ledger.reserve("d", Plan.basic("0.25"), job("d"))
        with pytest.raises(LedgerError, match="still running on this host"):
            ledger.release_run(idle.run_id, reason="it runs here: this process")
        assert ledger.status("d").reserved.epsilon == Fraction(3, 4)
        idle.release()
        with pytest.raises(LedgerError, match="already returned"):
            ledger.release_run(idle.run_id, reason="again")
        # If the job writes its outputs after all, committing charges it again.
        record = idle.commit([], "out")
        assert record.state == "committed" and "charged again" in record.note
        assert ledger.status("d").committed.epsilon == Fraction(1, 4)
        with pytest.raises(LedgerError, match="stays spent"):
            ledger.release_run(idle.run_id, reason="committed runs stay")
        with pytest.raises(LedgerError, match="has no run"):
            ledger.release_run(10_000, reason="unknown")


def test_overwrites_are_recorded_and_stay_spent(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        first = ledger.reserve("d", Plan.basic("0.2"), job("d")).commit([], "/srv/out")
        second = ledger.reserve("d", Plan.basic("0.2"), job("d")).commit(
            [], "/srv/out", overwrite=True
        )
        assert first.overwrites == () and second.overwrites == (first.id,)
        assert second.overwrite is True
        assert ledger.status("d").committed.epsilon == Fraction(2, 5)


def test_refusals_name_the_rule(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("survey_users", inputs=["/data/survey_users/"], epsilon="1")
        ledger.create_dataset("z", inputs=["/data/z/"], rho="0.1", delta="1e-6", composition="zcdp")
        with pytest.raises(LedgerError, match="did you mean 'survey_users'"):
            ledger.reserve("survey_user", Plan.basic("0.1"), job("survey_user"))
        with pytest.raises(LedgerError, match="do not mix on one dataset"):
            ledger.reserve("survey_users", Plan.zcdp("0.01"), job("survey_users"))
        with pytest.raises(LedgerError, match="do not mix on one dataset"):
            ledger.reserve("z", Plan.basic("0.1"), job("z"))
        with pytest.raises(LedgerError, match="relation='add_remove'"):
            ledger.reserve(
                "survey_users", Plan.basic("0.1", relation="replace"), job("survey_users")
            )
        with pytest.raises(LedgerError, match="already has a dataset"):
            ledger.create_dataset("z", inputs=["/data/z/"], epsilon="5")
        with pytest.raises(LedgerError, match="'dataset' must be"):
            ledger.create_dataset("bad name; drop table", epsilon="1")
        with pytest.raises(LedgerError, match="'epsilon' must be finite"):
            ledger.create_dataset("e", inputs=["/data/e/"], epsilon="nan")
        with pytest.raises(LedgerError, match="'epsilon' must be > 0"):
            ledger.create_dataset("e", inputs=["/data/e/"], epsilon="-1")
        with pytest.raises(LedgerError, match="'delta' > 0"):
            ledger.create_dataset("e", inputs=["/data/e/"], rho="0.1", composition="zcdp")
        assert ledger.datasets() == ["survey_users", "z"]


def test_zcdp_dataset_composes_rho_and_reports_epsilon(ledger_url: str) -> None:
    budget = PrivacyBudget(1.0, 1e-6, composition="zcdp")
    budget.request("top", mechanism="exponential_top_k", rounds=10)
    budget.request("median", mechanism="exponential", weight=0.5)
    budget.finalize()
    plan = Plan.from_budget(budget)
    assert plan.composition == "zcdp"
    assert plan.cost.rho == sum(Fraction(repr(s.rho)) for s in budget.shares)
    with open_ledger(ledger_url, create=True) as ledger:
        created = ledger.create_dataset(
            "z", inputs=["/data/z/"], epsilon="2", delta="1e-6", composition="zcdp"
        )
        assert created.epsilon_equivalent(created.total) == pytest.approx(2.0, rel=1e-9)
        assert created.epsilon_equivalent(created.total) <= 2.0  # type: ignore[operator]
        ledger.reserve("z", plan, job("z")).commit(budget.ledger, "out")
        status = ledger.status("z")
    assert status.committed.rho == plan.cost.rho
    expected = zcdp_to_approx_dp(float(plan.cost.rho), 1e-6)
    assert status.epsilon_equivalent(status.committed) == pytest.approx(expected, rel=1e-12)
    assert status.to_json()["epsilon_equivalent"]["committed"] == pytest.approx(expected)


def test_plans_from_budgets() -> None:
    basic = PrivacyBudget(1.0, 1e-6)
    basic.request("a", mechanism="exponential", weight=1)
    basic.request("b", mechanism="exponential", weight=2)
    basic.request("keys", mechanism="partition_selection", epsilon=0.1, delta=1e-7)
    with pytest.raises(LedgerError, match="finalize"):
        Plan.from_budget(basic)
    basic.finalize()
    plan = Plan.from_budget(basic, relation="replace")
    assert plan.cost.epsilon <= 1 and plan.cost.epsilon > Fraction(999_999, 10**6)
    assert plan.cost.delta == Fraction(1, 10**7)
    assert plan.statistics == ("a", "b", "keys") and plan.relation == "replace"
    zcdp = PrivacyBudget(1.0, 1e-6, composition="zcdp")
    zcdp.request("keys", mechanism="partition_selection", epsilon=0.1, delta=1e-7)
    zcdp.request("top", mechanism="exponential")
    zcdp.finalize()
    with pytest.raises(LedgerError, match="no zCDP bound"):
        Plan.from_budget(zcdp)
    with pytest.raises(ValueError, match="must be > 0"):
        Plan.basic(0)
    with pytest.raises(ValueError, match="finite"):
        Plan.basic(float("inf"))
    with pytest.raises(TypeError):
        Plan.basic(True)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_monthly_renewal_grants_a_fresh_allowance_and_never_refunds(ledger_url: str) -> None:
    clock = Clock(datetime(2026, 1, 15, 12, tzinfo=UTC))
    with open_ledger(ledger_url, create=True, clock=clock) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1.0", renewal="monthly")
        ledger.reserve("d", Plan.basic("0.5"), job("d")).commit([], "out")
        held = ledger.reserve("d", Plan.basic("0.3"), job("d"))  # a run still in progress
        clock.now = datetime(2026, 1, 31, 23, 59, tzinfo=UTC)
        with pytest.raises(BudgetExceededError, match="renews at 2026-02-01 00:00 UTC"):
            ledger.reserve("d", Plan.basic("0.3"), job("d"))
        # A rule change takes effect from the next period: January keeps its allowance.
        ledger.set_renewal("d", "monthly", epsilon="2")
        assert ledger.status("d").total.epsilon == 1
        with pytest.raises(BudgetExceededError):
            ledger.reserve("d", Plan.basic("0.3"), job("d"))
        clock.now = datetime(2026, 2, 1, tzinfo=UTC)
        february = ledger.status("d")
        assert february.period.starts_at == clock.now
        assert february.period.ends_at == datetime(2026, 3, 1, tzinfo=UTC)
        assert february.total.epsilon == 2 and february.remaining.epsilon == 2
        ledger.reserve("d", Plan.basic("1.5"), job("d")).commit([], "out")
        # January's run that commits late stays in January.
        held.commit([], "out")
        status = ledger.status("d")
        assert status.committed.epsilon == Fraction(3, 2)
        assert status.committed_all_periods.epsilon == Fraction(23, 10)
        assert status.periods == 2
        runs, events = ledger.history("d")
    assert [run.period_start.month for run in runs] == [1, 1, 2]
    assert [event.action for event in events] == ["create", "renew"]


def test_a_dataset_without_renewal_can_start_renewing(ledger_url: str) -> None:
    clock = Clock(datetime(2026, 3, 10, tzinfo=UTC))
    with open_ledger(ledger_url, create=True, clock=clock) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        ledger.reserve("d", Plan.basic("1"), job("d")).commit([], "out")
        clock.now += timedelta(days=400)
        assert ledger.status("d").remaining.epsilon == 0  # "none": one allowance for life
        renewed = ledger.set_renewal("d", "weekly")
        assert renewed.remaining.epsilon == 0  # nothing refunded this week
        assert renewed.period.ends_at is not None and renewed.period.ends_at.weekday() == 0
        clock.now = renewed.period.ends_at
        assert ledger.status("d").remaining.epsilon == 1
        ledger.set_renewal("d", "none")
        clock.now += timedelta(days=7)
        assert ledger.status("d").remaining.epsilon == 1
        ledger.reserve("d", Plan.basic("1"), job("d"))
        clock.now += timedelta(days=70)
        assert ledger.status("d").remaining.epsilon == 0


def test_a_reservation_outlives_its_connection(ledger_url: str) -> None:
    # A job closes its ledger while the pipeline runs; the commit opens a new connection.
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        reservation = ledger.reserve("d", Plan.basic("0.5"), job("d"))
        returned = ledger.reserve("d", Plan.basic("0.25"), job("d"))
    assert ledger.closed
    assert reservation.commit([entry(epsilon=0.5)], "out").state == "committed"
    returned.release()
    with open_ledger(ledger_url) as reopened:
        status = reopened.status("d")
    assert status.committed.epsilon == Fraction(1, 2) and status.reserved == Cost()


def _version_one_ledger(path: Path) -> None:
    """A ledger as beam-dp wrote it before schema version 2 (no inputs, no started_at)."""
    import sqlite3

    from beam_dp.ledger._schema import schema

    with sqlite3.connect(path) as connection:
        for statement in schema("INTEGER PRIMARY KEY"):
            statement = statement.replace(" note TEXT NOT NULL, inputs TEXT NOT NULL DEFAULT '[]')",
                                          " note TEXT NOT NULL)")  # fmt: skip
            statement = statement.replace(" note TEXT NOT NULL, started_at TEXT)",
                                          " note TEXT NOT NULL)")  # fmt: skip
            connection.execute(statement)
        connection.executemany(
            "INSERT INTO beam_dp_meta (key, value) VALUES (?, ?)",
            [("format", "beam-dp ledger"), ("schema_version", "1"),
             ("created_at", "2026-01-01T00:00:00.000000Z")],
        )  # fmt: skip
        connection.execute(
            "INSERT INTO beam_dp_datasets VALUES ('d', 'basic', 'add_remove', '1', '0', '0', "
            "'none', '2026-01-01T00:00:00.000000Z', '')"
        )
        connection.execute(
            "INSERT INTO beam_dp_periods (dataset, starts_at, ends_at, epsilon, delta, rho) "
            "VALUES ('d', '2026-01-01T00:00:00.000000Z', NULL, '1', '0', '0')"
        )
    connection.close()


def test_a_version_one_ledger_is_migrated_and_must_register_its_input(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_one_ledger(path)
    with open_ledger(f"sqlite://{path}") as ledger:
        assert ledger.status("d").inputs == ()
        with pytest.raises(LedgerError, match="protects no input yet"):
            ledger.reserve("d", Plan.basic("0.5"), job("d"))
        ledger.protect("d", ["/data/d/"])
        ledger.reserve("d", Plan.basic("0.5"), job("d")).commit([], "out")
        assert ledger.status("d").inputs == ("/data/d/",)
        _runs, events = ledger.history("d")
    assert [event.action for event in events] == ["protect"]
    with open_ledger(f"sqlite://{path}") as again:  # opened again: version 2, nothing to do
        assert again.status("d").committed.epsilon == Fraction(1, 2)


def test_a_started_run_is_never_refunded(ledger_url: str) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("d", inputs=["/data/d/"], epsilon="1")
        run = ledger.reserve("d", Plan.basic("0.5"), job("d"))
        run.start()
        assert ledger.run(run.run_id).started_at is not None
        with pytest.raises(LedgerError, match="only a reserved run that never started"):
            run.release()
        with pytest.raises(LedgerError, match=r"began reading data at .*may have published"):
            ledger.release_run(run.run_id, reason="the job failed")
        with pytest.raises(LedgerError, match="only a reserved run that has not started"):
            run.start()
        assert ledger.status("d").reserved.epsilon == Fraction(1, 2)
