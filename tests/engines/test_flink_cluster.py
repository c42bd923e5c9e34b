"""Beam's FlinkRunner on a real local Flink 1.19 cluster: a JobManager and a TaskManager
(separate JVMs from the Flink distribution), SDK workers as separate processes of a worker pool
(``--environment_type EXTERNAL``). The release job, and the sampling half of the end-to-end
privacy audit (tests/audit) with the same statistical test."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from engine_jobs import job_quantiles, job_release, write_survey
from engines_env import DumpElements, load_test_module
from stats_helpers import clopper_pearson

from beam_dp.beam.selection import Election
from beam_dp.release import Release

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-cluster")

AUDIT = Path(__file__).parents[1] / "audit" / "test_end_to_end_audit.py"


def test_release_job_on_a_flink_cluster(flink_cluster: Any, tmp_path: Path) -> None:
    pattern = write_survey(tmp_path / "in")
    job_release(pattern, tmp_path / "out", flink_cluster.flags())


def test_more_instances_than_slots_run_in_turns_with_blocking_exchanges(
    flink_cluster: Any, tmp_path: Path
) -> None:
    """--parallelism 4 on the cluster's 2 slots: with --execution_mode_for_batch BATCH_FORCED
    every exchange is blocking and Flink runs each instance as slots free up (what keeps each
    bundle's output small at 10^8 rows, benchmarks/SCALE.md); the release is the job's own."""
    pattern = write_survey(tmp_path / "in")
    flags = flink_cluster.flags("--parallelism", "4", "--execution_mode_for_batch", "BATCH_FORCED")
    job_quantiles(pattern, tmp_path / "out", flags)


def _audit_module() -> Any:
    """tests/audit/test_end_to_end_audit.py, for its data and constants (not its tests)."""
    return load_test_module(AUDIT, "end_to_end_audit_for_engines")


def sampled_loss_on_flink(
    audit: Any, flags: list[str], directory: Path, trials: int, *, split_adversary: bool
) -> tuple[float, dict[str, tuple[int, int]]]:
    """The audit's ``sampled_loss`` (tests/audit), run on the cluster: keys ``0 .. trials-1``
    hold D, keys ``trials .. 2 trials - 1`` hold D'; the same Clopper-Pearson bound at the same
    level, Bonferroni over the same four events.

    ``split_adversary`` (the control) gives each of the adversary's rows a unit id of its own:
    D' then differs from D by 48 units, not one, and the bound must exceed ε.
    """
    background, *adversary = audit._trial_batches(trials, trials, True)
    if split_adversary:  # the adversary's two batches, every row a unit of its own
        adversary = [
            batch.set_column(0, "user", [[f"x{j}-{i}" for i in range(batch.num_rows)]])
            for j, batch in enumerate(adversary)
        ]
    batches = [*audit._trial_batches(trials, 0, False), background, *adversary]
    with beam.Pipeline(options=PipelineOptions(flags)) as pipeline:
        _ = (
            pipeline
            | beam.Create(batches, reshuffle=False)
            | Election.PerKey(
                candidate_column="vote",
                candidates=["A", "B"],
                unit_column="user",
                key_column="trial",
                keys=list(range(2 * trials)),
                max_keys_per_unit=1,
                epsilon=audit.EPSILON,
                name="sampled_vote",
                salt=audit.SALT,
            )
            | DumpElements.into(directory)
        )
    out: list[Release] = [release for release, _ in DumpElements.read(directory)]
    assert sorted(r.key for r in out) == list(range(2 * trials))  # each key released once
    hits = {
        label: (
            sum(1 for r in out if r.key < trials and r.value == label),
            sum(1 for r in out if r.key >= trials and r.value == label),
        )
        for label in ("A", "B")
    }
    alpha = audit.SAMPLING_ALPHA / 4
    bound = -math.inf
    for in_d, in_dp in hits.values():
        for x, y in ((in_d, in_dp), (in_dp, in_d)):
            lower_x, _ = clopper_pearson(x, trials, alpha)
            _, upper_y = clopper_pearson(y, trials, alpha)
            if lower_x > 0:
                bound = max(bound, math.log(lower_x / upper_y))
    return bound, hits


def test_sampled_privacy_loss_on_a_flink_cluster_is_at_most_epsilon(
    flink_cluster: Any, tmp_path: Path
) -> None:
    audit = _audit_module()
    bound, hits = sampled_loss_on_flink(  # as many trials as on the DirectRunner
        audit,
        flink_cluster.flags(),
        tmp_path / "releases",
        audit.SAMPLING_TRIALS,
        split_adversary=False,
    )
    assert bound <= audit.EPSILON, f"lower bound on the loss {bound:.3f} > ε; outcomes {hits}"


def test_the_flink_sampling_audit_detects_a_neighbour_that_is_many_units(
    flink_cluster: Any, tmp_path: Path
) -> None:
    # The control: the same harness on the same cluster must see a loss far above ε.
    audit = _audit_module()
    bound, hits = sampled_loss_on_flink(
        audit,
        flink_cluster.flags(),
        tmp_path / "releases",
        audit.SAMPLING_TRIALS // 10,
        split_adversary=True,
    )
    assert bound > audit.EPSILON, f"the control went unnoticed: {bound:.3f}; {hits}"
