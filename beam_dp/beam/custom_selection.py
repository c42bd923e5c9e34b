"""Private selection with a user's score on Beam: :class:`ExponentialSelect`.

The user gives a ``beam.CombineFn`` and declares its sensitivity and monotonicity; the library
enforces the contribution bounds and runs the same plan (:mod:`beam_dp.beam.plan`), exact
selection and release as the built-in scores of :mod:`beam_dp.beam.selection`, whose module
docstring describes windows, ``.PerKey`` and record-level privacy for every selection.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Required, TypedDict, Unpack

import apache_beam as beam

from beam_dp._validation import check_positive_finite
from beam_dp.batching import ContributionBounds
from beam_dp.beam.options import (
    CommonOptions,
    KeyOptions,
    PerKeyOptions,
    PrivateOptions,
    PublicList,
    check_column,
    static_labels,
)
from beam_dp.beam.plan import Built, PrivateTransform
from beam_dp.beam.selection_combiners import CustomScoreFn, public_index, selection_plan
from beam_dp.beam.selection_spec import SelectionSpec, ledger_bounds

__all__ = ["ExponentialSelect"]


# The statistic's own keywords, declared once (functional form: its Required[...] stays
# visible at run time, see beam_dp.beam.selection); ``score_fn`` stays positional.
ExponentialSelectArgs = TypedDict(  # noqa: UP013 (Required read at run time)
    "ExponentialSelectArgs",
    {
        "candidates": Required[PublicList],
        "sensitivity": Required[float | Fraction],
        "monotone": Required[bool],
        "unit_column": str | None,
        "candidate_column": str | None,
        "value_column": str | None,
        "bounds": ContributionBounds | None,
        "statistic": str,
        "k": int,
    },
    total=False,
)


class ExponentialSelectGloballyOptions(ExponentialSelectArgs, PrivateOptions, total=False):
    """Every keyword of ``ExponentialSelect.Globally``."""


class ExponentialSelectPerKeyOptions(ExponentialSelectArgs, PerKeyOptions, total=False):
    """Every keyword of ``ExponentialSelect.PerKey``."""


def _custom(
    score_fn: beam.CombineFn, options: CommonOptions, keys: KeyOptions, args: ExponentialSelectArgs
) -> Built:
    candidates = args["candidates"]
    sensitivity = args["sensitivity"]
    monotone = args["monotone"]
    unit_column = args.get("unit_column")
    candidate_column = args.get("candidate_column")
    value_column = args.get("value_column")
    bounds = args.get("bounds")
    statistic = args.get("statistic", "custom")
    if not isinstance(score_fn, beam.CombineFn):
        raise TypeError(
            f"'score_fn' must be a beam.CombineFn; received type {type(score_fn).__name__}"
        )
    check_positive_finite(sensitivity, "sensitivity")
    if not isinstance(monotone, bool):
        raise TypeError(f"'monotone' must be a bool; received type {type(monotone).__name__}")
    requested = ContributionBounds() if bounds is None else bounds
    if not isinstance(requested, ContributionBounds):
        raise TypeError("'bounds' must be a beam_dp.batching.ContributionBounds")
    if not isinstance(statistic, str) or not statistic:
        raise ValueError(f"'statistic' must be a non-empty string; received {statistic!r}")
    for column, field in (
        (unit_column, "unit_column"),
        (candidate_column, "candidate_column"),
        (value_column, "value_column"),
    ):
        check_column(column, field, optional=True)
    labels = static_labels(candidates)
    options.check_k(len(labels))
    record_level = unit_column is None
    windows = options.windows_per_unit(record_level)
    budget = options.budget(statistic)
    one_key = keys.split(budget, record_level, windows)
    enforced = (
        None
        if record_level
        else ContributionBounds(
            max_contributions_per_unit=requested.max_contributions_per_unit,
            max_keys_per_unit=keys.max_keys_per_unit,
            distinct_candidates=requested.distinct_candidates,
        )
    )
    spec = SelectionSpec(
        name=budget.name,
        statistic=statistic,
        method=options.method,
        k=options.k,
        epsilon=one_key.epsilon,
        rho=one_key.rho,
        selection_sensitivity=Fraction(sensitivity),
        sensitivity=float(sensitivity),
        monotone=monotone,
        relation=options.relation,
        contribution_bounds=ledger_bounds(
            {} if record_level else requested.to_dict(), keys, options, record_level, windows
        ),
        confidence=options.confidence,
        rng=options.rng,
    )
    built = selection_plan(
        spec,
        options=options,
        keys=keys,
        unit_column=unit_column,
        encode={
            "candidate_column": candidate_column,
            "candidates": None if candidate_column is None else public_index(labels),
            "value_column": value_column,
        },
        combine_fn=CustomScoreFn(spec, labels, score_fn),
        bounds=enforced,
        labels=labels,
        epsilon_total=budget.epsilon,
    )
    built.display["score_fn"] = type(score_fn).__name__
    return built


class ExponentialSelect:
    """Private selection with a user's score: a ``CombineFn`` plus its declared sensitivity.

    ``score_fn`` is a ``beam.CombineFn`` whose inputs are encoded column batches (dicts of
    numpy arrays): ``"unit"`` (the stable unit hash; absent with record-level privacy),
    ``"candidate"`` (the position in ``candidates``, if ``candidate_column`` is given),
    ``"value"`` (float64, if ``value_column`` is given) and ``"key"``. Every batch holds *all*
    the bounded rows of each unit in it, so per-unit logic can run inside ``add_input``. Its
    ``extract_output`` returns one score per candidate (ints, floats or Fractions; higher is
    better). The library enforces ``bounds`` and runs the same exact selection and release as
    the built-in scores.

    Args (both variants):
        score_fn: the score ``CombineFn``.
        candidates: the public labels (a sequence or a file path).
        sensitivity: the declared sensitivity in the score's units (> 0, finite).
        monotone: the declared monotonicity under ``relation``.
        unit_column: the privacy-unit field (or ``record_level=True`` for record-level
            privacy).
        candidate_column, value_column: fields encoded for ``score_fn``.
        bounds: the contribution bounds to enforce (default: one row per unit; its
            ``max_keys_per_unit`` is replaced by the ``.PerKey`` argument).
        statistic: the ledger's statistic name (default ``"custom"``).
        k: how many candidates to release, as in :class:`TopCandidates`.
        **options: as in :class:`TopCandidates` (``name`` defaults to ``statistic``).

    Privacy:
        The caller declares ``sensitivity`` (the largest change of any candidate's score
        between neighbours under ``relation``, given ``bounds``) and ``monotone``; the
        guarantee is only as good as that declaration. Releases the chosen label(s).
    """

    class Globally(PrivateTransform):
        """Select over the whole input, one release per window."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectGloballyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))

    class PerKey(PrivateTransform):
        """One selection per public key, one release per key."""

        def __init__(
            self, score_fn: beam.CombineFn, **options: Unpack[ExponentialSelectPerKeyOptions]
        ) -> None:
            super().__init__()
            self._build(options, functools.partial(_custom, score_fn))
