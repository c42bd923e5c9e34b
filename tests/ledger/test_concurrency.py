"""Real processes racing for one budget, and jobs killed with SIGKILL (both backends)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from fractions import Fraction
from pathlib import Path

import ledger_workers
import pytest

from beam_dp.ledger import open_ledger

RACERS = 16


def test_sixteen_processes_race_for_one_budget(ledger_url: str, tmp_path: Path) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("survey_users", inputs=["/data/survey_users/"], epsilon="1.0")
    reads = tmp_path / "reads"
    reads.mkdir()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(RACERS)
    results = context.Queue()
    processes = [
        context.Process(
            target=ledger_workers.reserve_and_commit,
            args=(ledger_url, "survey_users", "0.3", index, start, results, str(reads)),
        )
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    errors = [message for _, outcome, _, message in outcomes if outcome == "error"]
    assert errors == []
    committed = sorted(index for index, outcome, _, _ in outcomes if outcome == "committed")
    refused = [message for _, outcome, _, message in outcomes if outcome == "refused"]
    assert len(committed) == 3
    assert len(refused) == RACERS - 3
    # Only the runs that got a reservation read the data.
    assert sorted(int(path.name.split("-")[1]) for path in reads.iterdir()) == committed
    for message in refused:
        assert "cannot afford this run" in message
        assert "epsilon=0.1" in message  # what is left once three runs hold 0.3 each
        assert "\n" not in message
    with open_ledger(ledger_url) as ledger:
        status = ledger.status("survey_users")
        runs, _events = ledger.history("survey_users")
    assert status.committed.epsilon == Fraction(9, 10)  # exact: 3 × 3/10
    assert status.reserved.epsilon == 0
    assert status.remaining.epsilon == Fraction(1, 10)
    assert [run.state for run in runs] == ["committed"] * 3
    assert {run.output_location for run in runs} == {f"out/{i}" for i in committed}


def _start_hanging_job(ledger_url: str, tmp_path: Path) -> tuple[multiprocessing.Process, int]:
    context = multiprocessing.get_context("spawn")
    ready = tmp_path / "ready"
    process = context.Process(
        target=ledger_workers.reserve_and_hang,
        args=(ledger_url, "survey_users", "0.4", str(ready)),
    )
    process.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert process.is_alive(), "the job died before it reserved"
        assert time.monotonic() < deadline, "the job did not reserve in time"
        time.sleep(0.05)
    return process, int(ready.read_text())  # type: ignore[return-value]


def test_a_job_killed_after_its_reservation_stays_charged(ledger_url: str, tmp_path: Path) -> None:
    with open_ledger(ledger_url, create=True) as ledger:
        ledger.create_dataset("survey_users", inputs=["/data/survey_users/"], epsilon="1")
    process, run_id = _start_hanging_job(ledger_url, tmp_path)
    with open_ledger(ledger_url) as ledger:
        running = ledger.status("survey_users").open_runs
        assert [run.id for run in running] == [run_id]
        assert running[0].process_gone is False
        with pytest.raises(ValueError, match="still running on this host"):
            ledger.release_run(run_id, reason="should not be allowed while it runs")
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL
    with open_ledger(ledger_url) as ledger:
        status = ledger.status("survey_users")
        # Fail closed: the dead job's reservation still counts.
        assert status.reserved.epsilon == Fraction(2, 5)
        assert status.remaining.epsilon == Fraction(3, 5)
        (run,) = status.open_runs
        assert run.id == run_id and run.state == "reserved" and run.process_gone is True
        assert run.shown_state == "reserved (not started; abandoned: process gone)"
        # An owner lifts it explicitly, with a reason that the history keeps.
        released = ledger.release_run(run_id, reason="killed before reading any data")
        assert released.state == "released"
        assert ledger.status("survey_users").remaining.epsilon == 1
        _runs, events = ledger.history("survey_users")
    assert events[-1].action == "release"
    assert events[-1].detail["reason"] == "killed before reading any data"
