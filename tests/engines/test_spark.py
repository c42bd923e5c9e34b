"""Beam's SparkRunner on Spark ``local[2]`` (the SDK harness in this process: LOOPBACK): the
five jobs, through one Spark job server for the session."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_jobs import JOBS, write_survey

FLAGS = ["--runner", "SparkRunner", "--environment_type", "LOOPBACK"]


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_survey(tmp_path_factory.mktemp("survey"))


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_on_spark_local(job: str, survey: str, spark_job_server: str, tmp_path: Path) -> None:
    JOBS[job](survey, tmp_path / "out", [*FLAGS, "--job_endpoint", spark_job_server])
