"""What one privacy unit is, and a library that fails closed (issue 22, items 3 and 6).

* A person written ``12`` in one export and ``12.0`` (or `` 12 ``) in another is one unit,
  end to end: read, encoded and bounded as one.
* ``unit_column=None`` no longer silently means record-level privacy: ``record_level=True``
  must be asked for, as the jobs ask for ``--record_level``.
* One default for bad records everywhere: ``on_bad_record="fail"``, as in the jobs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest

from beam_dp.batching import UNIT, ContributionBounds
from beam_dp.beam._contributions import BoundContributions, EncodeBatches
from beam_dp.beam.cdf import PrivateCDF
from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates
from beam_dp.errors import BadRecordError
from beam_dp.io import ReadExport
from beam_dp.release import Release

HUGE = 1e6

# --------------------------------------------------------------- one person, one unit


def _exports(directory: Path) -> str:
    """Three exports of one table: person 12 is ``12`` (an int column), ``12.0`` (pandas'
    float text next to a text id) and `` 12 `` (padded); value x marks where each row came
    from."""
    (directory / "a.csv").write_text("user,x\n12,1\n7,10\n")
    (directory / "b.csv").write_text("user,x\n12.0,2\nu7,20\n")
    (directory / "c.csv").write_text('user,x\n" +012 ",3\nABC,30\n')
    (directory / "d.csv").write_text("user,x\nabc,40\n")
    return str(directory / "*.csv")


def _kept(collect: Any, pattern: str, unit_ids: str) -> Counter[int]:
    """Rows kept per unit after reading, encoding and bounding at one row per unit."""
    rule: dict[str, Any] = {} if unit_ids == "normalize" else {"unit_ids": unit_ids}

    def build(p: beam.Pipeline) -> Any:
        return (
            p
            | ReadExport(pattern, columns=["user", "x"], unit_column="user")
            | EncodeBatches(unit_column="user", value_column="x", **rule)
            | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
        )

    kept: Counter[int] = Counter()
    for batch, _ in collect(build):
        kept.update(batch[UNIT].tolist())
    return kept


def test_one_person_in_three_export_forms_is_bounded_as_one_unit(
    collect: Any, tmp_path: Path
) -> None:
    kept = _kept(collect, _exports(tmp_path), "normalize")
    # units: 12 (three forms), 7, "u7", "abc" (two cases): four units, one row each
    assert sorted(kept.values()) == [1, 1, 1, 1]


def test_exact_ids_keep_every_text_form_apart(collect: Any, tmp_path: Path) -> None:
    # the opt-out: 12, "12.0", " +012 ", 7, "u7", "ABC", "abc" are seven units
    kept = _kept(collect, _exports(tmp_path), "exact")
    assert sorted(kept.values()) == [1] * 7


def test_exact_ids_are_recorded_in_the_release(collect: Any) -> None:
    rows = {"u": ["A", "a", "b"], "c": ["x", "x", "y"], "v": [0.1, 0.2, 0.3]}

    def build(p: beam.Pipeline) -> Any:
        data = p | beam.Create([rows])
        return (
            data
            | "top"
            >> TopCandidates.Globally(
                candidate_column="c",
                candidates=["x", "y"],
                unit_column="u",
                epsilon=HUGE,
                unit_ids="exact",
            ),
            data
            | "median"
            >> PrivateMedian.Globally(
                lower=0.0, upper=1.0, unit_column="u", value_column="v", epsilon=1.0
            ),
        ) | beam.Flatten()

    releases: list[Release] = [element for element, _ in collect(build)]
    bounds = {r.statistic: dict(r.ledger.contribution_bounds) for r in releases}
    assert bounds["top_candidates"]["exact_unit_ids"] == 1
    assert "exact_unit_ids" not in bounds["median"]  # the default rule is not flagged


def test_a_bad_identity_rule_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="'unit_ids' must be one of"):
        PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=1.0, unit_ids="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'unit_ids' must be one of"):
        EncodeBatches(unit_column="u", unit_ids="Exact")  # type: ignore[arg-type]


# ------------------------------------------------------------------- fails closed

Build = Callable[..., beam.PTransform]
BUILDS: dict[str, Build] = {
    "TopCandidates": lambda **o: TopCandidates.Globally(
        candidate_column="c", candidates=["a"], epsilon=1.0, **o
    ),
    "BestPrice": lambda **o: BestPrice.Globally(value_column="v", epsilon=1.0, **o),
    "Election": lambda **o: Election.PerKey(
        candidate_column="c", candidates=["a"], key_column="k", keys=["x"], epsilon=1.0, **o
    ),
    "ExponentialSelect": lambda **o: ExponentialSelect.Globally(
        beam.combiners.CountCombineFn(),
        candidates=["a"],
        sensitivity=1,
        monotone=True,
        epsilon=1.0,
        **o,
    ),
    "SelectCandidates": lambda **o: SelectCandidates.Globally(
        candidate_column="c", epsilon=1.0, delta=1e-6, **o
    ),
    "PrivateQuantiles": lambda **o: PrivateQuantiles.Globally(
        [0.5], lower=0.0, upper=1.0, epsilon=1.0, **o
    ),
    "PrivateMean": lambda **o: PrivateMean.PerKey(
        lower=0.0, upper=1.0, keys=["x"], epsilon=1.0, **o
    ),
    "PrivateCDF": lambda **o: PrivateCDF.Globally(lower=0.0, upper=1.0, epsilon=1.0, **o),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_no_unit_column_needs_record_level(name: str) -> None:
    build = BUILDS[name]
    for options in ({"unit_column": None}, {}):
        with pytest.raises(
            ValueError, match=r"no privacy unit: give 'unit_column'.*record_level=True"
        ):
            build(**options)
    with pytest.raises(ValueError, match=r"'unit_column'.*record_level=True.*not both"):
        build(unit_column="u", record_level=True)
    with pytest.raises(TypeError, match="'record_level' must be True or False"):
        build(unit_column=None, record_level="yes")
    build(record_level=True)
    build(unit_column=None, record_level=True)
    build(unit_column="u")


@pytest.mark.parametrize(
    "build",
    [
        lambda: PrivateMedian.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=HUGE),
        lambda: PrivateMean.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=HUGE),
        lambda: PrivateCDF.Globally(lower=0.0, upper=1.0, unit_column="u", epsilon=HUGE),
    ],
)
def test_quantile_family_fails_on_a_bad_record_by_default(collect: Any, build: Any) -> None:
    # one default for the library and the jobs: "fail" (was "skip" for this family only)
    rows = {"u": [1, 2], "value": [0.5, math.nan]}
    with pytest.raises(BadRecordError, match="field 'value' must be a number"):
        collect(lambda p: p | beam.Create([rows]) | build())
    skipping = {"on_bad_record": "skip"}
    found = collect(
        lambda p: (
            p
            | beam.Create([rows])
            | PrivateMedian.Globally(
                lower=0.0, upper=1.0, unit_column="u", epsilon=HUGE, **skipping
            )
        )
    )
    assert len(found) == 1
