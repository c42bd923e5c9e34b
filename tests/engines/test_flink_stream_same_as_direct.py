"""The stream job gives the same releases on the DirectRunner (the job's own watcher,
``beam_dp.io.watch``) as on Flink (``fileio.MatchContinuously``, embedded mini cluster,
LOOPBACK) for the same seeded landings (issue 37 item 3).

"The same" for DP releases (``tests/stream_watch_helpers.py``): the sampled values come from
the OS CSPRNG and differ between any two runs; what must not differ is which rows each window
admitted (the shard landed in it, every one of its people) and each window's planned releases
(statistics, mechanism, epsilon, bounds, accuracy statement). Both runs see shard 1 land in
the middle of the second window after their pipeline first read, shard 2 in the third.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stream_watch_helpers import Admitted, expected_people, outcome, run_scenario

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-embedded")

WINDOW_SECONDS = 10  # Flink's reads lag a few seconds; a shard lands 5 s into its window
DEADLINE = 480.0  # seconds: only ends a job that hangs (the test then fails on its windows)


def test_the_same_landings_give_the_same_releases_on_direct_and_flink(
    flink_embedded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = []
    for name, flags in (
        ("direct", ["--runner", "BundleBasedDirectRunner"]),
        ("flink", ["--runner", "FlinkRunner", "--flink_version", "1.19",
                   "--job_endpoint", flink_embedded, "--environment_type", "LOOPBACK"]),
    ):  # fmt: skip
        admitted = Admitted()  # the rows each window admitted (AssignWindows, this process)
        with monkeypatch.context() as patch:
            admitted.install(patch)
            folder = tmp_path / name
            folder.mkdir()
            document, size = run_scenario(
                folder, flags, window_seconds=WINDOW_SECONDS, poll_seconds=1.0, deadline=DEADLINE
            )
        outcomes.append(outcome(document, admitted, size))
    direct, flink = outcomes
    assert [shards for shards, _ in flink] == expected_people(), flink
    assert all(len(releases) == 2 for _, releases in flink), flink
    assert direct == flink
