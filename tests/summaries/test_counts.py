"""Count summaries: exact, mergeable, and equal to the score objects' own computation."""

from __future__ import annotations

import pickle
import traceback
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.errors import BadRecordError
from beam_dp.scores import Revenue
from beam_dp.summaries.counts import (
    LabelCounts,
    at_least_counts,
    candidate_counts,
    label_sort_key,
    merge_into,
    reduce_per_unit,
    threshold_histogram,
)

D = 7
positions = st.lists(st.integers(0, D - 1), max_size=60)


def test_candidate_counts_counts_rows_per_candidate() -> None:
    counts = candidate_counts(np.array([0, 2, 2, 6, 2]), D)
    assert counts.dtype == np.int64
    assert counts.tolist() == [1, 0, 3, 0, 0, 0, 1]
    assert candidate_counts(np.zeros(0, dtype=np.int64), 3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("bad", [[-1], [D], [0, 99]])
def test_candidate_counts_rejects_positions_out_of_range_without_echoing_them(
    bad: list[int],
) -> None:
    with pytest.raises(ValueError, match=r"\[0, 7\)") as info:
        candidate_counts(np.array(bad), D)
    assert "99" not in str(info.value)


@given(shards=st.lists(positions, min_size=1, max_size=6))
@fresh_examples(100)
def test_sharded_counts_merge_to_the_one_pass_counts(shards: list[list[int]]) -> None:
    accumulators = [candidate_counts(np.array(shard, dtype=np.int64), D) for shard in shards]
    snapshots = [acc.copy() for acc in accumulators[1:]]
    merged = merge_into(accumulators[0], accumulators[1:])
    everything = [p for shard in shards for p in shard]
    assert merged is accumulators[0]
    assert merged.tolist() == candidate_counts(np.array(everything, dtype=np.int64), D).tolist()
    # Only the first accumulator is modified.
    for acc, snapshot in zip(accumulators[1:], snapshots, strict=True):
        assert acc.tolist() == snapshot.tolist()


@given(a=positions, b=positions, c=positions)
@fresh_examples(50)
def test_merge_is_associative_and_commutative(a: list[int], b: list[int], c: list[int]) -> None:
    def counts(xs: list[int]) -> np.ndarray:
        return candidate_counts(np.array(xs, dtype=np.int64), D)

    left = merge_into(merge_into(counts(a), [counts(b)]), [counts(c)])
    right = merge_into(counts(a), [merge_into(counts(b), [counts(c)])])
    swapped = merge_into(counts(c), [counts(b), counts(a)])
    assert left.tolist() == right.tolist() == swapped.tolist()


def test_merge_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="shapes"):
        merge_into(np.zeros(3, dtype=np.int64), [np.zeros(4, dtype=np.int64)])


def _reference_per_unit(units: list[int], values: list[float], rule: str) -> dict[int, float]:
    grouped: dict[int, list[float]] = defaultdict(list)
    for unit, value in zip(units, values, strict=True):
        grouped[unit].append(value)
    reduce = {"min": min, "max": max, "mean": lambda xs: sum(xs) / len(xs)}[rule]
    return {unit: float(reduce(xs)) for unit, xs in grouped.items()}


@pytest.mark.parametrize("rule", ["min", "max", "mean"])
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=40
    )
)
@settings(max_examples=60, deadline=None)
def test_reduce_per_unit_matches_a_reference(rule: str, rows: list[tuple[int, float]]) -> None:
    units = [unit for unit, _ in rows]
    values = [value for _, value in rows]
    reduced = reduce_per_unit(np.array(units, dtype=np.uint64), values, rule)  # type: ignore[arg-type]
    expected = _reference_per_unit(units, values, rule)
    assert reduced.shape == (len(expected),)
    np.testing.assert_allclose(reduced, [expected[u] for u in sorted(expected)], rtol=1e-12)


def test_reduce_per_unit_validates() -> None:
    with pytest.raises(ValueError, match="'rule'"):
        reduce_per_unit([1], [1.0], "median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same length"):
        reduce_per_unit([1, 2], [1.0], "min")
    assert reduce_per_unit([], [], "max").shape == (0,)


def test_threshold_histogram_and_at_least_counts_match_direct_counts() -> None:
    thresholds = np.array([0.5, 1.0, 1.5])
    values = np.array([0.4, 0.5, 1.2, 2.0, np.nan, np.inf, -np.inf, 1.0])
    histogram = threshold_histogram(values, thresholds)
    assert histogram.tolist() == [4, 1, 2, 1]  # NaN and ±inf are not data: they reach nothing
    finite = values[np.isfinite(values)]
    direct = [int(np.sum(finite >= t)) for t in thresholds]
    assert at_least_counts(histogram).tolist() == direct


@given(
    values=st.lists(st.integers(0, 250).map(lambda c: c / 100), min_size=0, max_size=80),
    split=st.integers(0, 80),
)
@settings(max_examples=80, deadline=None)
def test_revenue_from_merged_histograms_equals_the_score_object(
    values: list[float], split: int
) -> None:
    score = Revenue.default()
    thresholds = np.array([float(p) for p in score.prices])
    scaled = np.array([int(p / score.unit) for p in score.prices], dtype=np.int64)
    first = threshold_histogram(np.array(values[:split]), thresholds)
    merged = merge_into(first, [threshold_histogram(np.array(values[split:]), thresholds)])
    assert (scaled * at_least_counts(merged)).tolist() == score.compute(values).tolist()


def test_label_counts_add_merge_and_compact() -> None:
    a = LabelCounts().add(["x", "y", "x"])
    b = LabelCounts().add(["y", "z"], [2, 5])
    merged = a.merge([b])
    assert merged is a
    assert a.to_dict() == {"x": 2, "y": 3, "z": 5}
    assert b.to_dict() == {"y": 2, "z": 5}  # not modified
    assert len(a) == 3 and a.counts.dtype == np.int64


def test_label_counts_round_trip_through_pickle_and_keep_integer_labels() -> None:
    counts = LabelCounts().add(pa.array([3, 1, 3], type=pa.int64()))
    counts.merge([LabelCounts().add([1, 1])])
    restored = pickle.loads(pickle.dumps(counts))
    assert restored.to_dict() == {3: 2, 1: 3}
    assert LabelCounts().to_dict() == {} and len(LabelCounts()) == 0


def test_label_counts_reject_nulls_and_mismatched_counts() -> None:
    with pytest.raises(ValueError, match="null"):
        LabelCounts().add(pa.array(["a", None]))
    with pytest.raises(ValueError, match="same length"):
        LabelCounts().add(["a", "b"], [1])


def test_label_counts_never_merge_different_labels() -> None:
    # Labels are grouped by value, not by a hash: near-identical labels stay apart.
    labels = [f"site-{i}" for i in range(2000)] + ["site-1", "site-01"]
    counts = LabelCounts().add(labels).to_dict()
    assert counts["site-1"] == 2 and counts["site-01"] == 1 and len(counts) == 2001


SECRET = "alice@example.org-7f3a"


def test_label_counts_mix_integer_string_and_bytes_labels_by_one_canonical_rule() -> None:
    # Issue 8: key selection over mixed label types. Integers of any width, strings and bytes
    # may arrive in any batch and any order; each is its own kind, so 42 and "42" are two
    # labels (never coarser than the candidate identity bounding uses), and nothing raises.
    counts = LabelCounts().add([1, SECRET, "1", 2**64 - 1, b"1", np.int32(1)])
    counts.add(pa.array([1, 2], type=pa.int32()))
    counts.add(pa.array(["1", SECRET]))
    counts.add(np.array([3, "x"], dtype=object), [2, 5])
    counts.add(pa.array([2**63, 5], type=pa.uint64()))
    counts.merge([LabelCounts().add(pa.array([SECRET, "b"]).dictionary_encode())])
    expected: dict[Any, int] = {1: 3, 2: 1, 3: 2, 5: 1, 2**63: 1, 2**64 - 1: 1}
    expected.update({"1": 2, SECRET: 3, "x": 5, "b": 1, b"1": 1})
    assert counts.to_dict() == expected
    assert len(counts) == len(expected) and counts.counts.sum() == sum(expected.values())
    assert pickle.loads(pickle.dumps(counts)).to_dict() == expected
    ordered = sorted(counts.labels.to_pylist(), key=label_sort_key)
    assert ordered == [1, 2, 3, 5, 2**63, 2**64 - 1, "1", SECRET, "b", "x", b"1"]
    assert SECRET not in repr(counts)


def test_label_counts_do_not_depend_on_the_order_kinds_arrive_in() -> None:
    # Before: the first batch's type won, "42" then 42 merged into one label (a unit keeping
    # both candidates would add 2 to it), and 42 then "alice" raised with the label quoted.
    strings_first = LabelCounts().add(["42", "alice"]).add([42, 7])
    ints_first = LabelCounts().add([42, 7]).add(["42", "alice"])
    expected = {"42": 1, "alice": 1, 42: 1, 7: 1}
    assert strings_first.to_dict() == expected and ints_first.to_dict() == expected
    merged = LabelCounts().add([42]).merge([LabelCounts().add(["42"])])
    assert merged.to_dict() == {42: 1, "42": 1}


def _chain(error: BaseException) -> list[str]:
    texts = []
    current: BaseException | None = error
    while current is not None:
        texts.append("".join(traceback.format_exception_only(type(current), current)))
        current = current.__cause__ or current.__context__
    return texts


@pytest.mark.parametrize(
    "call",
    [
        lambda: LabelCounts().add([SECRET, None]),
        lambda: LabelCounts().add([7, SECRET, None]),
        lambda: LabelCounts().add([1, SECRET, 1.5]),
        lambda: LabelCounts().add(pa.array([SECRET, None])),
        lambda: LabelCounts().add([SECRET, 1.5]),
        lambda: LabelCounts().add(np.array([SECRET, 2.5, 3], dtype=object)),
        lambda: LabelCounts().add([SECRET, True]),
        lambda: LabelCounts().add([SECRET, 2**80]),
        lambda: LabelCounts().add(pa.array([1.5, 2.5])),
        lambda: LabelCounts().add([SECRET, "b"], [1]),
        lambda: LabelCounts().add([SECRET], [SECRET]),
        lambda: label_sort_key(1.5),
    ],
)
def test_label_errors_never_show_a_label(call: Any) -> None:
    with pytest.raises((BadRecordError, ValueError, TypeError)) as info:
        call()
    assert all(SECRET not in text and "1.5" not in text for text in _chain(info.value))
    assert info.value.__cause__ is None and info.value.__context__ is None
    if "candidate labels" in str(info.value):
        assert isinstance(info.value, BadRecordError)
