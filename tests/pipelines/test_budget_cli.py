"""`python -m pipelines.budget`: create, show, history, renew and release, as tables and JSON."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from beam_dp.ledger import Plan, RunInfo, open_ledger
from pipelines import budget

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[str, dict[str, Any] | None]:
    """Run a command in this process; return its table output, or its JSON parsed."""
    out = io.StringIO()
    budget.run(list(argv), out=out)
    text = out.getvalue()
    return text, json.loads(text) if "--json" in argv else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'ledgers' / 'budget.db'}"


def test_create_show_and_history(url: str, tmp_path: Path) -> None:
    text, _ = cli("create", "--ledger", url, "--dataset", "survey_users", "--input",
        "/data/survey_users/", "--epsilon", "1.0",
                  "--delta", "1e-6", "--renewal", "monthly", "--note", "survey users")  # fmt: skip
    assert "created dataset survey_users" in text
    assert "per calendar month (UTC)" in text
    with open_ledger(url) as ledger:
        run = RunInfo(
            job="pipelines.release",
            config_digest="sha256:" + "ab" * 32,
            inputs=("/data/survey_users/a.avro",),
        )
        ledger.reserve("survey_users", Plan.basic("0.3", statistics=["top", "median"]), run).commit(
            [], str(tmp_path / "out")
        )
        ledger.reserve(
            "survey_users",
            Plan.basic("0.25"),
            RunInfo(job="nightly", inputs=("/data/survey_users/a.avro",)),
        )
    text, _ = cli("show", "--ledger", url)
    lines = text.splitlines()
    assert any(line.split() == ["committed", "0.3", "0"] for line in lines), text
    assert any(line.split() == ["reserved", "0.25", "0"] for line in lines), text
    assert any(line.split() == ["remaining", "0.45", "1e-06"] for line in lines), text
    assert "runs in progress or abandoned" in text
    _, shown = cli("show", "--ledger", url, "--dataset", "survey_users", "--json")
    assert shown is not None
    (dataset,) = shown["datasets"]
    assert dataset["epsilon"] == {"total": 1.0, "committed": 0.3, "reserved": 0.25,
                                  "remaining": 0.45}  # fmt: skip
    assert dataset["exact"]["epsilon"]["remaining"] == "9/20"
    assert dataset["renewal"] == "monthly"
    assert [run["state"] for run in dataset["open_runs"]] == ["reserved"]
    text, _ = cli("history", "--ledger", url, "--dataset", "survey_users")
    assert "top, median" in text and "sha256:abab" in text and "create" in text
    _, history = cli("history", "--ledger", url, "--dataset", "survey_users", "--json")
    assert history is not None
    first = history["runs"][0]
    assert first["state"] == "committed" and first["epsilon"] == 0.3
    assert first["statistics"] == ["top", "median"]
    assert first["output_location"] == str(tmp_path / "out")
    assert [event["action"] for event in history["events"]] == ["create"]


def test_zcdp_dataset_reports_its_epsilon(url: str) -> None:
    _, created = cli("create", "--ledger", url, "--dataset", "z", "--input",
        "/data/z/", "--composition", "zcdp",
                     "--rho", "0.05", "--delta", "1e-6", "--json")  # fmt: skip
    assert created is not None
    assert created["rho"]["total"] == 0.05
    assert created["epsilon_equivalent"]["total"] == pytest.approx(1.4716, abs=1e-4)
    text, _ = cli("show", "--ledger", url, "--dataset", "z")
    assert "epsilon at delta=1e-06" in text


def test_renew_changes_the_rule_from_the_next_period(url: str) -> None:
    cli("create", "--ledger", url, "--dataset", "d", "--input", "/data/d/", "--epsilon", "1")
    _, renewed = cli("renew", "--ledger", url, "--dataset", "d", "--renewal", "weekly",
                     "--epsilon", "0.5", "--json")  # fmt: skip
    assert renewed is not None
    assert renewed["renewal"] == "weekly"
    assert renewed["epsilon"]["total"] == 1.0  # this period keeps its allowance
    assert renewed["period"]["end"] is not None
    _, history = cli("history", "--ledger", url, "--dataset", "d", "--json")
    assert history is not None
    (_, renew) = history["events"]
    assert renew["detail"]["renewal"] == {"from": "none", "to": "weekly"}
    assert renew["detail"]["allowance"]["to"]["epsilon"] == "1/2"


def test_an_owner_releases_a_killed_jobs_reservation(url: str, tmp_path: Path) -> None:
    cli("create", "--ledger", url, "--dataset", "d", "--input", "/data/d/", "--epsilon", "1")
    # A job that reserved and was then killed with SIGKILL.
    code = (
        "import sys, time\n"
        "from beam_dp.ledger import Plan, RunInfo, open_ledger\n"
        "ledger = open_ledger(sys.argv[1])\n"
        "run = RunInfo(job='nightly', inputs=('/data/d/x',))\n"
        "r = ledger.reserve('d', Plan.basic('0.4'), run)\n"
        "print(r.run_id, flush=True)\n"
        "time.sleep(120)\n"
    )
    job = subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, cwd=ROOT)
    assert job.stdout is not None
    run_id = job.stdout.readline().strip().decode()
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=30)
    job.stdout.close()
    text, _ = cli("show", "--ledger", url, "--dataset", "d")
    assert "reserved (not started; abandoned: process gone)" in text
    assert any(line.split() == ["remaining", "0.6", "0"] for line in text.splitlines()), text
    with pytest.raises(Exception, match="belongs to dataset 'd', not 'e'"):
        cli("release", "--ledger", url, "--dataset", "e", "--run", run_id, "--reason", "x")
    _, released = cli("release", "--ledger", url, "--dataset", "d", "--run", run_id,
                      "--reason", "killed before it read any data", "--json")  # fmt: skip
    assert released is not None
    assert released["run"]["state"] == "released"
    assert released["dataset"]["epsilon"]["remaining"] == 1.0
    text, _ = cli("history", "--ledger", url, "--dataset", "d")
    assert "killed before it read any data" in text


def test_errors_are_one_line_and_fail(url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BEAM_DP_LEDGER_URL", None)

    def main(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipelines.budget", *argv],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
        )  # fmt: skip

    missing = main("show", "--ledger", url)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "does not exist" in missing.stderr
    assert not Path(url.removeprefix("sqlite://")).exists()
    assert (
        main(
            "create", "--ledger", url, "--dataset", "d", "--input", "/data/d/", "--epsilon", "1"
        ).returncode
        == 0
    )
    unknown = main("show", "--ledger", url, "--dataset", "dd")
    assert unknown.returncode == 1 and "did you mean 'd'?" in unknown.stderr
    assert main("show", "--ledger", url, "--datset", "d").returncode == 2  # unknown flag
    assert main("show", "--ledger", url, "--data", "d").returncode == 2  # no abbreviations
    bad = main(
        "create", "--ledger", url, "--dataset", "e", "--input", "/data/e/", "--epsilon", "abc"
    )
    assert bad.returncode == 1 and "'epsilon' must be a decimal number" in bad.stderr
    no_url = main("show")
    assert no_url.returncode == 1 and "BEAM_DP_LEDGER_URL" in no_url.stderr
    from_env = subprocess.run(
        [sys.executable, "-m", "pipelines.budget", "show", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**env, "BEAM_DP_LEDGER_URL": url},
    )  # fmt: skip
    assert from_env.returncode == 0 and json.loads(from_env.stdout)["datasets"][0]["dataset"] == "d"
    secret = f"postgresql://beam:hunter2-secret@127.0.0.1:{_free_port()}/ledger"
    down = main("show", "--ledger", secret)
    assert down.returncode == 1 and "hunter2-secret" not in down.stderr + down.stdout
    assert "postgresql://beam:***@127.0.0.1" in down.stderr
