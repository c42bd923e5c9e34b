"""Opt-in label normalisation (issue 22, item 7): candidates and keys that differ from the
data's labels in case, surrounding whitespace or Unicode form match with
``match="normalize"``; the default compares text exactly."""

from __future__ import annotations

import pickle
import unicodedata

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.batching.columns import PublicIndex


def test_exact_is_the_default_and_normalize_is_opt_in() -> None:
    data = pa.array([" apple", "BANANA", "Apple", None, "kiwi"])
    assert PublicIndex(["Apple", "Banana"]).lookup(data).tolist() == [-1, -1, 0, -1, -1]
    folded = PublicIndex(["Apple", "Banana"], match="normalize")
    assert folded.lookup(data).tolist() == [0, 1, 0, -1, -1]
    assert folded.labels == ("Apple", "Banana")  # released as given


def test_unicode_forms_and_python_values_match_alike() -> None:
    composed, decomposed = "Crème", unicodedata.normalize("NFD", "Crème")
    index = PublicIndex([composed], match="normalize")
    assert index.lookup(pa.array([decomposed, " crème "])).tolist() == [0, 0]
    assert index.lookup([decomposed, 3]).tolist() == [0, -1]  # mixed types: row by row
    assert pickle.loads(pickle.dumps(index)).lookup([decomposed]).tolist() == [0]


def test_labels_that_would_collide_are_refused() -> None:
    with pytest.raises(ValueError, match="differ only in case"):
        PublicIndex(["Apple", " apple"], match="normalize")
    with pytest.raises(ValueError, match="'label_match' must be"):
        PublicIndex(["a"], match="fold")  # type: ignore[arg-type]
    assert PublicIndex([1, 2], match="normalize").lookup([1.0, "2"]).tolist() == [0, 1]


@given(st.lists(st.text(max_size=5), min_size=1, max_size=8, unique=True), st.data())
def test_normalize_only_ever_adds_matches(labels: list[str], data: st.DataObject) -> None:
    try:
        folded = PublicIndex(labels, match="normalize")
    except ValueError:
        return  # labels that collide when folded are refused
    values = data.draw(st.lists(st.sampled_from(labels) | st.text(max_size=5), max_size=10))
    exact = PublicIndex(labels).lookup(pa.array(values, pa.string())).tolist()
    loose = folded.lookup(pa.array(values, pa.string())).tolist()
    assert all(e == -1 or e == f for e, f in zip(exact, loose, strict=True))
