"""Exactly one sample per planned release, whatever a runner retries (issue 21).

A lost Dask worker made a release be sampled and published twice, charged once: the job
gathered releases by a side effect of a DoFn. Here both Dask workers are killed with SIGKILL
right after the first release exists (a worker plugin marks it), and the job must publish
exactly its planned releases, each once, or fail closed and stay charged. The other cases: a
scratch location the workers cannot see, the driver's check of what it gathered, one export
under two datasets, and the ledger's clock.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from export_helpers import write_export

from beam_dp.ledger import LedgerError, Plan, RunInfo, open_ledger
from pipelines import budget
from pipelines.execute import (
    PlannedRelease,
    ReleaseCheckError,
    TempLocationError,
    _CommitReleases,
    check_releases,
)

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["de", "fr", "jp"]
SITES = ["a.com", "b.com", "c.com"]


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "user_id": f"u{u}",
            "website": SITES[(u + v) % 3],
            "country": KEYS[u % 3],
            "weight": 40.0 + (u * 7 + v) % 60,
        }
        for u in range(600)
        for v in range(3)
    ]


def _config(tmp_path: Path, pattern: str) -> Path:
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = 3.0

[[statistics]]
name = "sites"
type = "top_candidates"
candidate = "website"
candidates = {json.dumps(SITES)}
k = 2
key = "country"
keys = {json.dumps(KEYS)}
max_keys_per_unit = 1
epsilon = 1.0

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 201
epsilon = 2.0
"""
    )
    return config


PLANNED = Counter([("sites", key) for key in KEYS] + [("median_weight", None)])


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BEAM_DP_LEDGER_URL", None)
    return env


@pytest.mark.slow
def test_killing_both_dask_workers_after_the_first_release_publishes_each_release_once(
    tmp_path: Path,
) -> None:
    distributed = pytest.importorskip("dask.distributed")
    import fault_helpers

    pattern = write_export(tmp_path / "in", "parquet", _rows(), shards=4)
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input",
                f"{tmp_path / 'in'}/", "--epsilon", "3"], out=io.StringIO())  # fmt: skip
    marker = tmp_path / "first-release"
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = distributed.Client(cluster)
    try:
        client.register_plugin(fault_helpers.MarkFirstRelease(str(marker)))
        output = tmp_path / "out"
        job = subprocess.Popen(
            [sys.executable, "-m", "pipelines.release", "--config",
             str(_config(tmp_path, pattern)), "--output", str(output),
             "--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
             "--dask_client_address", cluster.scheduler_address,
             "--ledger", url, "--dataset", "people"],
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert job.poll() is None, job.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no release was ever produced"
            time.sleep(0.005)
        pids = client.run(os.getpid)
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        _out, err = job.communicate(timeout=300)
    finally:
        client.close()
        cluster.close()
    with open_ledger(url) as ledger:
        (run,) = ledger.history("people")[0]
    if job.returncode == 0:
        document = json.loads((output / "release.json").read_text())
        published = Counter((r["name"], r.get("key")) for r in document["releases"])
        assert published == PLANNED, published  # each planned release exactly once
        assert run.state == "committed" and run.cost.epsilon == 3
    else:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err
        assert not output.exists(), "a failed job published"
        assert run.charged and run.started_at is not None, run
        with open_ledger(url) as ledger, pytest.raises(LedgerError, match="may have published"):
            ledger.release_run(run.id, reason="the job failed")


def test_the_driver_publishes_only_exactly_the_planned_releases() -> None:
    planned = [PlannedRelease("a"), PlannedRelease("b", "de"), PlannedRelease("b", "fr")]
    records = [("release", {"name": "a", "value": 1}),
               ("release", {"name": "b", "key": "de", "value": 2}),
               ("release", {"name": "b", "key": "fr", "value": 3}),
               ("skipped", "/data/x.csv")]  # fmt: skip
    got, skipped = check_releases(["releases.json"], records, planned)
    assert [r["value"] for r in got] == [1, 2, 3] and skipped == ["/data/x.csv"]
    twice = [*records, ("release", {"name": "b", "key": "fr", "value": 9})]
    missing = records[:2]
    extra = [*records, ("release", {"name": "b", "key": "jp", "value": 4})]
    for gathered, rule in [(twice, "committed 2 times"), (missing, "is missing"),
                           (extra, "was not planned")]:  # fmt: skip
        with pytest.raises(ReleaseCheckError, match=rule) as info:
            check_releases(["releases.json"], gathered, planned)
        text = str(info.value)
        assert "9" not in text and "value" not in text  # identities only, never a value
    with pytest.raises(ReleaseCheckError, match="nowhere"):
        check_releases([], [], planned)
    with pytest.raises(ReleaseCheckError, match="2 times"):
        check_releases(["a", "b"], records, planned)


def test_the_commit_step_refuses_a_scratch_location_it_cannot_see(tmp_path: Path) -> None:
    # A worker on another host sees no token in "its" scratch directory: it writes nothing.
    scratch = tmp_path / "driver-only"
    scratch.mkdir()
    commit = _CommitReleases(str(scratch), "token-of-the-driver")
    with pytest.raises(TempLocationError, match="give --temp_location a location"):
        list(commit.process([("release", {"name": "a", "value": 1})]))
    assert list(scratch.iterdir()) == []
    (scratch / "driver.token").write_text("token-of-the-driver")
    (written,) = commit.process([("release", {"name": "a", "value": 1})])
    assert json.loads(Path(written).read_text()) == [["release", {"name": "a", "value": 1}]]
    # A second attempt replaces the first under the same name: one committed set.
    (again,) = commit.process([("release", {"name": "a", "value": 2})])
    assert again == written and sorted(p.name for p in scratch.iterdir()) == [
        "driver.token", "releases.json"]  # fmt: skip


def _isolated_worker(scheduler: str, hidden: Path, log: Any) -> subprocess.Popen[bytes]:
    """A Dask worker in its own mount namespace, where ``hidden`` is an empty tmpfs: it stands
    for a worker on another host, which cannot see the driver's files there."""
    script = (
        f"mount -t tmpfs tmpfs {hidden} && exec {sys.executable} -m distributed.cli.dask_worker "
        f"{scheduler} --nthreads 1 --nworkers 1 --no-dashboard"
    )
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env={**_env(), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.slow
def test_a_worker_that_cannot_see_the_temp_location_fails_the_job_before_it_reads(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must be able to run a worker in its own mount namespace (root)")
        pytest.skip("a worker in its own mount namespace needs root and unshare")
    distributed = pytest.importorskip("dask.distributed")
    pattern = write_export(tmp_path / "in", "parquet", _rows(), shards=2)
    shared = tmp_path / "not-shared"
    shared.mkdir()
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input",
                f"{tmp_path / 'in'}/", "--epsilon", "3"], out=io.StringIO())  # fmt: skip
    cluster = distributed.LocalCluster(n_workers=0, dashboard_address=":0")
    log = (tmp_path / "worker.log").open("wb")
    worker = _isolated_worker(cluster.scheduler_address, shared, log)
    try:
        with distributed.Client(cluster) as client:
            client.wait_for_workers(1, timeout=120)
        output = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.release", "--config",
             str(_config(tmp_path, pattern)), "--output", str(output),
             "--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
             "--dask_client_address", cluster.scheduler_address,
             "--temp_location", str(shared), "--ledger", url, "--dataset", "people"],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        log.close()
        cluster.close()
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "cannot see the temporary location" in line and "no data was read" in line
    assert not output.exists()
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
        assert runs == []  # refused before the reservation: nothing charged
        assert ledger.status("people").remaining.epsilon == 3


def test_one_export_cannot_be_charged_to_two_datasets(tmp_path: Path) -> None:
    export = tmp_path / "people"
    pattern = write_export(export, "csv", _rows()[:30], shards=1)
    url = f"sqlite://{tmp_path / 'budget.db'}"

    def run(*argv: str) -> dict[str, Any]:
        return budget.run(list(argv), out=io.StringIO())

    run("create", "--ledger", url, "--dataset", "people", "--input", f"{export}/",
        "--epsilon", "1")  # fmt: skip
    with pytest.raises(LedgerError, match=r"may overlap .* which dataset 'people' protects"):
        run("create", "--ledger", url, "--dataset", "people_v2", "--input", str(export),
            "--epsilon", "1")  # fmt: skip
    with pytest.raises(LedgerError, match="may overlap"):
        run("create", "--ledger", url, "--dataset", "people_v2", "--input", f"{tmp_path}/*",
            "--epsilon", "1")  # fmt: skip
    run("create", "--ledger", url, "--dataset", "people_v2", "--input", f"{tmp_path}/copy/",
        "--epsilon", "1")  # fmt: skip
    (file,) = sorted(export.iterdir())
    with open_ledger(url) as ledger:
        for dataset, files, rule in [
            ("people_v2", [str(file)], "registered to dataset 'people'"),
            ("people_v2", [str(export / ".." / "people" / file.name)], "registered to dataset"),
            ("people", [str(tmp_path / "elsewhere.csv")], "lies outside what dataset"),
        ]:
            with pytest.raises(LedgerError, match=rule):
                ledger.reserve(dataset, Plan.basic("0.5"), RunInfo(job="j", inputs=tuple(files)))
        link = tmp_path / "copy" / "link.csv"
        link.parent.mkdir()
        link.symlink_to(file)  # a link leads back to the registered file: refused too
        with pytest.raises(LedgerError, match="registered to dataset 'people'"):
            ledger.reserve("people_v2", Plan.basic("0.5"), RunInfo(job="j", inputs=(str(link),)))
        ledger.reserve("people", Plan.basic("0.5"), RunInfo(job="j", inputs=(str(file),)))
        shown = ledger.status("people").to_json()
    assert shown["inputs"] == [f"{export.resolve()}/"]
    text = io.StringIO()
    budget.run(["show", "--ledger", url, "--dataset", "people"], out=text)
    assert f"protects: {export.resolve()}/" in text.getvalue()
    del pattern


def test_a_clock_set_back_is_refused(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    now = datetime(2026, 3, 31, 23, 0, tzinfo=UTC)

    class Clock:
        moment = now

        def __call__(self) -> datetime:
            return self.moment

    clock = Clock()
    run = RunInfo(job="j", inputs=("/data/people/x.csv",))
    with open_ledger(url, create=True, clock=clock) as ledger:
        ledger.create_dataset("people", inputs=["/data/people/"], epsilon="1", renewal="monthly")
        ledger.reserve("people", Plan.basic("1"), run)
        clock.moment = now - timedelta(hours=2)
        with pytest.raises(LedgerError, match="earlier than the latest time"):
            ledger.reserve("people", Plan.basic("1"), run)


def test_postgresql_takes_its_periods_from_the_server_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four clients whose clocks are 0 to 3 months ahead, on a monthly allowance of 1.0.
    import beam_dp.ledger._tables as tables

    real = datetime.now(UTC)
    run = RunInfo(job="j", inputs=("/data/people/x.csv",))
    with open_ledger(postgres_url, create=True) as ledger:
        ledger.create_dataset("people", inputs=["/data/people/"], epsilon="1", renewal="monthly")
    outcomes = []
    ahead = [timedelta(0)]

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real + ahead[0]

    monkeypatch.setattr(tables, "datetime", Ahead)
    for months in range(4):
        ahead[0] = timedelta(days=31 * months)
        with open_ledger(postgres_url) as ledger:
            try:
                ledger.reserve("people", Plan.basic("1"), run).commit([], "out")
                outcomes.append("ok")
            except LedgerError:
                outcomes.append("refused")
    assert outcomes == ["ok", "refused", "refused", "refused"]


def test_every_ledger_url_error_is_one_line(tmp_path: Path) -> None:
    for command in (["create", "--dataset", "d", "--input", "/data/d/", "--epsilon", "1"],
                    ["show"]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.budget", *command, "--ledger",
             f"sqlite://{tmp_path}/a%00b.db"],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr
        assert "control character" in done.stderr
