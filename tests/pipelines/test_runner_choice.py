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


def test_flinks_batch_execution_mode_is_a_known_flag_and_reaches_the_job_server() -> None:
    """Beam's Python SDK does not define the Flink job server's ``executionModeForBatch``; the
    jobs do (benchmarks/SCALE.md: BATCH_FORCED lets a --parallelism above the cluster's slots
    run in turns, so each bundle's output held by the TaskManager stays small)."""
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    from pipelines.common import check_pipeline_flags

    flags = ["--runner", "FlinkRunner", "--parallelism", "32",
             "--execution_mode_for_batch", "BATCH_FORCED"]  # fmt: skip
    check_pipeline_flags(flags)  # raised 'unknown flag' before
    encoded = JobServiceHandle.encode_pipeline_options(PipelineOptions(flags).get_all_options())
    assert encoded["beam:option:execution_mode_for_batch:v1"] == "BATCH_FORCED"
    # unset, nothing is sent: the job server's own default (PIPELINED) holds
    unset = JobServiceHandle.encode_pipeline_options(
        PipelineOptions(["--runner", "FlinkRunner"]).get_all_options()
    )
    assert "beam:option:execution_mode_for_batch:v1" not in unset


def test_a_misspelt_flink_execution_mode_fails_closed() -> None:
    from pipelines.common import check_pipeline_flags

    with pytest.raises(SystemExit):  # argparse's invalid choice, as for --flink_version
        check_pipeline_flags(
            ["--runner", "FlinkRunner", "--execution_mode_for_batch", "BATCH_FORCD"]
        )
