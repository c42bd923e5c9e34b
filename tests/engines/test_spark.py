"""Beam's SparkRunner on Spark ``local[2]`` (the SDK harness in this process: LOOPBACK): the
five jobs and windowed releases (tests/engines/windowed_batch.py), through one Spark job
server for the session."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_jobs import JOBS, write_survey
from windowed_batch import run_windowed

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("spark")

FLAGS = ["--runner", "SparkRunner", "--environment_type", "LOOPBACK"]


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_survey(tmp_path_factory.mktemp("survey"))


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_on_spark_local(job: str, survey: str, spark_job_server: str, tmp_path: Path) -> None:
    JOBS[job](survey, tmp_path / "out", [*FLAGS, "--job_endpoint", spark_job_server])


def test_windowed_releases_on_spark_local(spark_job_server: str, tmp_path: Path) -> None:
    run_windowed([*FLAGS, "--job_endpoint", spark_job_server], tmp_path)
