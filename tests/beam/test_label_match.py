"""``label_match``: candidates and keys that differ from the data in case or whitespace.

Under the default ``"exact"`` rule a record naming ``" apple "`` does not name the public
candidate ``"Apple"`` (it is dropped, as documented); ``label_match="normalize"`` matches it and
releases the public label as given. Public labels that the rule would merge are refused before
anything runs, in the library and in a job's config.
"""

from __future__ import annotations

import pickle
import tempfile
import uuid
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.beam.selection import Election, TopCandidates
from beam_dp.release import Release
from pipelines.statistics import spec_from_config

# 300 people name Apple in forms other than the public label; 20 name "Banana" exactly. With
# epsilon 2 (replace, sensitivity 1) the selection misses the larger count with probability
# below exp(-280) under "normalize"; under "exact" Apple counts 0 and wins with probability
# below exp(-20) (< 1e-6 either way).
FORMS = [" apple ", "APPLE", "apple", "Apple\t"]


def _rows(key: str = "DE") -> list[dict[str, Any]]:
    rows = [{"u": f"a{i}", "c": FORMS[i % len(FORMS)], "k": f" {key.lower()} "} for i in range(300)]
    rows += [{"u": f"b{i}", "c": "Banana", "k": key} for i in range(20)]
    return rows


def _winners(transform: beam.PTransform, rows: list[dict[str, Any]]) -> list[Release]:
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                pipeline
                | beam.Create([pa.Table.from_pylist(rows)])
                | transform
                | beam.Map(_save, directory)
            )
        return [pickle.loads(path.read_bytes()) for path in Path(directory).iterdir()]


def _save(release: Release, directory: str) -> None:
    (Path(directory) / uuid.uuid4().hex).write_bytes(pickle.dumps(release))


@pytest.mark.parametrize(("match", "winner"), [("normalize", "Apple"), ("exact", "Banana")])
def test_top_candidates_matches_labels_by_the_chosen_rule(match: str, winner: str) -> None:
    transform = TopCandidates.Globally(
        candidate_column="c",
        candidates=["Apple", "Banana"],
        unit_column="u",
        epsilon=2.0,
        relation="replace",
        label_match=match,  # type: ignore[arg-type]
    )
    (release,) = _winners(transform, _rows())
    assert release.value == winner


@pytest.mark.parametrize(("match", "winner"), [("normalize", "Apple"), ("exact", "Banana")])
def test_keys_match_by_the_rule_and_release_the_public_key(match: str, winner: str) -> None:
    transform = Election.PerKey(
        candidate_column="c",
        candidates=["Apple", "Banana"],
        unit_column="u",
        key_column="k",
        keys=["DE"],
        epsilon=2.0,
        relation="replace",
        label_match=match,  # type: ignore[arg-type]
    )
    # 300 people vote Apple under the key " de ", 20 vote Banana under "DE": under "exact" the
    # " de " rows name no public key.
    rows = [{**row, "c": "Apple"} for row in _rows()[:300]] + _rows()[300:]
    (release,) = _winners(transform, rows)
    assert (release.key, release.value) == ("DE", winner)


def test_labels_the_rule_would_merge_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="label_match='normalize'"):
        TopCandidates.Globally(
            candidate_column="c",
            candidates=["Apple", " apple"],
            unit_column="u",
            epsilon=1.0,
            label_match="normalize",
        )
    with pytest.raises(ValueError, match="label_match='normalize'"):
        PrivateMedian.PerKey(
            value_column="v",
            lower=0.0,
            upper=1.0,
            unit_column="u",
            key_column="k",
            keys=["DE", "de"],
            epsilon=1.0,
            label_match="normalize",
        )
    # The same labels are distinct under the default rule.
    PrivateMedian.PerKey(
        value_column="v",
        lower=0.0,
        upper=1.0,
        unit_column="u",
        key_column="k",
        keys=["DE", "de"],
        epsilon=1.0,
    )
    with pytest.raises(ValueError, match="'label_match' must be 'exact' or 'normalize'"):
        TopCandidates.Globally(
            candidate_column="c",
            candidates=["Apple"],
            unit_column="u",
            epsilon=1.0,
            label_match="fold",  # type: ignore[arg-type]
        )


def test_a_config_names_the_rule_and_a_typo_is_refused() -> None:
    entry = {
        "name": "winner",
        "type": "top_candidates",
        "candidate": "c",
        "candidates": ["Apple", "Banana"],
        "epsilon": 1.0,
    }
    spec_from_config({**entry, "label_match": "normalize"})
    with pytest.raises(ValueError, match="did you mean 'label_match'"):
        spec_from_config({**entry, "label_mach": "normalize"})
    with pytest.raises(ValueError, match="label_match"):
        spec_from_config({**entry, "label_match": "fold"})
