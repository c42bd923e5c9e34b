"""PrivateCDF on Beam: the CombineFn contract, both relations, bounding, keys, windows, budget,
the release record and its JSON, and the pipeline's output law against the brute-force pmf."""

from __future__ import annotations

import json
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
from beam_dp.beam.cdf import DEFAULT_MAX_K, CDFCombineFn, CDFValue, PrivateCDF
from beam_dp.mechanisms.cdf import ks_pmf_bruteforce, ks_suggested_k
from beam_dp.release import Release, ledger_entries_to_record
from beam_dp.summaries.histogram import Grid

SURE = 1 - 1e-9  # the KS bound fails with probability <= 1e-9 at this confidence


class _Collect(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Release) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def run(build: Any, runner: Any = None, options: PipelineOptions | None = None) -> list[Release]:
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=runner or FnApiRunner(), options=options) as pipeline:
            _ = build(pipeline) | beam.ParDo(_Collect(directory))
        releases = []
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), "rb") as handle:
                releases.append(pickle.load(handle))
        return releases


def batches(values: np.ndarray, size: int = 250, **columns: np.ndarray) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, values.size, size):
        data = {"value": values[start : start + size]}
        data.update({name: column[start : start + size] for name, column in columns.items()})
        out.append(pa.record_batch(data))
    return out


def data_cdf(values: np.ndarray, grid: Grid, n: int | None = None) -> np.ndarray:
    """N_i / n at every grid point, values clamped and snapped up to the grid (public rule)."""
    clamped = np.clip(values, grid.lower, grid.upper)
    below = np.searchsorted(np.sort(clamped), grid.points, side="right")
    return below / (values.size if n is None else n)


def ks_to_data(value: CDFValue, values: np.ndarray, grid: Grid, n: int | None = None) -> float:
    released = np.array([value.cdf_at(float(g)) for g in grid.points])
    return float(np.max(np.abs(released - data_cdf(values, grid, n))))


# ------------------------------------------------------------------ the CombineFn contract


def test_combine_fn_driven_by_hand_over_shards_equals_one_pass() -> None:
    transform = PrivateCDF.Globally(
        lower=0.0, upper=10.0, num_points=51, epsilon=1.0, record_level=True, k=5
    )
    fn = CDFCombineFn(transform.spec)
    values = np.random.default_rng(1).uniform(-1, 11, 3000)
    shards = []
    for part in np.array_split(values, 4):
        accumulator = fn.create_accumulator()
        for chunk in np.array_split(part, 3):
            accumulator = fn.add_input(accumulator, {"value": chunk})
        shards.append(fn.compact(accumulator))
    merged = fn.merge_accumulators(shards)
    assert merged is shards[0]  # merged into the first accumulator
    whole = fn.add_input(fn.create_accumulator(), {"value": values})
    assert merged == whole
    assert merged.counts().size == transform.spec.grid.num_slots  # O(grid), not O(rows)
    release = fn.extract_output(merged)
    assert isinstance(release.value, CDFValue) and len(release.value.points) == 5


# ------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"relation": "replace"}, ValueError, "'n'"),
        ({"n": 100, "count_share": 0.2}, ValueError, "'count_share'"),
        ({"count_share": 1.0}, ValueError, "'count_share'"),
        ({"method": "permute_and_flip"}, ValueError, "'method' must be 'exponential'"),
        ({"k": 0}, ValueError, "'k'"),
        ({"k": 2.5}, TypeError, "'k'"),
        ({"num_points": 100_000, "k": 1000}, ValueError, "grid size"),
        ({"max_k": 0}, ValueError, "'max_k'"),
        ({"n": -1}, ValueError, "'n'"),
        ({"quantiles": [0.5, 1.0]}, ValueError, "quantiles"),
        ({"split": "recursive"}, TypeError, "'split'"),
        ({"quantils": [0.5]}, TypeError, "did you mean 'quantiles'"),
        ({"max_keys_per_unit": 2}, ValueError, r"applies only to \.PerKey"),
        ({"epsilon": float("nan")}, ValueError, "'epsilon'"),
        ({"lower": 5.0}, ValueError, "lower"),
        ({"unit_column": "u", "max_contributions": "auto"}, ValueError, "'auto' is not offered"),
    ],
)
def test_bad_parameters_fail_at_construction(
    options: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    arguments: dict[str, Any] = {
        "lower": 0.0,
        "upper": 1.0,
        "epsilon": 1.0,
        "unit_column": None,
        "record_level": True,
    }
    arguments.update(options)
    with pytest.raises(error, match=fragment):
        PrivateCDF.Globally(**arguments)


def test_budget_shares_name_the_exponential_mechanism_and_one_round() -> None:
    transform = PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=1.0, record_level=True)
    assert (transform.mechanism, transform.rounds) == ("exponential", 1)
    budget = PrivacyBudget(2.0)
    good = budget.request("cdf_a", mechanism="exponential", rounds=1, epsilon=1.0)
    bad = budget.request("cdf_b", mechanism="permute_and_flip", epsilon=1.0)
    budget.finalize()
    assert PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=good, record_level=True)
    with pytest.raises(ValueError, match="runs 'exponential'"):
        PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=bad, record_level=True)
    # zCDP: a count on more than 2/5 of epsilon would cost more than the share's eps^2/8.
    zcdp = PrivacyBudget(1.0, delta=1e-6, composition="zcdp")
    share = zcdp.request("cdf", mechanism="exponential", rounds=1, weight=1.0)
    zcdp.finalize()
    PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=share, record_level=True, count_share=0.4)
    with pytest.raises(ValueError, match=r"at most 0\.4"):
        PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=share, record_level=True, count_share=0.5)


def test_k_is_suggested_from_a_public_n_and_capped() -> None:
    transform = PrivateCDF.Globally(
        lower=0.0, upper=1.0, epsilon=0.5, record_level=True, relation="replace", n=10_000
    )
    assert transform.spec.k == ks_suggested_k(1000, epsilon=0.5, n=10_000)
    big = PrivateCDF.Globally(
        lower=0.0, upper=1.0, epsilon=1e4, record_level=True, relation="replace", n=10**9
    )
    assert big.spec.k == DEFAULT_MAX_K
    released = PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=1.0, record_level=True)
    assert released.spec.k is None and released.spec.count_share == Fraction(1, 10)
    assert released.display_data()["k"] == "chosen from the released count"


# ------------------------------------------------------------------ pipelines


def test_globally_with_a_released_count_is_within_its_bound() -> None:
    rng = np.random.default_rng(2)
    values = rng.lognormal(1.0, 0.6, 4000)
    grid = Grid.uniform(0.0, 12.0, 241)
    (release,) = run(
        lambda p: (
            p
            | beam.Create(batches(values))
            | PrivateCDF.Globally(
                lower=0.0,
                upper=12.0,
                num_points=241,
                epsilon=2.0,
                record_level=True,
                quantiles=[0.25, 0.5, 0.75],
                confidence=SURE,
            )
        )
    )
    value = release.value
    assert isinstance(value, CDFValue) and value.count_released
    assert (
        value.k
        == len(value.points)
        == ks_suggested_k(
            241,
            epsilon=1.8,
            n=value.n_hat,
            confidence=1 - (1 - SURE) / 2,
            count_error=int(release.accuracy["count_error"]),
        )
    )
    assert abs(value.n_hat - values.size) <= release.accuracy["count_error"]
    bound = release.accuracy["ks_distance"]
    assert 0 < bound < 0.2
    assert ks_to_data(value, values, grid) <= bound
    # quantiles are read from the released CDF: post-processing, within the same bound
    truth = data_cdf(values, grid)
    for alpha, q in value.quantiles:
        assert q == value.quantile(alpha) and q in value.steps
        index = int(np.searchsorted(grid.points, q))
        assert truth[index] >= alpha - bound
    ledger = release.ledger
    assert (ledger.mechanism, ledger.epsilon, ledger.neighbouring) == (
        "exponential",
        2.0,
        "add_remove",
    )
    assert ledger.num_candidates == 241 and ledger.sensitivity == value.k
    document = json.loads(json.dumps(release.to_dict()))
    assert document["value"]["quantiles"] == {
        "0.25": value.quantiles[0][1],
        **{f"{a:g}": q for a, q in value.quantiles[1:]},
    }
    assert document["value"]["cdf"][-1] == 1.0 and document["value"]["n_hat"] == value.n_hat
    assert "the released CDF is within" in document["accuracy_description"]
    assert "at every point" in document["accuracy_description"]
    assert document["accuracy_units"]["ks_distance"].startswith("cumulative fraction")


def test_replace_with_a_public_n_releases_no_count() -> None:
    values = np.random.default_rng(3).uniform(0, 1, 2000)
    grid = Grid.uniform(0.0, 1.0, 101)
    (release,) = run(
        lambda p: (
            p
            | beam.Create([values])
            | PrivateCDF.Globally(
                lower=0.0,
                upper=1.0,
                num_points=101,
                epsilon=1.0,
                record_level=True,
                value_column=None,
                relation="replace",
                n=2000,
                confidence=SURE,
            )
        )
    )
    value = release.value
    assert not value.count_released and value.n_hat == 2000
    assert "count_error" not in release.accuracy and "count" not in str(release.statement.units)
    assert release.ledger.neighbouring == "replace"
    assert value.k == ks_suggested_k(101, epsilon=1.0, n=2000, confidence=SURE)
    assert ks_to_data(value, values, grid) <= release.accuracy["ks_distance"] < 0.2


def test_contributions_are_bounded_per_unit() -> None:
    """One unit floods 5000 copies of 9.0; bounded to 2 values it moves the CDF by ~2/1002."""
    rng = np.random.default_rng(4)
    honest = rng.uniform(0, 2, 1000)
    values = np.concatenate([honest, np.full(5000, 9.0)])
    users = np.concatenate([np.arange(1000), np.full(5000, 10**6)])
    order = rng.permutation(values.size)
    (release,) = run(
        lambda p: (
            p
            | beam.Create(batches(values[order], size=700, user=users[order]))
            | PrivateCDF.Globally(
                lower=0.0,
                upper=10.0,
                num_points=101,
                epsilon=5.0,
                unit_column="user",
                max_contributions=2,
                relation="replace",
                n=1002,
                k=50,
                confidence=SURE,
            )
        )
    )
    kept = np.concatenate([honest, [9.0, 9.0]])
    assert (
        ks_to_data(release.value, kept, Grid.uniform(0.0, 10.0, 101))
        <= (release.accuracy["ks_distance"])
    )
    assert release.value.cdf_at(8.5) > 0.85  # unbounded, the flood would hold it near 1/6
    assert release.ledger.sensitivity == 2 * 50  # c k
    assert release.ledger.contribution_bounds == {
        "max_contributions_per_unit": 2,
        "max_windows_per_unit": 1,
    }


def test_per_key_gives_every_public_key_a_release_and_splits_epsilon() -> None:
    rng = np.random.default_rng(5)
    n = 3000
    keys = rng.choice(["a", "b", "ghost"], n)  # "ghost" is not public: dropped
    values = np.where(keys == "a", rng.uniform(0, 1, n), rng.uniform(5, 6, n))
    users = rng.integers(0, 500, n)
    releases = run(
        lambda p: (
            p
            | beam.Create(batches(values, key=keys, user=users))
            | PrivateCDF.PerKey(
                lower=0.0,
                upper=10.0,
                num_points=201,
                epsilon=30.0,
                unit_column="user",
                keys=["a", "b", "empty"],
                max_keys_per_unit=3,
                max_contributions=10,
                quantiles=[0.5],
            )
        )
    )
    by_key = {release.key: release for release in releases}
    assert set(by_key) == {"a", "b", "empty"}
    assert 0.2 < by_key["a"].value.quantile(0.5) < 0.8
    assert 5.2 < by_key["b"].value.quantile(0.5) < 5.8
    for release in releases:
        assert release.ledger.epsilon == pytest.approx(10.0)  # epsilon / 3 keys per unit
        assert release.ledger.contribution_bounds["max_keys_per_unit"] == 3
    entries = ledger_entries_to_record(releases)
    assert sum(entry.epsilon for entry in entries) == pytest.approx(30.0)


def test_windows_per_key_at_record_level() -> None:
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
            | PrivateCDF.PerKey(
                lower=0.0,
                upper=10.0,
                num_points=11,
                epsilon=1e4,
                record_level=True,
                value_column=None,
                keys=["a", "b"],
                relation="replace",
                n=3,
                k=3,
            )
        ),
        runner=BundleBasedDirectRunner(),
        options=options,
    )
    first = "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z)"
    second = "[1970-01-01T00:00:10Z, 1970-01-01T00:00:20Z)"
    values = {(r.window, r.key): r.value.points for r in found}
    assert set(values) == {(first, "a"), (first, "b"), (second, "a"), (second, "b")}
    # With a huge epsilon, three points at the three values (n = k = 3: exact).
    assert values[(first, "a")] == (1.0, 2.0, 3.0) and values[(second, "b")] == (6.0, 7.0, 8.0)


def test_empty_input_still_gets_a_release() -> None:
    (release,) = run(
        lambda p: (
            p
            | beam.Create([], reshuffle=False).with_output_types(float)
            | PrivateCDF.Globally(
                lower=0.0,
                upper=1.0,
                num_points=11,
                epsilon=1.0,
                record_level=True,
                value_column=None,
                k=4,
            )
        )
    )
    assert len(release.value.points) == 4 and release.value.count_released


# ------------------------------------------------------------ the law of the pipeline


@pytest.mark.slow
def test_pipeline_output_follows_the_exact_distribution() -> None:
    """Many keys with the same data: each key's release is one draw of the brute-force law."""
    num_keys = 1500
    grid = Grid.explicit([0.0, 1.0, 2.0, 3.0], 0.0, 3.0)
    data = np.array([0.5, 2.0, 2.0, 3.0, 1.0])
    values = np.tile(data, num_keys)
    keys = np.repeat(np.arange(num_keys), data.size)
    epsilon = 1.5
    releases = run(
        lambda p: (
            p
            | beam.Create(list(zip(keys.tolist(), values.tolist(), strict=True)))
            | PrivateCDF.PerKey(
                lower=0.0,
                upper=3.0,
                grid=grid.points.tolist(),
                epsilon=epsilon,
                record_level=True,
                value_column=None,
                keys=list(range(num_keys)),
                relation="replace",
                n=5,
                k=2,
            )
        )
    )
    assert len(releases) == num_keys
    counts = [0, 2, 4, 5]  # N_i = #(x <= g_i), 0.5 snapped up to 1.0
    law = ks_pmf_bruteforce(counts, k=2, epsilon=epsilon, relation="replace")
    support = sorted(law)
    index = {z: i for i, z in enumerate(support)}
    observed = np.zeros(len(support), dtype=np.int64)
    for release in releases:
        points = tuple(int(np.searchsorted(grid.points, v)) for v in release.value.points)
        observed[index[points]] += 1
    assert chi_square_pvalue(observed, np.array([law[z] for z in support])) > FPR
