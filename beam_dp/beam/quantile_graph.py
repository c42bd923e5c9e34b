"""The Beam graph of the quantile transforms beyond the one-pass path: auto bound, coarse to fine.

:func:`~beam_dp.beam.plan.expand_plan` builds a one-pass quantile release. Two options need
more than one combine over the same keyed input (:func:`~beam_dp.beam.plan.keyed_input`, so the
window markers, and with them the rule on which windows release, are those of the one path):

* ``refine=True``: a coarse pass selects cells on a coarse grid, a side input tells each batch
  which fine candidates to bin, and a fine pass selects among them;
* ``max_contributions="auto"``: rows bounded at the cap give the histogram of rows per unit,
  merged globally per window; one exact selection chooses the bound ``b`` (a singleton side
  input per window); every unit's rows are re-sampled uniformly to ``b`` and the quantiles run
  at ``b``.

**Privacy**: each pass is a mechanism of its own spec (:mod:`beam_dp.beam.quantile_spec` says
how the release's epsilon is split between them). Only the chosen bound (a DP output) and the
coarse cells (DP outputs) travel as side inputs; the exact histogram of rows per unit is read
only by the bound's selection, and the re-sampling keeps rows uniformly per unit (salted per
run).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import AsDict, AsSingleton, PCollection

from beam_dp.beam.bounding import CountHistogramFn, rebound_rows, rows_per_unit_histogram
from beam_dp.beam.plan import Plan, keyed_input, label_releases
from beam_dp.beam.plan_graph import keyed_batches, unit_batches, window_markers
from beam_dp.beam.quantile_combiners import (
    AutoBoundSpec,
    BinFineFn,
    FineCombineFn,
    GridReleaseSpec,
    QuantileCombineFn,
    QuantileSpec,
    release_at_choice,
)
from beam_dp.beam.rebounding import keys_per_unit_histogram, rebound_keys
from beam_dp.summaries.contribution_bounds import BoundChoice

__all__ = ["expand_auto_bound", "expand_coarse_to_fine"]


def _choose(counts: Any, auto: AutoBoundSpec, rng: Any) -> BoundChoice:
    return auto.choose(counts, rng)


def _rebound(element: tuple[Any, Any], choice: BoundChoice, salt: int) -> tuple[Any, Any]:
    key, batch = element
    return key, rebound_rows(batch, choice.bound, salt)


def _histogram_of(element: tuple[Any, Any], cap: int) -> Any:
    return rows_per_unit_histogram(element[1], cap)


def expand_coarse_to_fine(pcoll: PCollection, plan: Plan, spec: QuantileSpec) -> PCollection:
    """Coarse to fine: two combines over the same keyed input, on the one path."""
    keyed = keyed_input(pcoll, plan)
    coarse = keyed | "CoarsePass" >> beam.CombinePerKey(QuantileCombineFn(spec, coarse=True))
    releases = (
        keyed
        | "BinFine" >> beam.ParDo(BinFineFn(spec), AsDict(coarse))
        | "FinePass" >> beam.CombinePerKey(FineCombineFn(spec))
    )
    return label_releases(releases, plan)


def expand_auto_bound(
    pcoll: PCollection,
    plan: Plan,
    spec: Any,
    auto: AutoBoundSpec,
    merge: beam.CombineFn,
    *,
    release: Callable[[tuple[Any, Any], BoundChoice, Any], tuple[Any, Any]] = release_at_choice,
) -> PCollection:
    """Bound at the cap, choose the bound privately per window, re-bound, release.

    ``merge`` combines a key's re-bounded batches into the accumulator that
    ``release(element, choice, spec)`` releases: by default :func:`release_at_choice`, which
    calls ``spec.release_merged`` (:class:`AutoQuantileCombineFn`: a grid histogram;
    :class:`AutoMeanCombineFn`: an exact sum); DP key selection passes its own (its
    accumulator holds distinct-unit counts per label). ``spec.rng`` draws the choice.

    The rows kept at the cap (a uniform sample per unit, and ``max_keys_per_unit`` keys)
    give the histogram of rows per unit (per (unit, key) for ``.PerKey``: a unit holds
    ``m`` of its counts, and the choice's sensitivity is multiplied by ``m``); one exact
    selection chooses ``b`` (a singleton side input per window); every unit's rows are
    then re-sampled to ``b`` per key and the quantiles run at ``b``.
    """
    if auto.target == "keys":
        return _expand_auto_keys(pcoll, plan, spec, auto, merge)
    keyed = keyed_input(pcoll, plan)  # every window that releases has a marker
    choice = (
        keyed
        | "RowsPerUnit" >> beam.Map(_histogram_of, auto.cap)
        | "MergeRowsPerUnit" >> beam.CombineGlobally(CountHistogramFn(auto.cap)).without_defaults()
        | "ChooseBound" >> beam.Map(_choose, auto, spec.rng)
    )
    salt = plan.salt if plan.salt is not None else secrets.randbits(64)
    releases = (
        keyed
        | "ReboundToChoice" >> beam.Map(_rebound, AsSingleton(choice), salt)
        | "MergePerKey" >> beam.CombinePerKey(merge)
        | "Select" >> beam.Map(release, AsSingleton(choice), spec)
    )
    return label_releases(releases, plan)


def _keys_histogram_of(batch: Any, cap: int) -> Any:
    return keys_per_unit_histogram(batch, cap)


def _no_keys(_: Any, cap: int) -> Any:
    return np.zeros(cap + 1, dtype=np.int64)


def _rebound_keys_to(batch: Any, choice: BoundChoice, salt: int) -> Any:
    return rebound_keys(batch, choice.bound, salt)


def _expand_auto_keys(
    pcoll: PCollection,
    plan: Plan,
    spec: GridReleaseSpec,
    auto: AutoBoundSpec,
    merge: beam.CombineFn,
) -> PCollection:
    """``max_keys_per_unit="auto"``: choose the number of keys per unit, re-bound, release.

    The batches out of the bounding hold every row of their units, at most the cap of keys
    each; before they are split by key, each unit adds one count to the histogram of keys
    per unit (plus an empty histogram per releasing window, so every window chooses). One
    exact selection chooses ``K`` (a singleton side input per window); every unit then keeps
    a uniform ``K`` of its keys (fresh salt), the batches are split by key, and each key's
    statistic runs at its share of the window's budget at ``K`` (:class:`KeyShare`).
    """
    batches = unit_batches(pcoll, plan)
    markers = window_markers(pcoll, unit_level=True)  # for the choice and the releases
    choice = (
        (
            batches | "KeysPerUnit" >> beam.Map(_keys_histogram_of, auto.cap),
            markers | "NoKeys" >> beam.Map(_no_keys, auto.cap),
        )
        | "WithEveryWindow" >> beam.Flatten()
        | "MergeKeysPerUnit" >> beam.CombineGlobally(CountHistogramFn(auto.cap)).without_defaults()
        | "ChooseKeys" >> beam.Map(_choose, auto, spec.rng)
    )
    salt = secrets.randbits(64)
    rebounded = batches | "ReboundKeysToChoice" >> beam.Map(
        _rebound_keys_to, AsSingleton(choice), salt
    )
    releases = (
        keyed_batches(pcoll, plan, rebounded, markers)
        | "MergePerKey" >> beam.CombinePerKey(merge)
        | "Select" >> beam.Map(release_at_choice, AsSingleton(choice), spec)
    )
    return label_releases(releases, plan)
