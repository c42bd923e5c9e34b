"""The DirectRunner runs jobs on Beam's FnApiRunner directly (no Prism download attempt)."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner

from pipelines.execute import _runner


@pytest.mark.parametrize("flags", [[], ["--runner=DirectRunner"], ["--runner", "direct"]])
def test_the_direct_runner_is_built_as_the_fn_api_runner(flags: list[str]) -> None:
    runner = _runner(PipelineOptions(flags))
    assert isinstance(runner, fn_runner.FnApiRunner)


def test_other_runners_are_left_to_beam() -> None:
    options = PipelineOptions(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"])
    assert _runner(options) is None


def test_a_flink_job_defaults_to_the_flink_this_project_builds() -> None:
    from pipelines.flags import FLINK_VERSION, _default_flink_version

    assert _default_flink_version(["--runner", "FlinkRunner"]) == [
        "--runner", "FlinkRunner", "--flink_version", FLINK_VERSION]  # fmt: skip
    given = ["--runner", "FlinkRunner", "--flink_version", "1.20"]
    assert _default_flink_version(given) == given
    assert _default_flink_version(["--runner", "SparkRunner"]) == ["--runner", "SparkRunner"]
