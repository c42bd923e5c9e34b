"""Private quantiles and means on Beam: CombineFn contract, pipelines, keys, windows, budget."""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import uuid
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.accounting import PrivacyBudget
from beam_dp.batching import VALUE
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import (
    PrivateMax,
    PrivateMedian,
    PrivateMin,
    PrivateQuantiles,
    QuantileCombineFn,
)
from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, selection_probabilities
from beam_dp.release import Release
from beam_dp.scores import QuantileScore
from beam_dp.summaries.histogram import Grid, GridHistogram, less_greater
from beam_dp.summaries.quantiles.intervals import DEFAULT_INTERVAL_FRACTION

HUGE = 1e5  # test-only epsilon: the selection is (almost surely) the best grid point


class _Collect(beam.DoFn):
    """Pickle every release into a directory (runners pickle DoFns: no shared memory)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Release) -> None:
        path = os.path.join(self._directory, uuid.uuid4().hex)
        with open(path, "wb") as handle:
            pickle.dump(release, handle)


def collect(directory: str) -> list[Release]:
    releases = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            releases.append(pickle.load(handle))
    return releases


def run(build: Any, runner: Any = None, options: PipelineOptions | None = None) -> list[Release]:
    """Run ``build(pipeline)`` and return the releases it produces."""
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=runner or FnApiRunner(), options=options) as pipeline:
            _ = build(pipeline) | beam.ParDo(_Collect(directory))
        return collect(directory)


def batches(values: np.ndarray, size: int = 100, **columns: np.ndarray) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, values.size, size):
        data = {"value": values[start : start + size]}
        data.update({name: column[start : start + size] for name, column in columns.items()})
        out.append(pa.record_batch(data))
    return out


# ------------------------------------------------------------------- the CombineFn contract


def combine_fn(**options: Any) -> QuantileCombineFn:
    transform = PrivateQuantiles.Globally(
        [0.25, 0.5, 0.75], lower=0.0, upper=10.0, record_level=True, **options
    )
    return QuantileCombineFn(transform._spec)


def test_combine_fn_driven_by_hand_over_shards_equals_one_pass() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(5, 2, 3000)
    elements: list[Any] = [{VALUE: chunk} for chunk in np.array_split(values, 12)]
    elements += [7.5, np.float64(2.5), np.array([1.0, math.nan]), {}]
    fn = combine_fn(epsilon=1.0, num_points=1001)

    shards = [elements[0:5], elements[5:11], elements[11:]]
    accumulators = []
    for shard in shards:
        accumulator = fn.create_accumulator()
        for element in shard:
            accumulator = fn.add_input(accumulator, element)
        accumulators.append(fn.compact(accumulator))
    merged = fn.merge_accumulators(accumulators)

    one = fn.create_accumulator()
    for element in elements:
        one = fn.add_input(one, element)
    assert merged is accumulators[0]  # merged into the first accumulator
    assert merged == one
    assert merged.total == values.size + 3  # NaN dropped

    with pytest.warns(InsecureRandomWarning):
        seeded = [
            combine_fn(epsilon=1.0, num_points=1001, rng=InsecureSeededRandom(3)) for _ in "ab"
        ]
    releases = [fn.extract_output(acc) for fn, acc in zip(seeded, (merged, one), strict=True)]
    assert releases[0].value == releases[1].value
    assert releases[0].rng_secure is False


def test_accumulators_are_grid_histograms_of_bounded_size() -> None:
    fn = combine_fn(epsilon=1.0, num_points=2001)
    accumulator = fn.create_accumulator()
    for _ in range(10):
        accumulator = fn.add_input(
            accumulator, {VALUE: np.random.default_rng().uniform(0, 10, 10**4)}
        )

    assert isinstance(accumulator, GridHistogram)
    assert accumulator.nbytes <= 8 * Grid.uniform(0.0, 10.0, 2001).num_slots


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"epsilon": 0.0}, ValueError, "'epsilon' must be > 0"),
        ({"epsilon": -1.0}, ValueError, "'epsilon' must be > 0"),
        ({"epsilon": math.nan}, ValueError, "'epsilon' must be > 0"),
        ({"epsilon": math.inf}, ValueError, "'epsilon' must be > 0"),
        ({"lower": 10.0}, ValueError, "'lower' must be < 'upper'"),
        ({"lower": math.nan}, ValueError, "'lower' must be finite"),
        ({"upper": math.nan}, ValueError, "'upper' must be finite"),
        ({"num_points": 10**7}, ValueError, "grid too large"),
        ({"grid": "log"}, ValueError, "'lower' must be > 0 for a log grid"),
        ({"grid": "cubic"}, ValueError, "'grid' must be"),
        ({"grid": [1.0, 0.5]}, ValueError, "strictly increasing"),
        ({"quantiles": [0.5, 1.0]}, ValueError, r"quantiles\[1\]"),
        ({"max_contributions": 3}, ValueError, "'max_contributions' applies only"),
        ({"relation": "swap"}, ValueError, "'relation'"),
        ({"method": "laplace"}, ValueError, "'method'"),
        ({"split": "jointexp"}, ValueError, "'split'"),
        ({"confidence": 0.0}, ValueError, "'confidence'"),
        ({"refine": True, "refine_fraction": 1.0}, ValueError, "'refine_fraction'"),
        ({"refine_points": 10}, ValueError, "only with refine=True"),
        ({"refine": True, "refine_points": 2**21 + 1}, ValueError, "'refine_points'"),
        ({"unit_column": "user", "value_column": None}, ValueError, "'value_column'"),
        ({"on_bad_record": "ignore"}, ValueError, "'on_bad_record'"),
        ({"keys": ["a"]}, ValueError, "only to .PerKey"),
    ],
)
def test_bad_parameters_fail_at_construction(
    options: dict[str, Any], error: type, message: str
) -> None:
    arguments: dict[str, Any] = {
        "quantiles": [0.5],
        "lower": 0.0,
        "upper": 10.0,
        "epsilon": 1.0,
        "unit_column": None,
        "record_level": True,
    }
    arguments.update(options)
    arguments["record_level"] = arguments["unit_column"] is None
    quantiles = arguments.pop("quantiles")
    with pytest.raises(error, match=message):
        PrivateQuantiles.Globally(quantiles, **arguments)


def test_per_key_needs_public_keys_and_a_key_column() -> None:
    with pytest.raises(ValueError, match="'keys'"):
        PrivateQuantiles.PerKey([0.5], lower=0, upper=1, epsilon=1.0, record_level=True)
    with pytest.raises(ValueError, match="'key_column'"):
        PrivateQuantiles.PerKey(
            [0.5], lower=0, upper=1, epsilon=1.0, record_level=True, keys=["a"], key_column=""
        )
    with pytest.raises(ValueError, match="distinct"):
        PrivateMedian.PerKey(lower=0, upper=1, epsilon=1.0, record_level=True, keys=["a", "a"])
    with pytest.raises(ValueError, match="'tail'"):
        PrivateMin.Globally(lower=0, upper=1, epsilon=1.0, record_level=True, tail=0.5)


def test_budget_shares_must_be_allocated_and_match() -> None:
    budget = PrivacyBudget(2.0)
    planned = budget.request("q", mechanism="permute_and_flip", rounds=1)
    with pytest.raises(ValueError, match="finalize"):
        PrivateQuantiles.Globally(
            [0.25, 0.75], lower=0, upper=1, epsilon=planned, record_level=True
        )
    budget.finalize()
    with pytest.raises(ValueError, match="rounds=2"):  # the joint split: ceil(log3(4 + 1))
        PrivateQuantiles.Globally(
            [0.25, 0.5, 0.75, 0.9],
            lower=0,
            upper=1,
            epsilon=planned,
            record_level=True,
            interval=False,
        )
    # With the intervals (the default): two more rounds per quantile, 2 + 2 * 4.
    with pytest.raises(ValueError, match="rounds=10"):
        PrivateQuantiles.Globally(
            [0.25, 0.5, 0.75, 0.9], lower=0, upper=1, epsilon=planned, record_level=True
        )
    with pytest.raises(ValueError, match="mechanism"):
        PrivateQuantiles.Globally(
            [0.25, 0.75],
            lower=0,
            upper=1,
            epsilon=planned,
            record_level=True,
            method="exponential",
            interval=False,
        )
    transform = PrivateQuantiles.Globally(
        [0.25, 0.75], lower=0, upper=1, epsilon=planned, record_level=True, interval=False
    )
    assert transform.plan.rounds == 1 and transform.plan.epsilon == Fraction(2.0)


def test_labels_and_display_data_describe_the_release() -> None:
    transform = PrivateQuantiles.PerKey(
        [0.1, 0.9],
        lower=0.0,
        upper=5.0,
        epsilon=2.0,
        unit_column="user",
        keys=["x", "y", "z"],
        max_keys_per_unit=2,
        max_contributions=4,
        name="latency",
    )

    assert transform.default_label() == "PrivateQuantiles.PerKey(latency)"
    shown = transform.display_data()
    assert shown["epsilon"] == 2.0 and shown["epsilon_per_key"] == 1.0
    assert shown["num_points"] == 1_000_000 and shown["split"] == "joint"  # auto, m = 2
    assert shown["num_keys"] == 3 and shown["rounds"] == 1
    assert "max_contributions_per_unit': 4" in shown["contribution_bounds"]
    assert (
        PrivateMedian.Globally(lower=0, upper=1, epsilon=1.0, record_level=True).default_label()
        == "PrivateMedian.Globally(median)"
    )


# ---------------------------------------------------------------------------- pipelines


def test_globally_on_record_batches_releases_accurate_quantiles() -> None:
    rng = np.random.default_rng(4)
    values = rng.lognormal(0, 1, 5000)
    values[::97] = math.nan  # dropped by the public rule
    values[::101] = 1e9  # clamped to the upper bound

    (release,) = run(
        lambda p: (
            p
            | beam.Create(batches(values))
            | PrivateQuantiles.Globally(
                [0.9, 0.1, 0.5],
                lower=0.0,
                upper=20.0,
                epsilon=HUGE,
                record_level=True,
                on_bad_record="skip",  # the NaN values: dropped by the public rule
            )
        )
    )

    kept = np.clip(values[~np.isnan(values)], 0.0, 20.0)
    np.testing.assert_allclose(release.value, np.quantile(kept, [0.9, 0.1, 0.5]), atol=0.02)
    assert release.statistic == "quantiles" and release.key is None and release.window is None
    ledger = release.ledger
    assert ledger.mechanism == "permute_and_flip" and ledger.neighbouring == "add_remove"
    assert ledger.num_candidates == 1_000_000 and ledger.monotone is False
    assert ledger.contribution_bounds == {
        "record_level_privacy": 1,
        "max_contributions_per_unit": 1,
        "max_windows_per_unit": 1,
    }
    assert set(ledger.accuracy) == {
        "confidence",
        "score_loss",
        "rank_error",
        "cell_width",
        "epsilon_quantiles",  # the quantiles' part: the interval took the rest
    }
    assert ledger.accuracy["cell_width"] == pytest.approx(20.0 / 999_999)
    assert ledger.sensitivity == pytest.approx(0.8)  # the branches: relative quantiles 0.2, 0.8
    document = release.to_dict()
    assert document["accuracy"]["rank_error"] > 0 and document["rng"] == "os_csprng"


def test_numbers_and_arrays_work_at_record_level() -> None:
    (median,) = run(
        lambda p: (
            p
            | beam.Create([1.0, 2.0, 3.0, np.array([4.0, 5.0]), math.nan])
            | PrivateMedian.Globally(
                lower=0.0,
                upper=10.0,
                epsilon=HUGE,
                record_level=True,
                value_column=None,
                num_points=101,
            )
        )
    )
    assert median.value == 3.0 and median.statistic == "median"


def test_empty_input_still_gets_a_release() -> None:
    (release,) = run(
        lambda p: (
            p
            | beam.Create([], reshuffle=False).with_output_types(float)
            | PrivateMedian.Globally(
                lower=0.0,
                upper=1.0,
                epsilon=1.0,
                record_level=True,
                value_column=None,
                num_points=11,
            )
        )
    )
    assert release.value in Grid.uniform(0.0, 1.0, 11).points


def test_contributions_are_bounded_per_unit() -> None:
    """One unit floods the data with 5000 copies of 9.0; bounded to 2 it cannot move the median."""
    rng = np.random.default_rng(6)
    honest = rng.uniform(0, 2, 1000)
    values = np.concatenate([honest, np.full(5000, 9.0)])
    users = np.concatenate([np.arange(1000), np.full(5000, 10**6)])
    order = rng.permutation(values.size)

    (release,) = run(
        lambda p: (
            p
            | beam.Create(batches(values[order], size=700, user=users[order]))
            | PrivateMedian.Globally(
                lower=0.0,
                upper=10.0,
                epsilon=HUGE,
                unit_column="user",
                max_contributions=2,
                num_points=10_001,
            )
        )
    )

    assert release.value == pytest.approx(np.median(np.concatenate([honest, [9.0, 9.0]])), abs=2e-3)
    assert release.ledger.contribution_bounds == {
        "max_contributions_per_unit": 2,
        "max_windows_per_unit": 1,
    }
    assert release.ledger.sensitivity == 1.0  # max(alpha, 1 - alpha) * 2


def test_per_key_gives_every_public_key_a_release_and_splits_epsilon() -> None:
    rng = np.random.default_rng(7)
    n = 3000
    keys = rng.choice(["a", "b", "ghost"], n)  # "ghost" is not public: dropped
    values = np.where(keys == "a", rng.uniform(0, 1, n), rng.uniform(5, 6, n))
    users = rng.integers(0, 500, n)

    releases = run(
        lambda p: (
            p
            | beam.Create(batches(values, key=keys, user=users))
            | PrivateQuantiles.PerKey(
                [0.5],
                lower=0.0,
                upper=10.0,
                epsilon=3 * HUGE,
                unit_column="user",
                keys=["a", "b", "empty"],
                max_keys_per_unit=3,
                max_contributions=10,
                num_points=10_001,
            )
        )
    )

    by_key = {release.key: release for release in releases}
    assert set(by_key) == {"a", "b", "empty"}
    assert 0.3 < by_key["a"].value[0] < 0.7 and 5.3 < by_key["b"].value[0] < 5.7
    for release in releases:
        assert release.ledger.epsilon == pytest.approx(HUGE)  # epsilon / 3 keys per unit
        assert release.ledger.contribution_bounds == {
            "max_contributions_per_unit": 10,
            "max_keys_per_unit": 3,
            "max_windows_per_unit": 1,
        }


def test_per_key_pairs_at_record_level() -> None:
    releases = run(
        lambda p: (
            p
            | beam.Create([("a", 1.0), ("a", np.array([2.0, 3.0])), ("b", 7.0), ("c", 9.0)])
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=10.0,
                epsilon=HUGE,
                record_level=True,
                value_column=None,
                keys=["a", "b"],
                num_points=101,
            )
        )
    )
    assert {r.key: r.value for r in releases} == {"a": 2.0, "b": 7.0}


def test_min_max_and_budget_share_on_one_pipeline() -> None:
    budget = PrivacyBudget(3 * HUGE)
    shares = [  # each release: one selection and its interval's two ends
        budget.spend(name, mechanism="permute_and_flip", epsilon=HUGE, rounds=3) for name in "lhm"
    ]
    values = np.linspace(0.0, 10.0, 1001)

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(batches(values))
        common = {
            "lower": 0.0,
            "upper": 10.0,
            "unit_column": None,
            "record_level": True,
            "num_points": 1001,
        }
        return (
            data | "min" >> PrivateMin.Globally(epsilon=shares[0], **common),
            data | "max" >> PrivateMax.Globally(epsilon=shares[1], tail=0.05, **common),
            data | "median" >> PrivateMedian.Globally(epsilon=shares[2], **common),
        ) | beam.Flatten()

    releases = {r.name: r for r in run(build)}
    assert releases["l"].value == pytest.approx(0.1) and releases["l"].statistic == "min"
    assert releases["h"].value == pytest.approx(9.5) and releases["h"].statistic == "max"
    assert releases["m"].value == pytest.approx(5.0)


def test_coarse_to_fine_globally_and_per_key() -> None:
    rng = np.random.default_rng(9)
    values = rng.normal(3.3333, 0.01, 4000)
    keys = np.where(np.arange(values.size) % 2 == 0, "a", "b")

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(batches(values, key=keys))
        options = {
            "lower": 0.0,
            "upper": 10.0,
            "epsilon": HUGE,
            "unit_column": None,
            "record_level": True,
            "num_points": 11,
            "refine": True,
            "refine_points": 10_001,
        }
        return (
            data | "g" >> PrivateMedian.Globally(**options),
            data | "k" >> PrivateMedian.PerKey(keys=["a", "b"], **options),
        ) | beam.Flatten()

    releases = run(build)
    assert {r.key for r in releases} == {None, "a", "b"}
    for release in releases:
        assert release.value == pytest.approx(3.3333, abs=0.002)
        accuracy = release.ledger.accuracy
        assert accuracy["cell_width"] < 1e-3  # the fine grid's, not the coarse 1.0
        assert accuracy["fine_rank_error"] < accuracy["rank_error"]


def test_mean_with_both_relations() -> None:
    values = np.array([1.0, 2.0, 3.5, 4.0, 15.0])  # 15 clamps to 10: mean 4.1

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(batches(values))
        # 4.1 is a grid point, 0.1 from the next: the mean wins with certainty at HUGE.
        common = {
            "lower": 0.0,
            "upper": 10.0,
            "epsilon": HUGE,
            "unit_column": None,
            "record_level": True,
            "num_points": 101,
            "estimator": "selection",  # the grid selection (noisy sums: test_mean_noisy_sums)
        }
        return (
            data | "ar" >> PrivateMean.Globally(**common),
            data | "rp" >> PrivateMean.Globally(relation="replace", n=5, name="mean_r", **common),
        ) | beam.Flatten()

    releases = {r.name: r for r in run(build)}
    assert releases["mean"].value == pytest.approx(4.1) == releases["mean_r"].value
    assert releases["mean"].ledger.sensitivity == 10.0
    assert releases["mean_r"].ledger.sensitivity == 2.0
    assert releases["mean_r"].ledger.neighbouring == "replace"


def test_mean_per_key_and_a_log_grid_median() -> None:
    rng = np.random.default_rng(10)
    values = np.concatenate([rng.uniform(0, 2, 500), rng.uniform(4, 8, 500)])
    keys = np.repeat(np.array(["low", "high"]), 500)

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(batches(values, key=keys))
        means = data | "means" >> PrivateMean.PerKey(
            lower=0.0, upper=10.0, epsilon=HUGE, record_level=True, keys=["low", "high", "none"]
        )
        median = data | "median" >> PrivateMedian.Globally(
            lower=0.01, upper=10.0, epsilon=HUGE, record_level=True, grid="log", num_points=10_001
        )
        return (means, median) | beam.Flatten()

    releases = {(r.statistic, r.key): r for r in run(build)}
    assert set(releases) == {("mean", "low"), ("mean", "high"), ("mean", "none"), ("median", None)}
    assert releases[("mean", "low")].value == pytest.approx(values[:500].mean(), abs=2e-3)
    assert releases[("mean", "high")].value == pytest.approx(values[500:].mean(), abs=2e-3)
    median = releases[("median", None)].value  # any point of the gap between the halves
    assert values[:500].max() - 0.01 <= median <= values[500:].min() + 0.01
    assert releases[("median", None)].ledger.accuracy["cell_width"] < 0.01


def test_bad_records_fail_the_pipeline_when_asked() -> None:
    values = np.array([1.0, math.nan, 3.0])
    with pytest.raises(Exception, match="must be a number, not null or NaN"):
        run(
            lambda p: (
                p
                | beam.Create(batches(values))
                | PrivateMedian.Globally(
                    lower=0.0, upper=10.0, epsilon=1.0, record_level=True, on_bad_record="fail"
                )
            )
        )


def test_mean_refuses_n_under_add_remove_at_construction() -> None:
    with pytest.raises(ValueError, match="only used with relation='replace'"):
        PrivateMean.Globally(lower=0, upper=1, epsilon=1.0, record_level=True, n=10)
    with pytest.raises(ValueError, match="'n'"):
        PrivateMean.Globally(lower=0, upper=1, epsilon=1.0, record_level=True, relation="replace")


def test_windows_get_one_release_each() -> None:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue(v, 1) for v in (1.0, 2.0, 3.0)])
        .add_elements([window.TimestampedValue(v, 12) for v in (7.0, 8.0, 9.0)])
        .advance_watermark_to_infinity()
    )
    found = run(
        lambda p: (
            p
            | stream
            | beam.WindowInto(window.FixedWindows(10))
            | PrivateMedian.Globally(
                lower=0.0,
                upper=10.0,
                epsilon=HUGE,
                record_level=True,
                value_column=None,
                num_points=101,
            )
        ),
        runner=BundleBasedDirectRunner(),
        options=options,
    )

    by_window = {r.window: r.value for r in found}
    assert by_window == {
        "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z)": 2.0,
        "[1970-01-01T00:00:10Z, 1970-01-01T00:00:20Z)": 8.0,
    }


def test_windows_per_key() -> None:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue(("a", v), 1) for v in (1.0, 2.0, 3.0)])
        .add_elements([window.TimestampedValue(("b", v), 15) for v in (6.0, 7.0, 8.0)])
        .advance_watermark_to_infinity()
    )
    found = run(
        lambda p: (
            p
            | stream
            | beam.WindowInto(window.FixedWindows(10))
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=10.0,
                epsilon=HUGE,
                record_level=True,
                value_column=None,
                keys=["a", "b"],
                num_points=101,
            )
        ),
        runner=BundleBasedDirectRunner(),
        options=options,
    )

    assert len(found) == 4  # every public key in every window that holds data
    first = "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z)"
    second = "[1970-01-01T00:00:10Z, 1970-01-01T00:00:20Z)"
    values = {(r.window, r.key): r.value for r in found}
    assert set(values) == {(first, "a"), (first, "b"), (second, "a"), (second, "b")}
    assert values[(first, "a")] == 2.0 and values[(second, "b")] == 7.0


# ------------------------------------------------------------ distribution of the pipeline


@pytest.mark.slow
@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_pipeline_output_follows_the_exact_distribution(method: str) -> None:
    """Many keys with the same small data: each key's release is one independent draw."""
    num_keys = 2500
    grid = Grid.explicit([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0])
    data = np.array([0.5, 2.0, 2.0, 3.5, 4.2, 7.0, 1.5])
    values = np.tile(data, num_keys)
    keys = np.repeat(np.arange(num_keys), data.size)
    epsilon = 1.5

    releases = run(
        lambda p: (
            p
            | beam.Create(batches(values, size=5000, key=keys))
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=8.0,
                epsilon=epsilon,
                record_level=True,
                keys=list(range(num_keys)),
                grid=grid.points.tolist(),
                method=method,
            )
        )
    )

    assert len(releases) == num_keys
    position = {float(v): i for i, v in enumerate(grid.points)}
    counts = np.zeros(grid.num_points, dtype=np.int64)
    for release in releases:
        counts[position[release.value]] += 1
    slots = grid.histogram(data).counts()
    less, greater = less_greater(slots)
    score = QuantileScore(alpha=0.5, grid=grid.points)
    # The median's own part of the release's epsilon (its interval took the rest).
    own = releases[0].ledger.accuracy["epsilon_quantiles"]
    assert own == pytest.approx(epsilon * (1 - float(DEFAULT_INTERVAL_FRACTION)))
    expected = selection_probabilities(
        score.compute_from_counts(less, greater, equal=slots[1::2]),
        epsilon=own,
        sensitivity=score.scaled_sensitivity("add_remove"),
        method=method,  # type: ignore[arg-type]
    )
    assert chi_square_pvalue(counts, expected) > FPR
