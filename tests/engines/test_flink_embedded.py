"""Beam's FlinkRunner on an embedded Flink mini cluster (``--flink_master [local]``), the SDK
harness in this process (LOOPBACK): the five jobs and the library transforms, windowed ones
included (tests/engines/windowed_batch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_jobs import JOBS, write_survey
from windowed_batch import run_windowed

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-embedded")

FLAGS = ["--runner", "FlinkRunner", "--flink_version", "1.19", "--environment_type", "LOOPBACK"]


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_survey(tmp_path_factory.mktemp("survey"))


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_on_flink_embedded(job: str, survey: str, flink_embedded: str, tmp_path: Path) -> None:
    JOBS[job](survey, tmp_path / "out", [*FLAGS, "--job_endpoint", flink_embedded])


def test_windowed_releases_on_flink_embedded(flink_embedded: str, tmp_path: Path) -> None:
    run_windowed([*FLAGS, "--job_endpoint", flink_embedded], tmp_path)
