"""Selection transforms as pipelines on the in-process DirectRunner (Beam's FnApiRunner).

The DirectRunner in Beam 2.77 first tries the Prism runner, which downloads a binary; tests
use the FnApiRunner it falls back to directly (and the DirectRunner itself for TestStream,
which Prism does not take).
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampedValue

from beam_dp.accounting import PrivacyBudget
from beam_dp.batching import ContributionBounds
from beam_dp.beam.key_selection import KeySelection, SelectCandidates
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates
from beam_dp.mechanisms import score_loss_bound
from beam_dp.release import Release, ledger_entries_to_record

# DESIGN section 7: every release carries these.
RELEASE_FIELDS = {
    "name",
    "statistic",
    "value",
    "mechanism",
    "epsilon",
    "delta",
    "sensitivity",
    "neighbouring",
    "monotone",
    "num_candidates",
    "contribution_bounds",
    "accuracy",
}


class _WriteBundle(beam.DoFn):
    """Pickle each bundle's releases into one file (works on every runner)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._items: list[Release] = []

    def process(self, release: Release) -> None:
        self._items.append(release)

    def finish_bundle(self) -> None:
        if self._items:
            path = os.path.join(self._directory, uuid.uuid4().hex)
            with open(path, "wb") as handle:
                pickle.dump(self._items, handle)


def run(
    build: Callable[[beam.Pipeline], Any],
    tmp_path: Path,
    *,
    runner: Any = None,
    options: PipelineOptions | None = None,
) -> list[Release]:
    """Run ``build(pipeline)`` (returning a PCollection of releases) and return them."""
    directory = tmp_path / uuid.uuid4().hex
    directory.mkdir()
    with beam.Pipeline(runner=runner or FnApiRunner(), options=options) as pipeline:
        _ = build(pipeline) | "Write" >> beam.ParDo(_WriteBundle(str(directory)))
    releases: list[Release] = []
    for path in directory.iterdir():
        with open(path, "rb") as handle:
            releases.extend(pickle.load(handle))
    return releases


def check_record(release: Release) -> None:
    record = release.to_dict()
    assert set(record) >= RELEASE_FIELDS
    assert record["accuracy"]["confidence"] > 0
    assert "score_loss" in record["accuracy"] or "release_threshold" in record["accuracy"]
    assert record["rng"] == "os_csprng"


def chunks(rows: list[dict[str, Any]], size: int) -> list[pa.Table]:
    """Batches as pyarrow Tables (what ReadFromParquetBatched yields; Create types them fast)."""
    return [pa.Table.from_pylist(rows[i : i + size]) for i in range(0, len(rows), size)]


# --------------------------------------------------------------------------- seed 002


def test_heavy_hitter_clear_winner_at_seed_parameters(tmp_path: Path) -> None:
    # d = 100 websites, epsilon = 0.5. site-000 has 100 distinct visitors; the others at most
    # 25. A spammer visits site-007 five hundred times: counted once, it cannot win.
    rng = np.random.default_rng(2)
    sites = [f"site-{i:03d}" for i in range(100)]
    rows = [{"user": f"u{u}", "site": "site-000"} for u in range(100) for _ in range(3)]
    rows += [{"user": "spammer", "site": "site-007"} for _ in range(500)]
    for u in range(100, 1100):
        rows.append({"user": f"u{u}", "site": sites[1 + int(rng.integers(0, 99))]})
    order = rng.permutation(len(rows))
    batches = chunks([rows[i] for i in order], 97)

    releases = run(
        lambda p: (
            p
            | beam.Create(batches)
            | TopCandidates.Globally(
                candidate_column="site",
                candidates=sites,
                unit_column="user",
                epsilon=0.5,
                relation="replace",  # the seed's 2Δ exponent
                confidence=0.99,
            )
        ),
        tmp_path,
    )

    (release,) = releases
    counts = {s: len({r["user"] for r in rows if r["site"] == s}) for s in sites}
    assert counts["site-000"] == 100 and max(v for s, v in counts.items() if s != "site-000") <= 25
    # A loser is chosen with probability <= 99 exp(-0.5 * 75 / 2) < 1e-6.
    assert release.value == "site-000"
    # Seed 002: with probability 0.99 the score is within 36.84 of the best.
    assert release.ledger.accuracy["score_loss"] == pytest.approx(36.84, abs=0.01)
    assert release.ledger.sensitivity == 1 and not release.ledger.monotone
    check_record(release)


def test_best_price_is_near_the_revenue_optimal_price(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    wtp = np.round(rng.uniform(0.0, 2.0, 1500), 2)
    rows = []
    for unit, value in enumerate(wtp):
        rows.append({"buyer": unit, "wtp": float(value)})
        # Lower extra answers: the per-unit rule "max" keeps the stated value.
        rows += [{"buyer": unit, "wtp": float(value) * 0.5} for _ in range(unit % 3)]
    batches = chunks(list(reversed(rows)), 211)

    (release,) = run(
        lambda p: (
            p
            | beam.Create(batches)
            | BestPrice.Globally(value_column="wtp", unit_column="buyer", epsilon=1.0)
        ),
        tmp_path,
    )

    prices = np.arange(1, 200) / 100
    revenue = {round(p, 2): p * int(np.sum(wtp >= p - 1e-9)) for p in prices}
    best = max(revenue.values())
    bound = score_loss_bound(
        199, epsilon=1.0, sensitivity=1.99, confidence=1 - 1e-6, monotonic=True
    )
    assert revenue[round(release.value, 2)] >= best - bound
    assert release.ledger.sensitivity == pytest.approx(1.99)
    assert release.ledger.monotone and release.ledger.num_candidates == 199
    assert release.ledger.contribution_bounds == {"values_per_unit": 1, "max_windows_per_unit": 1}
    check_record(release)


# --------------------------------------------------------------------------- seed 003


@pytest.mark.slow
def test_village_election_reproduces_the_seed_probability(tmp_path: Path) -> None:
    # Many independent villages (keys), each Alice -> Gyudon and Bob, Charles, Doe ->
    # Melon-pan: margin 2, switched-vote relation (Δ = 2), epsilon = 0.1, exponential
    # mechanism. Each key is one draw of the pipeline's selection.
    villages = 40_000
    parties = ["Gyudon", "Melon-pan"]
    rows = [
        {"village": v, "voter": f"{v}-{name}", "party": party}
        for v in range(villages)
        for name, party in (
            ("alice", "Gyudon"),
            ("bob", "Melon-pan"),
            ("charles", "Melon-pan"),
            ("doe", "Melon-pan"),
        )
    ]
    releases = run(
        lambda p: (
            p
            | beam.Create(chunks(rows, 20_000))
            | Election.PerKey(
                candidate_column="party",
                candidates=parties,
                unit_column="voter",
                key_column="village",
                keys=range(villages),
                max_keys_per_unit=1,
                epsilon=0.1,
                score="margin",
                relation="replace",
                method="exponential",
            )
        ),
        tmp_path,
    )

    assert len(releases) == villages and {r.key for r in releases} == set(range(villages))
    wins = sum(r.value == "Melon-pan" for r in releases)
    low, high = _clopper_pearson(wins, villages)
    assert low <= 0.52498 <= high  # the seed's P(Melon-pan) = 0.525
    assert high < 0.5498  # not the monotone (one-sided) exponent's 0.5498
    assert low > 0.5
    entry = releases[0].ledger
    assert entry.sensitivity == 2 and entry.epsilon == 0.1 and entry.mechanism == "exponential"
    assert entry.contribution_bounds["max_keys_per_unit"] == 1


def _clopper_pearson(successes: int, trials: int) -> tuple[float, float]:
    from stats_helpers import FPR, clopper_pearson

    return clopper_pearson(successes, trials, FPR)


# --------------------------------------------------------------------------- distribution


@pytest.mark.slow
def test_pipeline_output_distribution_matches_selection_probabilities(tmp_path: Path) -> None:
    # 4000 independent copies of one tiny dataset, one per key: each key's release is an
    # independent draw of the whole pipeline (encode, shuffle, bound, combine, select).
    from stats_helpers import FPR, chi_square_pvalue

    from beam_dp.mechanisms import selection_probabilities

    copies, candidates = 4000, ["a", "b", "c", "d", "e"]
    distinct_units = {"a": 4, "b": 3, "c": 2, "d": 2, "e": 0}
    rows = []
    for copy in range(copies):
        unit = 0
        for site, n in distinct_units.items():
            for _ in range(n):
                # Each unit names its site twice (deduplicated) and an unknown site (dropped).
                rows += [{"copy": copy, "unit": f"{copy}:{unit}", "site": site}] * 2
                rows.append({"copy": copy, "unit": f"{copy}:{unit}", "site": "unlisted"})
                unit += 1
    releases = run(
        lambda p: (
            p
            | beam.Create(chunks(rows, 5000))
            | TopCandidates.PerKey(
                candidate_column="site",
                candidates=candidates,
                unit_column="unit",
                key_column="copy",
                keys=range(copies),
                max_keys_per_unit=1,
                epsilon=1.0,
            )
        ),
        tmp_path,
    )

    assert len(releases) == copies
    observed = np.array([sum(r.value == c for r in releases) for c in candidates])
    expected = selection_probabilities(
        [distinct_units[c] for c in candidates], epsilon=1.0, sensitivity=1, monotonic=True
    )
    assert chi_square_pvalue(observed, expected) > FPR


# --------------------------------------------------------------------------- behaviours


def test_empty_input_still_releases_one_selection(tmp_path: Path) -> None:
    releases = run(
        lambda p: (
            p
            | beam.Create([])
            | TopCandidates.Globally(
                candidate_column="site", candidates=["x", "y"], unit_column="user", epsilon=1.0
            )
        ),
        tmp_path,
    )
    (release,) = releases
    assert release.value in ("x", "y")
    check_record(release)


def test_per_key_releases_every_public_key_and_accounts_the_budget(tmp_path: Path) -> None:
    rows = [
        {"user": u, "country": "DE" if u % 2 else "FR", "wtp": 1.0 + (u % 5) / 10}
        for u in range(40)
    ]
    rows += [{"user": 1, "country": "XX", "wtp": 1.0}]  # not a public key: dropped
    keys = ["DE", "FR", "IT"]

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(chunks(rows, 9))
        split = data | "split" >> BestPrice.PerKey(
            value_column="wtp", unit_column="user", key_column="country", keys=keys, epsilon=0.9
        )
        parallel = data | "parallel" >> BestPrice.PerKey(
            value_column="wtp",
            unit_column="user",
            key_column="country",
            keys=keys,
            max_keys_per_unit=1,
            epsilon=0.9,
            name="parallel",
        )
        return (split, parallel) | beam.Flatten()

    releases = run(build, tmp_path)
    split = [r for r in releases if r.name == "best_price"]
    parallel = [r for r in releases if r.name == "parallel"]
    assert sorted(r.key for r in split) == keys == sorted(r.key for r in parallel)
    # No bound on keys per unit: a unit may reach all 3 keys, each gets 0.9 / 3.
    assert all(r.ledger.epsilon == pytest.approx(0.3) for r in split)
    assert all(r.ledger.contribution_bounds["max_keys_per_unit"] == 3 for r in split)
    # One key per unit, enforced: parallel composition, each key at the full 0.9.
    assert all(r.ledger.epsilon == pytest.approx(0.9) for r in parallel)
    assert all(r.ledger.contribution_bounds["max_keys_per_unit"] == 1 for r in parallel)
    for release in releases:
        check_record(release)
    # Recording what ledger_entries_to_record returns charges 0.9 per transform.
    budget = PrivacyBudget(1.8)
    budget.spend("best_price", mechanism="permute_and_flip", epsilon=0.9)
    budget.spend("parallel", mechanism="permute_and_flip", epsilon=0.9)
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)
    assert budget.spent()[0] == pytest.approx(1.8)


def test_budget_share_names_the_release_and_carries_rho(tmp_path: Path) -> None:
    budget = PrivacyBudget(1.0, delta=1e-6, composition="zcdp")
    share = budget.request("winner", mechanism="exponential_top_k", rounds=2)
    budget.finalize()
    rows = [{"u": i, "c": "a" if i < 30 else "b"} for i in range(40)]

    (release,) = run(
        lambda p: (
            p
            | beam.Create([rows])
            | TopCandidates.Globally(
                candidate_column="c",
                candidates=["a", "b", "c"],
                unit_column="u",
                epsilon=share,
                k=2,
                method="exponential",
            )
        ),
        tmp_path,
    )

    assert release.name == "winner" and len(release.value) == 2
    assert release.ledger.mechanism == "exponential_top_k"
    assert release.ledger.epsilon == pytest.approx(share.epsilon)
    assert release.ledger.rho == pytest.approx(share.rho)
    budget.record(release.ledger)


def test_windowed_input_releases_one_selection_per_window(tmp_path: Path) -> None:
    # Bounded (batch) input with timestamps: unit-level bounding over windows needs it
    # (unbounded windowed input is refused; see tests/beam/test_windows.py).
    def window_batch(winner: str, start: int) -> list[dict[str, Any]]:
        return [{"u": f"{start}-{i}", "c": winner if i < 60 else "z"} for i in range(70)]

    timestamped = [
        TimestampedValue(window_batch("a", 0), 5),
        TimestampedValue(window_batch("b", 1), 65),
        TimestampedValue(window_batch("c", 2), 130),
    ]

    def build(p: beam.Pipeline) -> Any:
        windowed = (
            p | beam.Create(timestamped) | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        )
        top = windowed | "top" >> TopCandidates.Globally(
            candidate_column="c", candidates=["a", "b", "c", "z"], unit_column="u", epsilon=4.0
        )
        per_key = windowed | "per key" >> Election.PerKey(
            candidate_column="c",
            candidates=["a", "b", "c", "z"],
            unit_column="u",
            key_column="c",
            keys=["a", "b"],
            epsilon=1.0,
        )
        return (top, per_key) | beam.Flatten() | "Global" >> beam.WindowInto(window.GlobalWindows())

    releases = run(build, tmp_path)

    top = sorted((r for r in releases if r.statistic == "top_candidates"), key=lambda r: r.window)
    assert [r.value for r in top] == ["a", "b", "c"]  # gaps of 50 units at epsilon 4
    assert [r.window for r in top] == [
        "[1970-01-01T00:00:00Z, 1970-01-01T00:01:00Z)",
        "[1970-01-01T00:01:00Z, 1970-01-01T00:02:00Z)",
        "[1970-01-01T00:02:00Z, 1970-01-01T00:03:00Z)",
    ]
    # .PerKey: every public key in every window that holds data, even keys without votes.
    per_key = [(r.window, r.key) for r in releases if r.statistic == "election"]
    assert sorted(per_key) == sorted((w, k) for w in {r.window for r in top} for k in ("a", "b"))
    for release in releases:
        check_record(release)


def test_key_selection_releases_popular_labels_only_then_the_top_one(tmp_path: Path) -> None:
    rows = [{"u": f"p{i}", "site": f"popular-{i % 4}"} for i in range(800)]
    rows += [{"u": f"q{i}", "site": "popular-0"} for i in range(300)]
    rows += [{"u": f"r{i}", "site": f"rare-{i}"} for i in range(300)]

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create(chunks(rows, 101))
        both = data | "top" >> TopCandidates.Globally(
            candidate_column="site",
            candidates=None,
            unit_column="u",
            epsilon=1.0,
            key_selection=KeySelection(epsilon=1.0, delta=1e-9, max_candidates_per_unit=1),
            name="top_site",
        )
        alone = data | "alone" >> SelectCandidates.Globally(
            candidate_column="site", unit_column="u", epsilon=1.0, delta=1e-9, name="sites"
        )
        return (both, alone) | beam.Flatten()

    releases = {r.name: r for r in run(build, tmp_path)}
    assert set(releases) == {"candidate_selection", "top_site", "sites"}
    popular = [f"popular-{i}" for i in range(4)]
    # Labels held by one unit each are released with probability <= 1e-9 each.
    assert releases["candidate_selection"].value == popular == releases["sites"].value
    assert releases["top_site"].value == "popular-0"  # 500 units against 200
    assert releases["top_site"].ledger.num_candidates == 4
    selection = releases["candidate_selection"].ledger
    assert selection.mechanism == "partition_selection" and selection.delta == 1e-9
    assert selection.accuracy["release_threshold"] >= 2
    for release in releases.values():
        check_record(release)


def test_candidates_as_a_side_input(tmp_path: Path) -> None:
    rows = [{"u": i, "party": "left" if i < 50 else "right"} for i in range(60)]

    def build(p: beam.Pipeline) -> Any:
        parties = p | "parties" >> beam.Create(["right", "left", "centre"])
        data = p | "data" >> beam.Create([rows])
        return data | Election.Globally(
            candidate_column="party", candidates=parties, unit_column="u", epsilon=2.0
        )

    (release,) = run(build, tmp_path)
    assert release.value == "left" and release.ledger.num_candidates == 3

    def without_candidates(p: beam.Pipeline) -> Any:
        parties = p | "parties" >> beam.Create([])
        data = p | "data" >> beam.Create([rows])
        return data | Election.Globally(
            candidate_column="party", candidates=parties, unit_column="u", epsilon=2.0
        )

    assert run(without_candidates, tmp_path) == []  # nothing to choose from: no release


class _ClippedSpend(beam.CombineFn):  # type: ignore[misc]
    """Total spend per hour of day, each unit's spend clipped to [0, 10]."""

    def create_accumulator(self) -> np.ndarray:
        return np.zeros(24)

    def add_input(self, accumulator: np.ndarray, batch: dict[str, np.ndarray]) -> np.ndarray:
        accumulator += np.bincount(
            batch["candidate"], weights=np.clip(batch["value"], 0, 10), minlength=24
        )
        return accumulator

    def merge_accumulators(self, accumulators: Iterator[np.ndarray]) -> np.ndarray:
        first, *rest = accumulators
        for other in rest:
            first += other
        return first

    def extract_output(self, accumulator: np.ndarray) -> np.ndarray:
        return accumulator


def test_custom_score_with_declared_sensitivity(tmp_path: Path) -> None:
    rows = [{"u": i, "hour": 18 if i < 80 else i % 24, "spend": 7.5} for i in range(200)]
    rows += [{"u": 3, "hour": 3, "spend": 1e9}]  # a second row of unit 3: bounded away
    (release,) = run(
        lambda p: (
            p
            | beam.Create(chunks(rows, 33))
            | ExponentialSelect.Globally(
                _ClippedSpend(),
                candidates=range(24),
                epsilon=1.0,
                sensitivity=10,
                monotone=True,
                unit_column="u",
                candidate_column="hour",
                value_column="spend",
                bounds=ContributionBounds(max_contributions_per_unit=1),
                statistic="busiest_hour",
            )
        ),
        tmp_path,
    )
    assert release.value == 18 and release.statistic == "busiest_hour"
    assert release.ledger.sensitivity == 10
    assert release.ledger.contribution_bounds == {
        "max_contributions_per_unit": 1,
        "max_windows_per_unit": 1,
    }
    check_record(release)


def test_record_level_privacy_counts_every_record_as_a_unit(tmp_path: Path) -> None:
    rows = [{"site": "a"}] * 40 + [{"site": "b"}] * 5
    (release,) = run(
        lambda p: (
            p
            | beam.Create([rows])
            | TopCandidates.Globally(
                candidate_column="site", candidates=["a", "b"], record_level=True, epsilon=2.0
            )
        ),
        tmp_path,
    )
    assert release.value == "a"
    assert release.ledger.contribution_bounds == {
        "record_level_privacy": 1,
        "max_candidates_per_unit": 1,
        "max_windows_per_unit": 1,
    }


def test_bad_records_fail_without_the_value_or_are_skipped(tmp_path: Path) -> None:
    secret = "alice-private-user-id"
    rows = [{"user": secret, "site": None}, {"user": "u1", "site": "a"}]

    def build(on_bad_record: str) -> Callable[[beam.Pipeline], Any]:
        return lambda p: (
            p
            | beam.Create([rows])
            | TopCandidates.Globally(
                candidate_column="site",
                candidates=["a", "b"],
                unit_column="user",
                epsilon=1.0,
                on_bad_record=on_bad_record,
            )
        )

    with pytest.raises(Exception, match="field 'site' must not be null") as info:
        run(build("fail"), tmp_path)
    assert secret not in str(info.value)
    (release,) = run(build("skip"), tmp_path)
    assert release.value in ("a", "b")
