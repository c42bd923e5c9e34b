"""The unit hash is stable across processes and identical for equal identifiers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from beam_dp.batching import stable_hash64

IDS = ["alice", "bob", " Émile ", "12.0", "x" * 300]


def _in_fresh_process(ids: list[str]) -> list[int]:
    code = (
        "import sys, json, pyarrow as pa\n"
        "from beam_dp.batching import stable_hash64\n"
        f"print(json.dumps([int(h) for h in stable_hash64(pa.array({ids!r}))]))\n"
    )
    env = {"PYTHONHASHSEED": "random"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    import json

    return list(json.loads(out.stdout))


def test_same_hash_in_other_processes() -> None:
    here = [int(h) for h in stable_hash64(pa.array(IDS))]
    assert _in_fresh_process(IDS) == here
    assert _in_fresh_process(IDS) == here


def test_equal_identifiers_hash_equal_across_layouts() -> None:
    array = pa.array(IDS + IDS)
    whole = stable_hash64(array)
    assert list(whole[: len(IDS)]) == list(whole[len(IDS) :])
    # slices, large strings, chunked arrays, dictionaries and numpy object arrays agree
    assert list(stable_hash64(array.slice(len(IDS)))) == list(whole[: len(IDS)])
    assert list(stable_hash64(pa.array(IDS, type=pa.large_string()))) == list(whole[: len(IDS)])
    assert list(stable_hash64(pa.chunked_array([IDS[:2], IDS[2:]]))) == list(whole[: len(IDS)])
    assert list(stable_hash64(pa.array(IDS).dictionary_encode())) == list(whole[: len(IDS)])
    assert list(stable_hash64(np.array(IDS, dtype=object))) == list(whole[: len(IDS)])


def test_integers_hash_the_same_from_numpy_and_arrow() -> None:
    ints = [0, 1, -5, 2**62]
    assert list(stable_hash64(np.array(ints))) == list(stable_hash64(pa.array(ints)))
    assert len(set(stable_hash64(np.arange(100_000)).tolist())) == 100_000


def test_distinct_strings_rarely_collide() -> None:
    ids = pa.array([f"user-{i}" for i in range(200_000)])
    assert len(np.unique(stable_hash64(ids))) == 200_000


def test_nulls_and_floats_are_refused_without_values() -> None:
    with pytest.raises(ValueError, match="must not be null"):
        stable_hash64(pa.array(["secret-id", None]))
    with pytest.raises(TypeError, match="integers or strings"):
        stable_hash64(np.array([1.5]))
