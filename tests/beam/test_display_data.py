"""Every public transform shows its public parameters as Beam display data (issue 24), in the
form Beam's runners read (``DisplayData.create_from``), and nothing read from the data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.transforms.display import DisplayData

from beam_dp import (
    BestPrice,
    Election,
    ExponentialSelect,
    KeySelection,
    PrivateCDF,
    PrivateMax,
    PrivateMean,
    PrivateMedian,
    PrivateMin,
    PrivateQuantiles,
    SelectCandidates,
    TopCandidates,
)

UNIT: dict[str, Any] = {"unit_column": "u"}
VALUES: dict[str, Any] = {"lower": 0.0, "upper": 1.0, "value_column": "v", **UNIT}
BUILDS: dict[str, Callable[[], beam.PTransform]] = {
    "TopCandidates": lambda: TopCandidates.Globally(
        candidate_column="c", candidates=["a", "b"], epsilon=1.0, **UNIT
    ),
    "TopCandidates.PerKey": lambda: TopCandidates.PerKey(
        candidate_column="c", candidates=["a"], key_column="k", keys=["x"], epsilon=1.0, **UNIT
    ),
    "TopCandidates with key selection": lambda: TopCandidates.Globally(
        candidate_column="c", candidates=None, key_selection=KeySelection(0.5, 1e-6),
        epsilon=1.0, **UNIT,
    ),
    "SelectCandidates": lambda: SelectCandidates.Globally(
        candidate_column="c", epsilon=0.5, delta=1e-6, **UNIT
    ),
    "BestPrice": lambda: BestPrice.Globally(value_column="v", epsilon=1.0, **UNIT),
    "Election": lambda: Election.Globally(
        candidate_column="c", candidates=["a", "b"], epsilon=1.0, **UNIT
    ),
    "ExponentialSelect": lambda: ExponentialSelect.Globally(
        beam.combiners.CountCombineFn(), candidates=["a"], sensitivity=1, monotone=True,
        epsilon=1.0, **UNIT,
    ),
    "PrivateQuantiles": lambda: PrivateQuantiles.Globally([0.25, 0.75], epsilon=1.0, **VALUES),
    "PrivateMedian.PerKey": lambda: PrivateMedian.PerKey(epsilon=1.0, keys=["x"], **VALUES),
    "PrivateMin": lambda: PrivateMin.Globally(epsilon=1.0, **VALUES),
    "PrivateMax": lambda: PrivateMax.Globally(epsilon=1.0, **VALUES),
    "PrivateMean": lambda: PrivateMean.Globally(epsilon=1.0, **VALUES),
    "PrivateCDF": lambda: PrivateCDF.Globally(epsilon=1.0, **VALUES),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_transform_shows_its_public_parameters(name: str) -> None:
    transform = BUILDS[name]()
    shown = transform.display_data()
    assert shown, name
    items = DisplayData.create_from(transform).items
    assert {item.key for item in items} == set(shown)
    text = " ".join(f"{k}={v}" for k, v in shown.items())
    assert "epsilon" in text or "mechanism" in text, text
