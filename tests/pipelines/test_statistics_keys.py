"""pipelines.statistics reads a statistic's config keys from the transforms' typed options and
asks the built transform what its budget share must name."""

from __future__ import annotations

import pytest

from beam_dp.beam._transform import PerKeyOptions, PrivateOptions
from pipelines.statistics import TYPES, spec_from_config, statistic_keys

_SET_BY_JOB = {"unit_column", "on_bad_record", "rng", "key_column", "record_level", "unit_ids"}


@pytest.mark.parametrize("kind", TYPES)
def test_the_shared_options_are_config_keys_of_every_statistic(kind: str) -> None:
    shared = (PrivateOptions.__required_keys__ | PrivateOptions.__optional_keys__) - _SET_BY_JOB
    assert shared <= set(statistic_keys(kind, per_key=False))
    per_key = (PerKeyOptions.__required_keys__ | PerKeyOptions.__optional_keys__) - _SET_BY_JOB
    assert per_key | {"key"} <= set(statistic_keys(kind, per_key=True))
    assert "max_keys_per_unit" not in statistic_keys(kind, per_key=False)


def test_a_misspelt_shared_option_is_refused_with_the_nearest_key() -> None:
    entry = {"name": "m", "type": "median", "value": "v", "lower": 0, "upper": 1, "confidnce": 0.9}
    with pytest.raises(ValueError, match=r"unknown key 'confidnce'.*did you mean 'confidence'"):
        spec_from_config(entry)


def test_rounds_and_mechanism_come_from_the_built_transform() -> None:
    quartiles = spec_from_config(
        {
            "name": "q",
            "type": "quantiles",
            "value": "v",
            "lower": 0,
            "upper": 1,
            "quantiles": [0.1, 0.25, 0.5, 0.75, 0.9],
            "split": "recursive",
        }
    )
    top = spec_from_config(
        {"name": "t", "type": "top_candidates", "candidate": "c", "candidates": ["a", "b"], "k": 2}
    )
    for spec in (quartiles, top):
        spec.check(unit_column=None, relation="add_remove", on_bad_record="skip")
    # the recursive split's 3 levels and the two ends of each of the 5 quantiles' intervals
    assert (quartiles.mechanism, quartiles.rounds) == ("permute_and_flip", 3 + 2 * 5)
    assert (top.mechanism, top.rounds) == ("permute_and_flip_top_k", 2)
