""".PerKey selections released in batches (one vectorised exact draw per batch of keys).

The law of every key's release, its record, and which keys and windows release are those of
one ``extract_output`` per key; only the cost changes. Statistical tests use the OS CSPRNG
(the real path) against exact probabilities, with a false-positive rate of about 1e-6.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampedValue

from beam_dp.batching import CANDIDATE, KEY, UNIT, VALUE, take
from beam_dp.beam import _graph as plan_module
from beam_dp.beam._graph import BatchedSelectFn
from beam_dp.beam.selection import BestPrice, Election, TopCandidates
from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, selection_probabilities
from beam_dp.release import Release
from beam_dp.summaries import selection as selection_spec

# chi-square with one degree of freedom above this has probability 1e-6 under the null
CHI2_1DOF_1E6 = 23.93
WINDOW_1 = "[1970-01-01T00:00:00Z, 1970-01-01T00:01:00Z)"
WINDOW_2 = "[1970-01-01T00:01:00Z, 1970-01-01T00:02:00Z)"


def _chi2(successes: int, trials: int, probability: float) -> float:
    expected = trials * probability
    return (successes - expected) ** 2 / (expected * (1 - probability))


def _record(release: Release) -> Release:
    """A release without what differs between keys (value) and what the pipeline adds."""
    return dataclasses.replace(release, value=None, key=None, window=None)


def _per_key_releases(releases: list[Release]) -> dict[tuple[Any, Any], Release]:
    found: dict[tuple[Any, Any], Release] = {}
    for release in releases:
        where = (release.window, release.key)
        assert where not in found, "one release per key and window"
        found[where] = release
    return found


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_two_candidate_per_key_releases_follow_the_exact_law(
    collect: Any, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    # 1,500 keys with 3 votes for A and 1 for B, 1,500 public keys without any input (scores
    # 0 and 0: a fair coin); batches of ~10 keys, so that many draws are involved.
    monkeypatch.setattr(plan_module, "BATCH_WEIGHT", 10 * (2 + 62))
    with_data = [f"d{i}" for i in range(1500)]
    without = [f"e{i}" for i in range(1500)]
    # every key of with_data gets 3 votes for A and 1 for B
    votes = {"village": with_data * 4, "vote": [v for v in "AAAB" for _ in range(1500)]}
    transform = Election.PerKey(
        candidate_column="vote",
        candidates=["A", "B"],
        record_level=True,
        key_column="village",
        keys=with_data + without,
        epsilon=0.5,
        method=method,
    )
    found = collect(lambda p: p | beam.Create([votes]) | transform)
    releases = _per_key_releases([release for release, _ in found])
    assert set(releases) == {(None, key) for key in with_data + without}
    # The record is the one extract_output gives (same epsilon, mechanism, rounds, accuracy).
    fn = transform._wiring.combine_fn
    expected = fn.extract_output(fn.create_accumulator())[0]
    for release in releases.values():
        assert _record(release) == _record(expected)
    for keys, scores in ((with_data, [3, 1]), (without, [0, 0])):
        p_a = float(
            selection_probabilities(
                scores, epsilon=0.5, sensitivity=1, monotonic=True, method=method
            )[0]
        )
        wins = sum(releases[(None, key)].value == "A" for key in keys)
        assert _chi2(wins, len(keys), p_a) < CHI2_1DOF_1E6


def test_per_key_selections_do_not_call_the_one_key_sampler(
    collect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fails on the one-draw-per-key path (select() once per key); top-k keeps that path.
    calls: list[int] = []
    original = selection_spec.select

    def counting_select(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(selection_spec, "select", counting_select)
    rows = {"k": ["x", "y", "y"], "c": ["a", "b", "a"]}
    keys = [f"k{i}" for i in range(50)] + ["x", "y"]
    found = collect(
        lambda p: (
            p
            | beam.Create([rows])
            | TopCandidates.PerKey(
                candidate_column="c",
                candidates=["a", "b", "c"],
                record_level=True,
                key_column="k",
                keys=keys,
                epsilon=1.0,
            )
        )
    )
    assert sorted(release.key for release, _ in found) == sorted(keys)
    assert calls == []


def test_top_k_per_key_keeps_one_release_per_key(collect: Any) -> None:
    rows = {"k": ["x", "y", "y"], "c": ["a", "b", "a"]}
    transform = TopCandidates.PerKey(
        candidate_column="c",
        candidates=["a", "b", "c"],
        record_level=True,
        key_column="k",
        keys=["x", "y", "z"],
        k=2,
        epsilon=1.0,
    )
    fn = transform._wiring.combine_fn
    assert isinstance(fn, BatchedSelectFn) and not fn.batchable
    found = collect(lambda p: p | beam.Create([rows]) | transform)
    releases = _per_key_releases([release for release, _ in found])
    assert sorted(key for _, key in releases) == ["x", "y", "z"]
    for release in releases.values():
        assert len(release.value) == 2 and release.ledger.mechanism.endswith("_top_k")


def test_windows_and_keys_without_input_release_as_before(
    collect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Window 1 has votes for some keys, window 2 only a heartbeat (an empty batch), window 3
    # nothing: every public key releases in windows 1 and 2, none in window 3; keys and
    # windows without votes select among all-zero scores (a fair coin for 2 candidates).
    monkeypatch.setattr(plan_module, "BATCH_WEIGHT", 7 * (2 + 62))
    keys = [f"v{i}" for i in range(600)]
    votes = [{"unit": f"u{i}", "village": keys[i % 20], "vote": "A"} for i in range(200)]
    elements = [TimestampedValue(votes, 5), TimestampedValue({}, 70)]

    def build(p: beam.Pipeline) -> Any:
        return (
            p
            | beam.Create(elements)
            | beam.WindowInto(window.FixedWindows(60))
            | Election.PerKey(
                candidate_column="vote",
                candidates=["A", "B"],
                unit_column="unit",
                key_column="village",
                keys=keys,
                epsilon=0.2,
            )
        )

    found = collect(build)
    releases = _per_key_releases([release for release, _ in found])
    assert set(releases) == {(w, key) for w in (WINDOW_1, WINDOW_2) for key in keys}
    records = [_record(release) for release in releases.values()]
    record = records[0]
    assert all(other == record for other in records)  # the same record everywhere
    assert record.ledger.contribution_bounds["max_windows_per_unit"] == 1
    empty = [releases[(WINDOW_2, key)] for key in keys] + [
        releases[(WINDOW_1, key)] for key in keys[20:]
    ]
    wins = Counter(release.value for release in empty)
    assert _chi2(wins["A"], len(empty), 0.5) < CHI2_1DOF_1E6


def test_release_many_has_the_law_and_record_of_release() -> None:
    with pytest.warns(InsecureRandomWarning):
        spec = TopCandidates.PerKey(
            candidate_column="c",
            candidates=["a", "b", "c"],
            record_level=True,
            key_column="k",
            keys=["x"],
            epsilon=1.0,
            rng=InsecureSeededRandom(7),
        )._wiring.combine_fn._spec
    labels = ("a", "b", "c")
    scores = [np.array([4, 1, 0], dtype=np.int64)] * 20_000 + [[0, 0, 2]]
    releases = spec.release_many(scores, labels)
    one = spec.release(scores[0], labels)
    assert all(_record(release) == _record(one) for release in releases)
    assert releases[-1].value in labels
    counts = Counter(release.value for release in releases[:-1])
    exact = selection_probabilities([4, 1, 0], epsilon=1.0, sensitivity=1, monotonic=True)
    statistic = sum(
        (counts[label] - 20_000 * p) ** 2 / (20_000 * p)
        for label, p in zip(labels, exact, strict=True)
    )
    assert statistic < 27.6  # chi-square, 2 degrees of freedom, P = 1e-6
    assert spec.release_many([], labels) == []
    with pytest.raises(ValueError, match="2 entries for 3 candidates"):
        spec.release_many([[1, 2]], labels)
    assert not one.rng_secure and not releases[0].rng_secure


def test_best_price_per_key_labels_are_python_floats(collect: Any) -> None:
    rows = {"k": ["x", "x", "y"], "wtp": [1.0, 2.5, 0.5]}
    found = collect(
        lambda p: (
            p
            | beam.Create([rows])
            | BestPrice.PerKey(
                value_column="wtp",
                record_level=True,
                prices=[0.5, 1.0, 2.0, 2.5],
                key_column="k",
                keys=["x", "y", "z"],
                epsilon=1.0,
            )
        )
    )
    releases = [release for release, _ in found]
    assert sorted(release.key for release in releases) == ["x", "y", "z"]
    for release in releases:
        assert type(release.value) is float and release.value in (0.5, 1.0, 2.0, 2.5)
        assert math.isclose(release.ledger.sensitivity, 2.5)


@pytest.mark.parametrize("labels", [["b", "a", "c"], []])
def test_per_key_with_candidates_from_a_side_input(collect: Any, labels: list[str]) -> None:
    # As one draw per key: sorted labels; an empty side input releases nothing for any key.
    rows = {"k": ["x", "y", "y"], "c": ["a", "b", "a"]}

    def build(p: beam.Pipeline) -> Any:
        candidates = p | "Candidates" >> beam.Create(labels)
        return (
            p
            | beam.Create([rows])
            | TopCandidates.PerKey(
                candidate_column="c",
                candidates=candidates,
                record_level=True,
                key_column="k",
                keys=["x", "y", "z"],
                epsilon=1.0,
            )
        )

    releases = [release for release, _ in collect(build)]
    if not labels:
        assert releases == []
        return
    assert sorted(release.key for release in releases) == ["x", "y", "z"]
    for release in releases:
        assert release.value in labels and release.ledger.num_candidates == 3


@pytest.mark.parametrize("which", ["counts", "margin", "revenue"])
def test_shard_accumulator_rows_are_the_per_key_accumulators(which: str) -> None:
    # Driven by hand: a shard's row i is the per-key combiner's accumulator of its key, for
    # one pass and for add + merge over batches (each unit's rows in one batch).
    keys = [f"k{i}" for i in range(8)]
    common: dict[str, Any] = {"unit_column": "u", "key_column": "k", "keys": keys, "epsilon": 1.0}
    transform: Any
    if which == "revenue":
        transform = BestPrice.PerKey(value_column="v", prices=[0.5, 1.0, 2.0], **common)
    else:
        score = "plurality" if which == "counts" else "margin"
        transform = Election.PerKey(
            candidate_column="c", candidates=["a", "b"], score=score, **common
        )
    fn = transform._wiring.combine_fn
    rng = np.random.default_rng(5)
    rows = 400
    batch = {
        KEY: rng.integers(4, 8, size=rows),  # shard 1 of keys_per_shard = 4
        UNIT: rng.integers(0, 50, size=rows),
        CANDIDATE: rng.integers(0, 2, size=rows),
        VALUE: rng.uniform(0.0, 3.0, size=rows),
    }
    shard = fn.shard_fn(4)
    one_pass = shard.add_input(shard.create_accumulator(), batch)
    halves = [take(batch, np.flatnonzero(batch[UNIT] % 2 == h)) for h in (0, 1)]
    merged = shard.merge_accumulators(
        [shard.add_input(shard.create_accumulator(), half) for half in halves]
    )
    for key in range(4, 8):
        sub = take(batch, np.flatnonzero(batch[KEY] == key))
        expected = fn.add_input(fn.create_accumulator(), sub)
        assert np.array_equal(one_pass[key % 4], expected)
        assert np.array_equal(merged[key % 4], expected)
        assert np.array_equal(fn.scores_of(one_pass[key % 4]), fn._scores(expected))
    assert fn.keys_per_shard() == plan_module.BATCH_WEIGHT // (fn.row_size() + 62)
