"""The shared interface: every score is a frozen, picklable ``Score`` with exact integer output."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import beam_dp.scores
from beam_dp.scores import (
    DistinctUnitCount,
    MeanScore,
    PluralityVote,
    QuantileScore,
    Revenue,
    Score,
    VoteMargin,
)

SCORES: list[tuple[Score, object]] = [
    (DistinctUnitCount(3, max_candidates_per_unit=2), [[0, 1], [2]]),
    (PluralityVote(3), [0, 2, 2]),
    (VoteMargin(), [0, 1, 1]),
    (Revenue.default(), [0.5, 1.2, 0.7]),
    (QuantileScore(0.9, [0.0, 0.5, 1.0], max_contributions=2), [0.1, 0.7, 0.9]),
    (MeanScore([0.0, 0.5, 1.0], 0, 1, n=3, max_contributions=1), [0.1, 0.7, 0.9]),
]
IDS = [type(score).__name__ for score, _ in SCORES]


def test_public_names() -> None:
    assert sorted(beam_dp.scores.__all__) == sorted(
        [
            "Score",
            "DistinctUnitCount",
            "Revenue",
            "PluralityVote",
            "VoteMargin",
            "QuantileScore",
            "MeanScore",
        ]
    )


def test_score_is_abstract() -> None:
    with pytest.raises(TypeError):
        Score()  # type: ignore[abstract]


@pytest.mark.parametrize(("score", "data"), SCORES, ids=IDS)
def test_interface(score: Score, data: object) -> None:
    assert isinstance(score, Score)
    assert dataclasses.is_dataclass(score)
    assert isinstance(score.unit, Fraction) and score.unit > 0
    scores = score.compute(data)  # type: ignore[attr-defined]
    assert isinstance(scores, np.ndarray)
    assert scores.dtype == np.int64
    assert scores.shape == (score.num_candidates,)
    relations = ("replace",) if isinstance(score, MeanScore) else ("add_remove", "replace")
    for relation in relations:
        sensitivity = score.sensitivity(relation)  # type: ignore[arg-type]
        assert isinstance(sensitivity, Fraction) and sensitivity > 0
        assert score.scaled_sensitivity(relation) == sensitivity / score.unit  # type: ignore[arg-type]
        assert isinstance(score.monotone(relation), bool)  # type: ignore[arg-type]
    assert all(isinstance(v, int) and v >= 1 for v in score.contribution_bounds.values())


@pytest.mark.parametrize(("score", "data"), SCORES, ids=IDS)
def test_frozen_hashable_picklable(score: Score, data: object) -> None:
    field = dataclasses.fields(score)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(score, field, None)
    copy = pickle.loads(pickle.dumps(score))
    assert copy == score
    assert hash(copy) == hash(score)
    assert np.array_equal(copy.compute(data), score.compute(data))  # type: ignore[attr-defined]


def test_equal_parameters_make_equal_scores() -> None:
    assert QuantileScore(0.9, [1.0, 2.0]) == QuantileScore(Fraction(9, 10), np.array([1.0, 2.0]))
    assert Revenue.from_cents([5, 50]) == Revenue([0.05, 0.5])
    assert DistinctUnitCount(3) != DistinctUnitCount(3, max_candidates_per_unit=2)


def test_no_beam_import() -> None:
    # DESIGN §6: everything below beam_dp/beam runs without Beam.
    package = Path(beam_dp.scores.__file__).parent
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(name.split(".")[0] == "apache_beam" for name in names), path
