"""The stream job on the DirectRunner, offline, watching a real landing folder (issue 37 item
3): Beam's BundleBasedDirectRunner runs no splittable DoFn in streaming mode, so ``ReadExport``
watches with the job's own watcher (``beam_dp.io.watch.WatchFiles``); shards landing during
the run are published in their windows (the scenario: ``tests/stream_watch_helpers.py``; the
same scenario on Flink: ``tests/engines/test_flink_stream_same_as_direct.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from stream_watch_helpers import Admitted, expected_people, outcome, run_scenario

WINDOW_SECONDS = 4  # a shard lands 2 s into its window: a late poll under load still finds it there


def test_shards_landing_during_the_run_are_published_in_their_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted = Admitted()
    admitted.install(monkeypatch)
    document, size = run_scenario(
        tmp_path,
        ["--runner", "BundleBasedDirectRunner"],
        window_seconds=WINDOW_SECONDS,
        poll_seconds=0.25,
        deadline=120.0,
    )
    result = outcome(document, admitted, size)
    assert [shards for shards, _ in result] == expected_people(), (result, document["windows"])
    for _, releases in result:  # each shard's window published once, with both statistics
        assert len(releases) == 2, result
    assert result[0][1] == result[1][1]  # the same plan in every window
    published = [(r["name"], r["event_window"]) for r in document["releases"]]
    assert len(published) == len(set(published))
    assert (tmp_path / "out" / "release.json").exists()


def test_the_default_runner_watches_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted = Admitted()
    admitted.install(monkeypatch)
    document, size = run_scenario(
        tmp_path, [], window_seconds=WINDOW_SECONDS, poll_seconds=0.25, deadline=120.0
    )  # no --runner: the DirectRunner, never Prism
    assert [shards for shards, _ in outcome(document, admitted, size)] == expected_people()
