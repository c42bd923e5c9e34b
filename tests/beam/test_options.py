"""The options every private transform takes, declared once (beam_dp.beam._transform)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.beam._transform import (
    GridOptions,
    PerKeyOptions,
    PrivateOptions,
    ResolvedBudget,
    check_method,
    divide_budget,
    read_labels,
)
from beam_dp.beam.cdf import PrivateCDF
from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMax, PrivateMedian, PrivateMin, PrivateQuantiles
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates
from beam_dp.mechanisms.selection import check_method as the_check_method
from pipelines.statistics import _parameters, statistic_keys


def _top(**extra: Any) -> TopCandidates.Globally:
    return TopCandidates.Globally(
        candidate_column="c", candidates=["a", "b"], unit_column="u", epsilon=1.0, **extra
    )


@pytest.mark.parametrize(
    ("build", "typo", "suggestion"),
    [
        (_top, "methd", "method"),
        (
            lambda **extra: PrivateMedian.Globally(
                lower=0.0, upper=1.0, record_level=True, epsilon=1.0, **extra
            ),
            "confidense",
            "confidence",
        ),
    ],
)
def test_a_misspelt_option_is_refused_with_the_nearest_name(
    build: Any, typo: str, suggestion: str
) -> None:
    with pytest.raises(TypeError, match=f"'{typo}'; did you mean '{suggestion}'"):
        build(**{typo: "x"})


def test_a_per_key_option_on_a_global_transform_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'max_keys_per_unit' applies only to \.PerKey"):
        _top(max_keys_per_unit=2)


def test_every_constructor_shares_the_typed_options() -> None:
    common = PrivateOptions.__required_keys__ | PrivateOptions.__optional_keys__
    assert {"epsilon", "method", "relation", "confidence", "salt", "rng"} <= common
    assert {"key_column", "keys", "max_keys_per_unit"} <= PerKeyOptions.__optional_keys__ | (
        PerKeyOptions.__required_keys__
    )
    for variant in (TopCandidates, BestPrice, Election, ExponentialSelect):
        for cls, options in ((variant.Globally, PrivateOptions), (variant.PerKey, PerKeyOptions)):
            # Each variant unpacks one TypedDict: the statistic's own keywords combined with the
            # shared ones by inheritance.
            hint = typing.get_type_hints(cls.__init__)["options"]
            assert typing.get_origin(hint) is typing.Unpack, cls
            (declared,) = typing.get_args(hint)
            shared = options.__required_keys__ | options.__optional_keys__
            assert shared <= declared.__required_keys__ | declared.__optional_keys__, cls


def test_a_transform_answers_its_ledger_mechanism_and_rounds() -> None:
    top = _top(k=2)
    assert (top.mechanism, top.rounds) == ("permute_and_flip_top_k", 2)
    quantiles = PrivateQuantiles.Globally(
        [0.1, 0.25, 0.5, 0.75, 0.9], lower=0.0, upper=1.0, record_level=True, epsilon=1.0
    )
    # the quantiles' rounds and the two ends of each quantile's interval
    assert quantiles.rounds == quantiles.plan.rounds + 2 * 5 and quantiles.plan.rounds > 1
    assert quantiles.mechanism == "permute_and_flip"
    mean = PrivateMean.PerKey(
        lower=0.0, upper=1.0, record_level=True, epsilon=1.0, keys=["a"], method="exponential"
    )
    assert (mean.mechanism, mean.rounds) == ("laplace", 1)  # noisy sums, whatever the method
    mean = PrivateMean.PerKey(
        lower=0.0,
        upper=1.0,
        record_level=True,
        epsilon=1.0,
        keys=["a"],
        method="exponential",
        estimator="selection",
    )
    assert (mean.mechanism, mean.rounds) == ("exponential", 1)
    # A share requested with what the transform answers is accepted by it.
    budget = PrivacyBudget(1.0)
    share = budget.request("q", mechanism=quantiles.mechanism, rounds=quantiles.rounds)
    budget.finalize()
    PrivateQuantiles.Globally(
        [0.1, 0.25, 0.5, 0.75, 0.9], lower=0.0, upper=1.0, record_level=True, epsilon=share
    )


def test_method_names_have_one_rule() -> None:
    assert check_method is the_check_method


def test_label_files_have_one_comment_rule(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_text("# header\n  a  \n\n   # an indented comment\nb\n", encoding="utf-8")
    assert read_labels(path) == ("a", "b")
    with pytest.raises(ValueError, match="cannot be read") as raised:
        read_labels(tmp_path / "missing.txt")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_one_split_of_a_share_covers_delta() -> None:
    whole = ResolvedBudget("k", 1.0, None, "partition_selection", delta=1e-6)
    one = divide_budget(whole, keys_per_unit=2, windows_per_unit=2)
    assert one.epsilon * 4 <= 1.0 and one.delta is not None and one.delta * 4 <= 1e-6


_SHARED_KEYS = {
    "confidence",
    "epsilon",
    "label_match",
    "max_windows_per_unit",
    "method",
    "name",
    "num_shards",
    "relation",
    "salt",
    "type",
    "weight",
}
_PER_KEY_KEYS = {"key", "keys", "max_keys_per_unit"}
_OWN_KEYS = {
    "top_candidates": {"candidate", "candidates", "k", "max_candidates_per_unit"},
    "best_price": {"value", "prices", "per_unit"},
    "election": {"candidate", "candidates", "score"},
}


@pytest.mark.parametrize("kind", sorted(_OWN_KEYS))
@pytest.mark.parametrize("per_key", [False, True])
def test_the_config_keys_of_each_selection_are_pinned(kind: str, per_key: bool) -> None:
    # pipelines.statistics derives these from the constructors' Unpack'd TypedDicts: declaring
    # a statistic's own keywords once (in a TypedDict) must leave every key set as it was.
    expected = _SHARED_KEYS | _OWN_KEYS[kind]
    if per_key:
        expected |= _PER_KEY_KEYS
    elif kind == "top_candidates":
        expected |= {"key_selection_epsilon", "key_selection_delta"}
    assert set(statistic_keys(kind, per_key=per_key)) == expected


@pytest.mark.parametrize(
    ("variant", "required"),
    [
        (TopCandidates.Globally, {"candidate_column", "candidates"}),
        (TopCandidates.PerKey, {"candidate_column", "candidates", "keys"}),
        (BestPrice.Globally, {"value_column"}),
        (BestPrice.PerKey, {"value_column", "keys"}),
        (Election.Globally, {"candidate_column", "candidates"}),
        (Election.PerKey, {"candidate_column", "candidates", "keys"}),
        (ExponentialSelect.Globally, {"score_fn", "candidates", "sensitivity", "monotone"}),
        (ExponentialSelect.PerKey, {"score_fn", "candidates", "sensitivity", "monotone", "keys"}),
    ],
)
def test_the_required_keywords_of_each_selection_are_pinned(
    variant: type, required: set[str]
) -> None:
    # epsilon is required of every transform (PrivateOptions keeps its Required[...] at run
    # time: beam_dp.beam._transform has no `from __future__ import annotations`), keys of
    # every .PerKey. unit_column is not: without it, record_level=True is required instead.
    assert set(_parameters(variant)[1]) == required | {"epsilon"}


def test_a_misspelt_own_keyword_is_refused_with_the_nearest_own_name() -> None:
    # Before the statistic's own keywords joined its TypedDict, this named
    # 'max_windows_per_unit' (the nearest shared option) instead.
    with pytest.raises(TypeError, match="'max_candidate_per_unit'; did you mean 'max_candid"):
        _top(max_candidate_per_unit=2)
    with pytest.raises(TypeError, match=r"BestPrice\.PerKey\(\).*'per_units'; did you mean 'per_"):
        BestPrice.PerKey(  # type: ignore[call-arg]
            value_column="v", record_level=True, epsilon=1.0, keys=["a"], per_units="max"
        )


def test_a_missing_own_keyword_and_a_global_only_one_are_refused() -> None:
    with pytest.raises(ValueError, match=r"no privacy unit: give 'unit_column'.*record_level=True"):
        Election.Globally(candidate_column="c", candidates=["a", "b"], epsilon=1.0)
    with pytest.raises(TypeError, match="'key_selection'"):
        TopCandidates.PerKey(  # type: ignore[call-arg]
            candidate_column="c",
            candidates=["a"],
            record_level=True,
            epsilon=1.0,
            keys=["x"],
            key_column="k",
            key_selection=None,
        )
    with pytest.raises(ValueError, match=r"TopCandidates\.PerKey needs public 'candidates'"):
        TopCandidates.PerKey(
            candidate_column="c",
            candidates=None,  # type: ignore[arg-type]
            record_level=True,
            epsilon=1.0,
            keys=["x"],
            key_column="k",
        )


def _declared(variant: type) -> Any:
    for klass in variant.__mro__:
        init = klass.__dict__.get("__init__")
        hint = typing.get_type_hints(init).get("options") if init else None
        if typing.get_origin(hint) is typing.Unpack:
            return typing.get_args(hint)[0]
    raise AssertionError(variant)


_GRID = {"lower", "upper"}
_SELECTED = {"candidate_column", "candidates"}


@pytest.mark.parametrize(
    ("variant", "required"),
    [
        (PrivateQuantiles.Globally, _GRID),
        (PrivateQuantiles.PerKey, _GRID | {"keys"}),
        (PrivateMedian.Globally, _GRID),
        (PrivateMin.PerKey, _GRID | {"keys"}),
        (PrivateMax.Globally, _GRID),
        (PrivateMean.Globally, _GRID),
        (PrivateMean.PerKey, _GRID | {"keys"}),
        (PrivateCDF.Globally, _GRID),
        (PrivateCDF.PerKey, _GRID | {"keys"}),
        (TopCandidates.Globally, _SELECTED),
        (TopCandidates.PerKey, _SELECTED | {"keys"}),
        (BestPrice.Globally, {"value_column"}),
        (Election.PerKey, _SELECTED | {"keys"}),
        (ExponentialSelect.Globally, {"candidates", "sensitivity", "monotone"}),
        (SelectCandidates.Globally, {"candidate_column"}),
    ],
)
def test_the_typed_options_keep_their_required_keys(variant: type, required: set[str]) -> None:
    # Class-form TypedDicts under `from __future__ import annotations` lose Required[...] on
    # Python 3.11 (the annotation stays a string): epsilon, keys, lower and upper would be
    # optional, and each transform would have to check them by hand.
    assert PrivateOptions.__required_keys__ == {"epsilon"}
    assert PerKeyOptions.__required_keys__ == {"epsilon", "keys"}
    assert GridOptions.__required_keys__ == _GRID
    declared = _declared(variant)
    assert declared.__required_keys__ == required | {"epsilon"}
    assert {"method" if variant is not SelectCandidates.Globally else "delta", "name"} <= (
        declared.__optional_keys__
    )


@pytest.mark.parametrize(
    ("build", "missing"),
    [
        (lambda: PrivateMedian.Globally(upper=1.0, record_level=True, epsilon=1.0), "lower"),
        (lambda: PrivateMean.PerKey(lower=0.0, upper=1.0, record_level=True, epsilon=1.0), "keys"),
        (lambda: PrivateCDF.Globally(lower=0.0, upper=1.0, record_level=True), "epsilon"),
        (lambda: SelectCandidates.Globally(candidate_column="c", record_level=True), "epsilon"),
        (
            lambda: TopCandidates.Globally(
                candidate_column="c", candidates=["a"], record_level=True
            ),
            "epsilon",
        ),
    ],
)
def test_a_missing_required_keyword_is_named_by_the_one_check(build: Any, missing: str) -> None:
    # A TypeError as Python's own, and a ValueError as the transforms' own checks raised.
    with pytest.raises(TypeError, match=rf"\(\) missing required keyword argument '{missing}'"):
        build()
    with pytest.raises(ValueError, match=f"'{missing}'"):
        build()


@pytest.mark.parametrize(
    ("build", "typo", "suggestion"),
    [
        (
            lambda **o: PrivateMean.Globally(
                lower=0.0, upper=1.0, record_level=True, epsilon=1.0, **o
            ),
            "num_point",
            "num_points",
        ),
        (
            lambda **o: PrivateQuantiles.Globally(
                [0.5], lower=0.0, upper=1.0, record_level=True, epsilon=1.0, **o
            ),
            "resolutoin",
            "resolution",
        ),
        (
            lambda **o: PrivateCDF.PerKey(
                lower=0.0, upper=1.0, record_level=True, epsilon=1.0, keys=["a"], **o
            ),
            "count_shar",
            "count_share",
        ),
        (
            lambda **o: SelectCandidates.Globally(
                candidate_column="c", record_level=True, epsilon=1.0, delta=1e-6, **o
            ),
            "max_candidate_per_unit",
            "max_candidates_per_unit",
        ),
    ],
)
def test_every_transform_names_the_nearest_keyword_by_the_one_check(
    build: Any, typo: str, suggestion: str
) -> None:
    with pytest.raises(
        TypeError, match=f"unexpected keyword argument '{typo}'; did you mean '{suggestion}'"
    ):
        build(**{typo: 1})
