"""The streaming job (issue 26) on Beam's BundleBasedDirectRunner with a TestStream in place of
the watched landing location: windows, lateness, budget per window, exactly-once publishing,
and restarts."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from beam_dp.batching import canonical_hash64
from beam_dp.ledger import open_ledger
from pipelines import budget, stream

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary (2027-01-15)


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
        'candidates = ["a", "b"]\nweight = 1\n\n'
        '[[statistics]]\nname = "weight"\ntype = "median"\nvalue = "weight"\nlower = 0.0\n'
        "upper = 200.0\nnum_points = 201\nmax_contributions = 1\nweight = 1\n"
    )
    return config


def _batch(users: range, vote: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "user_id": [f"u{u}" for u in users],
            "vote": [vote] * len(users),
            "weight": [50.0 + u % 40 for u in users],
        }
    )


def _source(events: list[tuple[float, pa.RecordBatch]]) -> Any:
    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for stamp, batch in events:
            test = test.add_elements([TimestampedValue((f"shard-{stamp}.csv", batch), stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", str(_config(tmp_path)), "--landing", "/data/landing/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "2", "--poll_seconds", "0.2",
            "--runner", "BundleBasedDirectRunner", *extra]  # fmt: skip


def test_each_window_releases_once_and_is_charged_before_it_opens(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "100"], out=io.StringIO())  # fmt: skip
    events = [
        (BASE + 5, _batch(range(0, 200), "a")),
        (BASE + SIZE + 5, _batch(range(100, 300), "b")),
        (BASE + 2 * SIZE + 5, _batch(range(200, 400), "a")),
    ]
    document = stream.run(
        _argv(tmp_path, "--ledger", url, "--dataset", "people", "--max_windows_per_unit", "2"),
        source=_source(events),
        now=lambda: BASE,
    )
    published = [(r["name"], r["event_window"]) for r in document["releases"]]
    windows = sorted({w for _, w in published})
    assert len(windows) == 3 and len(published) == 6, published
    assert all(published.count(p) == 1 for p in published)  # each release once
    on_disk = json.loads((tmp_path / "out" / "release.json").read_text())
    assert len(on_disk["releases"]) == 6
    lines = (tmp_path / "out" / "releases.jsonl").read_text().splitlines()
    assert len(lines) == 6
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    committed = [run for run in runs if run.state == "committed"]
    assert len(committed) == 3
    # each window's run was reserved and started before its data, and charged its share: the
    # window's budget (2) over the windows a person may count in (2)
    assert all(run.cost.epsilon == 1 for run in committed)
    assert all(run.details["stream"] == document["run"]["id"] for run in runs)


def test_a_window_without_budget_admits_nothing_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "2"], out=io.StringIO())  # fmt: skip
    events = [
        (BASE + 5, _batch(range(0, 200), "a")),
        (BASE + SIZE + 5, _batch(range(100, 300), "b")),
    ]
    document = stream.run(
        _argv(tmp_path, "--ledger", url, "--dataset", "people", "--max_windows_per_unit", "1"),
        source=_source(events),
        now=lambda: BASE,
    )
    statuses = [w["status"] for w in document["windows"]]
    assert statuses[:2] == ["published", "refused"], document["windows"]
    assert {r["event_window"] for r in document["releases"]} == {document["windows"][0]["window"]}


def _committed_persons(tmp_path: Path, run: int, window: int) -> set[int]:
    """The persons run ``run``'s pipeline committed for ``window`` (keyed hashes)."""
    path = tmp_path / "state" / "scratch" / str(run) / f"{BASE // SIZE + window}.json"
    return set(json.loads(path.read_text())["persons"])


def _keyed(tmp_path: Path, users: range) -> set[int]:
    key = stream.person_key(stream.StreamState(str(tmp_path / "state")))
    stable, bad = canonical_hash64(pa.array([f"u{u}" for u in users]))
    assert not bad.any()
    return {int(h) for h in stream.person_hashes(key, stable)}


def test_a_restart_after_a_published_window_goes_on_with_each_persons_windows(
    tmp_path: Path,
) -> None:
    """One window per person (the default): the restart admits the people who have not used
    their window and none of those who have; a state of another job is refused."""
    first = [(BASE + 5, _batch(range(0, 100), "a"))]
    stream.run(_argv(tmp_path), source=_source(first), now=lambda: BASE)
    assert _committed_persons(tmp_path, 1, 0) == _keyed(tmp_path, range(0, 100))
    second = [(BASE + SIZE + 5, _batch(range(50, 150), "b"))]
    document = stream.run(_argv(tmp_path), source=_source(second), now=lambda: BASE + SIZE)
    assert len({r["event_window"] for r in document["releases"]}) == 2  # it went on
    # users 50-99 used their window in the first run: only 100-149 are in the second
    assert _committed_persons(tmp_path, 2, 1) == _keyed(tmp_path, range(100, 150))
    for path in (tmp_path / "out").iterdir():  # the hashes stay in --state
        if path.is_file():
            assert str(min(_keyed(tmp_path, range(0, 150)))) not in path.read_text(errors="ignore")
    with pytest.raises(ValueError, match="another job"):
        stream.run(_argv(tmp_path, "--window_seconds", "30"), source=_source(first))


def test_a_restart_before_any_window_was_published_reuses_its_grants(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "100"], out=io.StringIO())  # fmt: skip
    argv = _argv(tmp_path, "--ledger", url, "--dataset", "people")
    # stopped having read one batch without records: its windows granted, nothing published
    first = stream.run(argv, source=_source([(BASE + 5, _batch(range(0), "a"))]), now=lambda: BASE)
    assert first["releases"] == []
    with open_ledger(url) as ledger:
        granted = [run.id for run in ledger.history("people")[0]]
    assert len(granted) == 3  # the current window and two ahead, charged once it read
    events = [(BASE + 5, _batch(range(0, 150), "a"))]
    second = stream.run(argv, source=_source(events), now=lambda: BASE)
    assert second["run"]["id"] == first["run"]["id"]  # the same job goes on
    with open_ledger(url) as ledger:
        runs = ledger.history("people")[0]
    assert [run.id for run in runs] == granted  # no window was charged twice
    assert [run.state for run in runs].count("committed") == 1


class _CancelledResult:
    """A runner's result whose ``wait_until_finish`` raises once the job is cancelled, as Beam's
    portable runner does ("failed in state CANCELLED"); ``cancel`` returns only after the
    waiting thread has seen it (the order that made the Flink job test fail now and then)."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._waiter: threading.Thread | None = None

    def wait_until_finish(self) -> None:
        self._waiter = threading.current_thread()
        self._cancelled.wait()
        raise RuntimeError("Pipeline job-1 failed in state CANCELLED: ")

    def cancel(self) -> None:
        self._cancelled.set()
        assert self._waiter is not None
        self._waiter.join()


def test_a_job_that_stops_itself_does_not_report_its_own_cancel_as_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = tmp_path / "stop"
    stop.touch()  # the job stops at its first look, and cancels the pipeline
    monkeypatch.setattr(beam.Pipeline, "run", lambda self: _CancelledResult())
    document = stream.run(
        _argv(tmp_path, "--stop_file", str(stop)), source=_source([]), now=lambda: BASE
    )
    assert document["releases"] == []


def test_the_job_ends_with_the_summary_and_the_ledger_charges_as_the_batch_jobs_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "100"], out=io.StringIO())  # fmt: skip
    capsys.readouterr()
    events = [(BASE + 5, _batch(range(0, 200), "a")), (BASE + SIZE + 5, _batch(range(0, 90), "b"))]
    stream.run(
        _argv(tmp_path, "--ledger", url, "--dataset", "people", "--max_windows_per_unit", "2"),
        source=_source(events),
        now=lambda: BASE,
    )
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:3] == ["name", "key", "released"], printed
    assert printed.count("\nvote ") == 2 and printed.count("\nweight ") == 2, printed
    # three windows granted (the current one and two ahead), each charged 2 / 2
    ledger = next(line for line in printed.splitlines() if line.startswith("ledger "))
    assert ledger.endswith("charged epsilon=3, delta=0 to dataset 'people'"), ledger
    assert "(one per window)" in ledger, ledger
    assert "epsilon=97, delta=0 left of epsilon=100, delta=0" in printed, printed
    # the config's budget is each person's over the job; a window spends it / 2 (issue 37)
    assert (
        "\nbudget per window: epsilon 1, delta 0 (the config's epsilon 2, delta 0 over "
        "--max_windows_per_unit 2; basic composition); each person, over every window of the "
        "job: at most epsilon 2, delta 0\n"
    ) in printed, printed
    assert " spent" not in printed, printed
