"""The exact audit at every production call site of a sampler, each proved able to fail.

Issue 28: a pair node of the joint split sampled at 2ε passed the whole suite, because the
sampler's own tests recompute the rate the call site should pass instead of capturing what
it does pass. Here every place a release samples is driven through its public transform on
adversarial neighbours, with the end-to-end audit's exact method
(:mod:`test_end_to_end_audit`): the sampler entry points the pipeline looks up are wrapped,
the merged scores (counts, cumulative counts) and public parameters each call receives are
recorded, the choice is forced to a public one (so later rounds run on the same history in
both neighbours), and the loss is computed from both exact output laws, summed over rounds,
stages, keys and windows. The call sites:

====================  =====================================================================
site                  sampler call (the module attribute the pipeline looks up)
====================  =====================================================================
selections            ``select`` in ``beam_dp.summaries.selection`` (top, price, votes,
                      margin, a user's score)
top-k rounds          ``top_k`` there
per-key draws         ``select_per_key`` there (``.PerKey``: many keys in one draw)
key selection         ``select_keys`` in ``beam_dp.beam.key_selection`` (its
                      threshold and noise), then the top-k among the labels
quantile points       ``select`` in ``beam_dp.summaries.quantiles.parameters``: one quantile,
                      recursive levels, independent quantiles, both passes of
                      coarse-to-fine, the mean
``auto`` choices      ``select`` in ``beam_dp.summaries.contribution_bounds``: rows per unit
                      (quantiles and mean), keys per unit, labels per unit (key selection)
the CDF               ``release_ks_cdf`` in ``beam_dp.beam.cdf`` (its public entry point):
                      the noisy count and the KS sample
the mean's sums       ``noisy_sum_and_count`` in ``beam_dp.summaries.quantiles.mean``: the
                      noisy centred sum and count (the default mean)
====================  =====================================================================

(The joint split's pair node is audited by its own test.)

**Each test proves it can fail.** After auditing the real code, the test runs the same
pipelines with *the call site calibrated at 2ε*: the sampler entry point that call site looks
up is wrapped to pass twice the epsilon it is given (or, for one part of a release that
splits its epsilon, the arguments that double that part alone), and the audit must reject
the result. A mutant that never reaches its call site fails the test too (the harness has
drifted from the code).

**Budgets.** The loss is held to the release's ε, and, where a release splits ε between
stages that each claim a part (a bound choice and the statistic, the root and the deeper
levels of the recursive split, the coarse and the fine pass), each stage to its part: a stage
sampled at twice its part is then caught whatever the other stages spend. Parameters that
only move where ε is split (``bound_share``, ``count_share``, ``refine_fraction``) are set to
1/2 so that each stage spends a visible part (the CDF's count, whose loss is exactly its
part, then takes the whole release past ε when either part doubles).

**Neighbours.** Background units stay within every bound (one row each), so bounding
chooses only among the adversary's rows. Under ``add_remove`` the neighbour adds the
adversary: many rows in every key, its id the integer 42 in one batch and the text "42" in
another (one person), at the low end of the values, naming a rare candidate. Under
``replace`` the adversary is present in both, in the same keys (keys are public under
``replace``), with its values moved from the high end to the low end. A loss can only come
close to ε where the output law is concentrated, so some sites get their own background
(:class:`Data`): many units at one value for the mean, more units for the choices.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import test_end_to_end_audit as e2e

import beam_dp.beam.cdf
import beam_dp.beam.key_selection
import beam_dp.summaries.contribution_bounds
import beam_dp.summaries.quantiles.mean
import beam_dp.summaries.quantiles.parameters
import beam_dp.summaries.selection
from beam_dp.batching import ContributionBounds
from beam_dp.beam.cdf import PrivateCDF
from beam_dp.beam.key_selection import KeySelection, SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates

EPSILON = 1.0
DELTA = 1e-3
HALF = Fraction(1, 2)
SITES = e2e.SITES
KEYS = e2e.KEYS
KEY_SHARES = {"de": 0.5, "fr": 0.3, "jp": 0.2}  # distinct sizes: each key's release told apart
FLOOD_ROWS = 12  # the adversary's rows per key in the flooding neighbour
CDF_POINTS, CDF_K = 11, 3  # C(13, 3) = 286 multisets: the KS law by enumeration
CAP = 8  # bound_cap of the auto choices: candidates 1, 2, 4, 8 (the forced choice is 4)

# --------------------------------------------------------------------------- neighbours


def background(
    units: int = 51, value: float | None = None, shares: dict[str, float] = KEY_SHARES
) -> list[dict[str, Any]]:
    """One row per unit (within every bound), in one key. Values evenly spread over the
    range (the median falls inside the middle cell of coarse-to-fine's coarse grid), or all
    at ``value``; the adversary's candidates ("s3", party "C") rare and the ones it leaves
    under ``replace`` ("s0", party "B") the most common; willingness to pay mostly below
    every price."""
    rows: list[dict[str, Any]] = []
    site_cycle = ["s0", "s1", "s0", "s2", "s0", "s1", "s4", "s0", "s2", "s3"]
    vote_cycle = ["B", "A", "B", "B", "A", "B", "C", "A", "B", "A"]
    price_cycle = [0.25, 0.75, 0.25, 1.25, 0.75, 0.25, 2.75, 0.75]
    first = 0
    for key, share in shares.items():
        size = round(units * share)
        for i in range(first, first + size):
            spread = 7.5 + 90.0 * ((7 * i) % units) / (units - 1)
            rows.append(
                {
                    "user": 1000 + i,
                    "site": site_cycle[i % len(site_cycle)],
                    "label": site_cycle[i % len(site_cycle)],
                    "vote": vote_cycle[i % len(vote_cycle)],
                    "price": price_cycle[i % len(price_cycle)],
                    "value": spread if value is None else value,
                    "country": key,
                }
            )
        first += size
    return rows


def adversary(rows: int, keys: tuple[str, ...], flood: bool) -> list[dict[str, Any]]:
    """The adversary's rows: low values, the rare site and party, a price above every price
    and four labels (``flood``), or high values, the common site and party and a price below
    every price."""
    out = []
    for key in keys:
        for i in range(rows):
            out.append(
                {
                    "user": e2e.ADVERSARY if i % 2 else str(e2e.ADVERSARY),  # one person
                    "site": "s3" if flood else "s0",
                    "label": ("s3" if i % 3 else SITES[i % len(SITES)]) if flood else "s0",
                    "vote": "C" if flood else "B",
                    "price": 2.75 if flood else 0.25,
                    "value": e2e.LOWER if flood else e2e.UPPER,
                    "country": key,
                }
            )
    return out


@dataclasses.dataclass(frozen=True)
class Data:
    """The neighbours of one site: its background, and under ``replace`` the adversary's rows
    per key before the move and the keys it holds (the same in both: keys are public)."""

    background: tuple[dict[str, Any], ...] = tuple(background())
    quiet_rows: int = 2
    replace_keys: tuple[str, ...] = ("de",)
    keys: tuple[str, ...] = KEYS  # the public keys (every one of them flooded)

    def batches(self, relation: str, neighbour: str) -> list[pa.Table]:
        """Arrow batches of one neighbour ("d" or "d_prime"): the background in three
        batches, the adversary's integer-id rows in one batch and its text-id rows in
        another."""
        flood = neighbour == "d_prime"
        if relation == "add_remove":
            rows = adversary(FLOOD_ROWS, self.keys, flood=True) if flood else []
        else:
            count = FLOOD_ROWS if flood else self.quiet_rows
            rows = adversary(count, self.replace_keys, flood=flood)
        parts = [list(self.background[i::3]) for i in range(3)]
        parts.append([r for r in rows if isinstance(r["user"], int)])
        parts.append([r for r in rows if isinstance(r["user"], str)])
        return [pa.Table.from_pylist(part) for part in parts if part]

    def kept(self, bound: int) -> int:
        """The public number of values kept under ``replace`` (the background's and the
        adversary's bounded rows), for the transforms that take it (mean, CDF)."""
        return len(self.background) + min(bound, self.quiet_rows * len(self.replace_keys))


UNIFORM = Data()
# The mean's add/remove utility -|sum(x) - N r| is tight only where the output distribution is
# concentrated: many units at one high grid point, the adversary at the low end.
CONCENTRATED = Data(tuple(background(300, 90.0)))
TWO_KEYS = Data(replace_keys=("de", "fr"))  # .PerKey under replace: two keys of m = 2 change
# Rows per unit under replace: the adversary holds one row (as every background unit) in D.
# 150 units: the choice's target rank (alpha n less its tail margin, 25 ranks at the choice's
# 0.5) nearer the end of bucket 1 than its start, where one unit moves two scores apart.
ONE_ROW = Data(tuple(background(150)), quiet_rows=1)
# (More units: each key's scores far from the others', so its release is told apart.)
ONE_ROW_TWO_KEYS = Data(tuple(background(150)), quiet_rows=1, replace_keys=("de", "fr"))
CONCENTRATED_ONE_ROW = Data(tuple(background(300, 90.0)), quiet_rows=1)
# Keys per unit: four public keys (candidates 1, 2 and 4: the adversary's four keys move two
# scores), and enough units at one key each that the choice's output law is concentrated.
FOUR_KEYS = {"de": 0.4, "fr": 0.3, "jp": 0.2, "us": 0.1}
MANY_UNITS_FOUR_KEYS = Data(
    tuple(background(204, shares=FOUR_KEYS)), replace_keys=("de", "fr"), keys=tuple(FOUR_KEYS)
)


# --------------------------------------------------------------------------- call sites


def _doubled(options: dict[str, Any]) -> dict[str, Any]:
    return {**options, "epsilon": 2 * options["epsilon"]}


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A call site calibrated at twice its epsilon, made by wrapping the sampler entry point
    ``attribute`` of ``module`` (the name the pipeline looks up) so that the calls for which
    ``applies(call)`` holds get ``change(options)`` instead of ``options``."""

    name: str
    module: Any
    attribute: str
    change: Callable[[dict[str, Any]], dict[str, Any]] = lambda options: _doubled(options)
    applies: Callable[[CallSite], bool] = lambda call: True
    relations: tuple[str, ...] = ("add_remove", "replace")


@dataclasses.dataclass(frozen=True)
class CallSite:
    """Where a mutant's wrapper was called from: the caller's modules (innermost first), and
    whether this call is the first of its release (the root of a recursive split)."""

    modules: tuple[str, ...]
    first: bool


@dataclasses.dataclass(frozen=True)
class Stage:
    """A part of a release's epsilon that its calls in ``which`` may spend (the rest of the
    release spends the rest)."""

    name: str
    part: Fraction
    which: Callable[[e2e.Call, int], bool]


@dataclasses.dataclass(frozen=True)
class Site:
    """One production call site (or a family of them), driven through a public transform."""

    name: str
    build: Callable[[str], Any]
    mutants: tuple[Mutant, ...]
    relations: tuple[str, ...] = ("add_remove", "replace")
    epsilon: float = EPSILON
    delta: float = 0.0
    stages: tuple[Stage, ...] = ()
    extra_names: tuple[str, ...] = ()  # other release names of the transform
    data: Data = UNIFORM


def _common(name: str, relation: str) -> dict[str, Any]:
    return {
        "name": name,
        "relation": relation,
        "salt": e2e.SALT,
        "on_bad_record": "skip",
        "unit_column": "user",
    }


def _values(name: str, relation: str, bound: int | str = 2) -> dict[str, Any]:
    return {
        **_common(name, relation),
        "lower": e2e.LOWER,
        "upper": e2e.UPPER,
        "num_points": e2e.NUM_POINTS,
        "value_column": "value",
        "max_contributions": bound,
        "epsilon": EPSILON,
    }


def _per_key(m: int | str, keys: tuple[str, ...] = KEYS) -> dict[str, Any]:
    return {"key_column": "country", "keys": list(keys), "max_keys_per_unit": m}


def _in(module: str) -> Callable[[CallSite], bool]:
    return lambda call: module in call.modules


def _not_in(module: str) -> Callable[[CallSite], bool]:
    return lambda call: module not in call.modules


SELECTION = beam_dp.summaries.selection
QUANTILES = beam_dp.summaries.quantiles.parameters
CHOICE = beam_dp.summaries.contribution_bounds
KEY_SELECTION = beam_dp.beam.key_selection
CDF = beam_dp.beam.cdf
MEAN = beam_dp.summaries.quantiles.mean
COARSE = "beam_dp.summaries.quantiles.coarse_to_fine"
INTERVALS = "beam_dp.summaries.quantiles.intervals"


def _doubled_select(site: str) -> tuple[Mutant, ...]:
    return (Mutant(f"{site}: select at 2ε", SELECTION, "select"),)


def _doubled_point(site: str) -> tuple[Mutant, ...]:
    return (Mutant(f"{site}: quantile point at 2ε", QUANTILES, "select"),)


def _is_choice(call: e2e.Call, index: int) -> bool:
    return CHOICE.__name__ in call.modules


def _not_choice(call: e2e.Call, index: int) -> bool:
    return not _is_choice(call, index)


def _choice_stages() -> tuple[Stage, ...]:
    return (Stage("bound choice", HALF, _is_choice), Stage("statistic", HALF, _not_choice))


def _count_at_2x(options: dict[str, Any]) -> dict[str, Any]:
    """The CDF's count at twice its part, the KS sample at its own: ε' = ε (1 + s) and
    s' = 2 s / (1 + s) give the count 2 s ε and the sample (1 - s) ε."""
    epsilon, share = Fraction(options["epsilon"]), Fraction(options["count_share"])
    return {**options, "epsilon": epsilon * (1 + share), "count_share": 2 * share / (1 + share)}


def _sample_at_2x(options: dict[str, Any]) -> dict[str, Any]:
    """The CDF's KS sample at twice its part, the count at its own: ε' = ε (2 - s) and
    s' = s / (2 - s) give the count s ε and the sample 2 (1 - s) ε."""
    epsilon, share = Fraction(options["epsilon"]), options.get("count_share")
    if share is None:  # the normaliser is public: the whole epsilon is the sample's
        return {**options, "epsilon": 2 * epsilon}
    share = Fraction(share)
    return {**options, "epsilon": epsilon * (2 - share), "count_share": share / (2 - share)}


def _mean_sum_at_2x(options: dict[str, Any]) -> dict[str, Any]:
    """The mean's noisy sum at twice its part, the count at its own (as the CDF's count)."""
    if Fraction(options["sum_share"]) == 1:  # no count released: the whole epsilon is the sum's
        return _doubled(options)
    epsilon, share = Fraction(options["epsilon"]), Fraction(options["sum_share"])
    return {**options, "epsilon": epsilon * (1 + share), "sum_share": 2 * share / (1 + share)}


def _mean_count_at_2x(options: dict[str, Any]) -> dict[str, Any]:
    """The mean's noisy count at twice its part, the sum at its own."""
    epsilon, share = Fraction(options["epsilon"]), Fraction(options["sum_share"])
    return {**options, "epsilon": epsilon * (2 - share), "sum_share": share / (2 - share)}


def _mean_mutants(site: str) -> tuple[Mutant, ...]:
    return (
        Mutant(f"{site}: noisy sum at 2ε", MEAN, "noisy_sum_and_count", change=_mean_sum_at_2x),
        Mutant(
            f"{site}: noisy count at 2ε",
            MEAN,
            "noisy_sum_and_count",
            change=_mean_count_at_2x,
            relations=("add_remove",),  # under replace the count is public: none is drawn
        ),
    )


def _sites() -> list[Site]:
    return [
        Site(
            "select_top",
            lambda r: TopCandidates.Globally(
                candidate_column="site",
                candidates=list(SITES),
                epsilon=EPSILON,
                **_common("select_top", r),
            ),
            _doubled_select("select_top"),
        ),
        Site(
            "select_price",
            lambda r: BestPrice.Globally(
                value_column="price",
                prices=list(e2e.PRICES),
                epsilon=EPSILON,
                **_common("select_price", r),
            ),
            _doubled_select("select_price"),
        ),
        Site(
            "select_vote",
            lambda r: Election.Globally(
                candidate_column="vote",
                candidates=list(e2e.PARTIES),
                epsilon=EPSILON,
                **_common("select_vote", r),
            ),
            _doubled_select("select_vote"),
        ),
        Site(
            "select_margin",
            lambda r: Election.Globally(
                candidate_column="vote",
                candidates=["B", "C"],
                score="margin",
                epsilon=EPSILON,
                method="exponential",
                **_common("select_margin", r),
            ),
            _doubled_select("select_margin"),
        ),
        Site(
            "select_custom",
            lambda r: ExponentialSelect.Globally(
                e2e.RowsPerCandidate(),
                candidates=list(SITES),
                candidate_column="site",
                epsilon=EPSILON,
                sensitivity=2,
                monotone=r == "add_remove",
                bounds=ContributionBounds(max_contributions_per_unit=2),
                **_common("select_custom", r),
            ),
            _doubled_select("select_custom"),
        ),
        Site(
            "top_k_rounds",
            lambda r: TopCandidates.Globally(
                candidate_column="site",
                candidates=list(SITES),
                epsilon=EPSILON,
                k=2,
                max_candidates_per_unit=2,
                **_common("top_k_rounds", r),
            ),
            (Mutant("top-k rounds at 2ε", SELECTION, "top_k"),),
        ),
        Site(
            "per_key_draw",
            lambda r: Election.PerKey(
                candidate_column="vote",
                candidates=list(e2e.PARTIES),
                epsilon=EPSILON,
                **_per_key(2),
                **_common("per_key_draw", r),
            ),
            (Mutant("per-key batched draws at 2ε", SELECTION, "select_per_key"),),
            data=TWO_KEYS,
        ),
        Site(
            "key_selection",
            lambda r: TopCandidates.Globally(
                candidate_column="label",
                candidates=None,
                epsilon=EPSILON,
                k=2,
                key_selection=KeySelection(
                    EPSILON, DELTA, max_candidates_per_unit=2, name="key_selection_labels"
                ),
                **_common("key_selection", r),
            ),
            (
                Mutant("key selection (threshold, noise) at 2ε", KEY_SELECTION, "select_keys"),
                Mutant("top-k after key selection at 2ε", SELECTION, "top_k"),
            ),
            relations=("add_remove",),  # key selection is defined for add_remove only
            epsilon=2 * EPSILON,
            delta=DELTA,
            stages=(
                Stage("key selection", HALF, lambda call, i: call.kind == "select_keys"),
                Stage("top-k", HALF, lambda call, i: call.kind != "select_keys"),
            ),
            extra_names=("key_selection_labels",),
        ),
        Site(
            "quantile_interval",  # the median and its interval: 2/3 and 1/3 of ε (default share)
            lambda r: PrivateMedian.Globally(**_values("quantile_interval", r)),
            (
                # Values spread out: the median's loss comes close to its part (the ends'
                # stays far under theirs even doubled; the next site audits them).
                Mutant(
                    "median beside its interval at 2ε",
                    QUANTILES,
                    "select",
                    applies=_not_in(INTERVALS),
                ),
            ),
            stages=(
                Stage("median", Fraction(2, 3), lambda call, i: INTERVALS not in call.modules),
                Stage("interval", Fraction(1, 3), lambda call, i: INTERVALS in call.modules),
            ),
        ),
        Site(
            "quantile_interval_ends",  # the same release on values at one point
            lambda r: PrivateMedian.Globally(**_values("quantile_interval_ends", r)),
            (
                # Every background value at 90: the ends' laws are concentrated, so their
                # loss comes close to their part and doubled passes it.
                Mutant("interval ends at 2ε", QUANTILES, "select", applies=_in(INTERVALS)),
            ),
            stages=(
                Stage("median", Fraction(2, 3), lambda call, i: INTERVALS not in call.modules),
                Stage("interval", Fraction(1, 3), lambda call, i: INTERVALS in call.modules),
            ),
            data=CONCENTRATED,
        ),
        Site(
            "quantile_point",
            lambda r: PrivateMedian.Globally(interval=False, **_values("quantile_point", r)),
            _doubled_point("quantile_point"),
        ),
        Site(
            "recursive_levels",
            lambda r: PrivateQuantiles.Globally(
                [0.25, 0.5, 0.75],
                split="recursive",
                interval=False,
                **_values("recursive_levels", r),
            ),
            (
                Mutant("recursive split: every level at 2ε", QUANTILES, "select"),
                Mutant(
                    "recursive split: the levels below the root at 2ε",
                    QUANTILES,
                    "select",
                    applies=lambda call: not call.first,
                ),
            ),
            stages=(  # D = 2 levels of ε / 2 (the root; its two branches in parallel)
                Stage("root", HALF, lambda call, i: i == 0),
                Stage("second level", HALF, lambda call, i: i > 0),
            ),
        ),
        Site(
            "independent_quantiles",
            lambda r: PrivateQuantiles.Globally(
                [0.2, 0.4],
                split="independent",
                interval=False,
                **_values("independent_quantiles", r),
            ),
            (Mutant("independent quantiles at 2ε", QUANTILES, "select"),),
        ),
        Site(
            "coarse_to_fine",
            lambda r: PrivateMedian.Globally(
                refine=True,
                refine_points=9,
                refine_fraction=0.5,
                interval=False,
                **_values("coarse_to_fine", r),
            ),
            (
                Mutant("coarse pass at 2ε", QUANTILES, "select", applies=_in(COARSE)),
                Mutant("fine pass at 2ε", QUANTILES, "select", applies=_not_in(COARSE)),
            ),
            stages=(
                Stage("coarse pass", HALF, lambda call, i: COARSE in call.modules),
                Stage("fine pass", HALF, lambda call, i: COARSE not in call.modules),
            ),
        ),
        Site(
            "coarse_to_fine_quantiles",  # m quantiles: m coarse cells at ε_coarse / m each
            lambda r: PrivateQuantiles.Globally(
                [0.48, 0.52],  # both inside the forced coarse cell: the fine pass sees them
                split="independent",
                refine=True,
                refine_points=9,
                refine_fraction=0.5,
                interval=False,
                **_values("coarse_to_fine_quantiles", r),
            ),
            (
                Mutant("coarse pass (m cells) at 2ε", QUANTILES, "select", applies=_in(COARSE)),
                Mutant("fine pass (m points) at 2ε", QUANTILES, "select", applies=_not_in(COARSE)),
            ),
            stages=(
                Stage("coarse pass", HALF, lambda call, i: COARSE in call.modules),
                Stage("fine pass", HALF, lambda call, i: COARSE not in call.modules),
            ),
        ),
        Site(
            "mean",  # noisy sums: the sum and the count at half of epsilon each
            lambda r: PrivateMean.Globally(
                **_values("mean", r),
                **({"n": UNIFORM.kept(2)} if r == "replace" else {"sum_share": 0.5}),
            ),
            _mean_mutants("mean"),  # the loss is exactly epsilon: either part doubled passes it
        ),
        Site(
            "mean_selection",
            lambda r: PrivateMean.Globally(
                estimator="selection",
                **_values("mean_selection", r),
                **({"n": CONCENTRATED.kept(2)} if r == "replace" else {}),
            ),
            (Mutant("mean (selection) at 2ε", QUANTILES, "select"),),
            data=CONCENTRATED,
        ),
        Site(
            "auto_rows",
            lambda r: PrivateQuantiles.Globally(
                [0.1],
                bound_share=0.5,
                bound_cap=CAP,
                interval=False,
                **_values("auto_rows", r, "auto"),
            ),
            (
                Mutant("rows-per-unit choice at 2ε", CHOICE, "select"),
                Mutant("quantile at the chosen bound at 2ε", QUANTILES, "select"),
            ),
            stages=_choice_stages(),
            data=ONE_ROW,
        ),
        Site(
            "auto_rows_mean",
            lambda r: PrivateMean.Globally(
                bound_share=0.5,
                bound_cap=CAP,
                **_values("auto_rows_mean", r, "auto"),
                **({"n": CONCENTRATED_ONE_ROW.kept(4)} if r == "replace" else {}),
            ),
            (
                Mutant("rows-per-unit choice (mean) at 2ε", CHOICE, "select"),
                Mutant(
                    "mean at the chosen bound at 2ε",
                    MEAN,
                    "noisy_sum_and_count",
                    change=_mean_sum_at_2x,
                ),
            ),
            stages=_choice_stages(),
            data=CONCENTRATED_ONE_ROW,
        ),
        Site(
            "auto_rows_per_key",  # one choice over (unit, key) counts: m per unit
            lambda r: PrivateQuantiles.PerKey(
                [0.1],
                bound_share=0.5,
                bound_cap=CAP,
                **_per_key(2),
                interval=False,
                **_values("auto_rows_per_key", r, "auto"),
            ),
            (
                Mutant("rows-per-(unit, key) choice at 2ε", CHOICE, "select"),
                Mutant("per-key quantile at the chosen bound at 2ε", QUANTILES, "select"),
            ),
            stages=_choice_stages(),
            data=ONE_ROW_TWO_KEYS,
        ),
        Site(
            "auto_keys",
            lambda r: PrivateMedian.PerKey(
                bound_share=0.5,
                **_per_key("auto", MANY_UNITS_FOUR_KEYS.keys),
                interval=False,
                **_values("auto_keys", r),
            ),
            (
                # Under replace the keys a unit holds are public: the choice cannot move.
                Mutant("keys-per-unit choice at 2ε", CHOICE, "select", relations=("add_remove",)),
                Mutant("per-key quantile at the chosen keys at 2ε", QUANTILES, "select"),
            ),
            stages=_choice_stages(),
            data=MANY_UNITS_FOUR_KEYS,
        ),
        Site(
            "auto_labels",
            lambda r: SelectCandidates.Globally(
                candidate_column="label",
                unit_column="user",
                epsilon=EPSILON,
                delta=DELTA,
                max_candidates_per_unit="auto",
                bound_share=0.5,
                bound_cap=CAP,
                name="auto_labels",
                salt=e2e.SALT,
                on_bad_record="skip",
            ),
            (
                Mutant("labels-per-unit choice at 2ε", CHOICE, "select"),
                Mutant("key selection at the chosen bound at 2ε", KEY_SELECTION, "select_keys"),
            ),
            relations=("add_remove",),
            delta=DELTA,
            stages=_choice_stages(),
        ),
        Site(
            "cdf_count",
            lambda r: PrivateCDF.Globally(
                value_column="value",
                lower=e2e.LOWER,
                upper=e2e.UPPER,
                num_points=CDF_POINTS,
                k=CDF_K,
                count_share=0.5,
                max_contributions=2,
                epsilon=EPSILON,
                **_common("cdf_count", r),
            ),
            (
                Mutant("CDF count at 2ε", CDF, "release_ks_cdf", change=_count_at_2x),
                Mutant("CDF sample at 2ε", CDF, "release_ks_cdf", change=_sample_at_2x),
            ),
            relations=("add_remove",),  # a released count: add_remove without n
        ),
        Site(
            "cdf_public_n",
            lambda r: PrivateCDF.Globally(
                value_column="value",
                lower=e2e.LOWER,
                upper=e2e.UPPER,
                num_points=CDF_POINTS,
                k=CDF_K,
                n=UNIFORM.kept(2),
                max_contributions=2,
                epsilon=EPSILON,
                **_common("cdf_public_n", r),
            ),
            (Mutant("CDF sample at 2ε", CDF, "release_ks_cdf", change=_sample_at_2x),),
        ),
    ]


SITES_UNDER_AUDIT = _sites()

# --------------------------------------------------------------------------- running


def _mutate(monkeypatch: pytest.MonkeyPatch, mutant: Mutant) -> list[int]:
    """Install ``mutant`` over the (recording) entry point; returns a one-item hit counter."""
    current = getattr(mutant.module, mutant.attribute)  # raises if the name is gone
    hits = [0]

    def mutated(*args: Any, **options: Any) -> Any:
        context = e2e._context()
        recorder = e2e._RECORDER
        first = recorder is None or context.extract is not recorder._frame
        if mutant.applies(CallSite(context.modules, first)):
            if "epsilon" not in options:
                raise AssertionError(f"{mutant.name}: the call site passes no 'epsilon' keyword")
            options = mutant.change(options)
            hits[0] += 1
        return current(*args, **options)

    monkeypatch.setattr(mutant.module, mutant.attribute, mutated)
    return hits


def _run(site: Site, relation: str) -> tuple[e2e.Run, e2e.Run]:
    """Both neighbours' runs of ``site`` (the recorders must be installed)."""
    case = e2e.Case(site.name, site.build)
    return (
        e2e.run_cases([case], relation, None, None, memory=site.data.batches(relation, "d")),
        e2e.run_cases([case], relation, None, None, memory=site.data.batches(relation, "d_prime")),
    )


def _groups(run: e2e.Run, site: Site) -> list[e2e.Group]:
    if site.name in run.errors:
        raise AssertionError(f"{site.name}: {run.errors[site.name]}")
    names = (site.name, *site.extra_names)
    assert all(run.releases.get(n) for n in names), f"{site.name}: no release"
    return [group for name in names for group in run.groups.get(name, [])]


def _stage(groups: list[e2e.Group], stage: Stage) -> list[e2e.Group]:
    out = []
    for group in groups:
        calls = [c for i, c in enumerate(group.calls) if stage.which(c, i)]
        if calls:
            out.append(e2e.Group(group.transform, calls))
    return out


def audit_site(site: Site, runs: tuple[e2e.Run, e2e.Run]) -> e2e.AuditResult:
    """The audit of one site: the whole release within its (ε, δ), each stage within its
    part; raises AssertionError otherwise."""
    groups_d, groups_dp = (_groups(run, site) for run in runs)
    assert groups_d, f"{site.name}: no sampler call was captured"
    result = e2e.audit(groups_d, groups_dp, epsilon=site.epsilon, delta=site.delta)
    for stage in site.stages:
        part = float(stage.part * Fraction(site.epsilon))
        try:
            e2e.audit(_stage(groups_d, stage), _stage(groups_dp, stage), epsilon=part, delta=1)
        except AssertionError as error:
            raise AssertionError(f"{site.name}, {stage.name} (ε part {part:g}): {error}") from None
    return result


@pytest.fixture
def recorders(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    e2e.install_recorders(monkeypatch)
    yield monkeypatch


@pytest.mark.slow
@pytest.mark.parametrize(
    ("site", "relation"),
    [
        pytest.param(site, relation, id=f"{site.name}-{relation}")
        for site in SITES_UNDER_AUDIT
        for relation in site.relations
    ],
)
def test_the_call_site_spends_at_most_its_epsilon_and_fails_at_twice_it(
    recorders: pytest.MonkeyPatch, site: Site, relation: str
) -> None:
    result = audit_site(site, _run(site, relation))
    assert result.changed_releases >= 1, "the adversary did not reach the release"
    # The same test with the call site calibrated at 2ε must fail.
    for mutant in site.mutants:
        if relation not in mutant.relations:
            continue
        with pytest.MonkeyPatch.context() as patch:
            hits = _mutate(patch, mutant)
            runs = _run(site, relation)
        assert hits[0], f"{mutant.name}: never reached its call site; update the harness"
        try:
            audit_site(site, runs)
        except AssertionError as error:
            assert "privacy loss" in str(error), error  # caught by the audit, not elsewhere
        else:
            pytest.fail(f"{mutant.name}: the audit passed a call site calibrated at 2ε")


#: The sampler entry points a pipeline module may look up, by the name it looks them up by.
SAMPLER_ENTRIES = {
    "select": e2e._ORIGINAL_SELECT,
    "top_k": e2e._ORIGINAL_TOP_K,
    "select_per_key": e2e._ORIGINAL_SELECT_PER_KEY,
    "select_keys": e2e._ORIGINAL_SELECT_KEYS,
    "release_ks_cdf": e2e._ORIGINAL_RELEASE_KS_CDF,
    "noisy_sum_and_count": e2e._ORIGINAL_NOISY_SUM_AND_COUNT,
}

#: The modules that define (or re-export) the samplers: not call sites.
DEFINING_MODULES = frozenset(
    {
        "beam_dp.mechanisms",
        "beam_dp.mechanisms.selection",
        "beam_dp.mechanisms.per_key",
        "beam_dp.mechanisms.partition_selection",
        "beam_dp.mechanisms.cdf",
        "beam_dp.mechanisms.cdf.release",
        "beam_dp.mechanisms.noise",
    }
)


def sampler_call_sites(
    entries: dict[str, Any] = SAMPLER_ENTRIES, defining: frozenset[str] = DEFINING_MODULES
) -> set[tuple[str, str]]:
    """Every ``(module, attribute)`` of a loaded beam_dp module that looks up a sampler entry
    point (holds the original function under that name): the production call sites."""
    found = set()
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("beam_dp."):
            continue
        if module_name in defining:
            continue
        for attribute, original in entries.items():
            if vars(module).get(attribute) is original:
                found.add((module_name, attribute))
    return found


def test_the_call_sites_cover_every_sampler_entry_the_pipelines_look_up() -> None:
    # A new module looking up a sampler entry point is a new call site: audit it here.
    looked_up = {
        (mutant.module.__name__, mutant.attribute)
        for site in SITES_UNDER_AUDIT
        for mutant in site.mutants
    }
    found = sampler_call_sites()
    assert found - looked_up == set(), "sampler entry points looked up but not audited"
    assert looked_up <= found, "a mutant wraps a name no pipeline module looks up"
