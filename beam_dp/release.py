"""The release record: what a job publishes for one statistic.

A :class:`Release` is the released value plus the :class:`~beam_dp.accounting.LedgerEntry`
that says what it cost and how accurate it is. ``to_dict()`` is the JSON object written to
``release.json``; ``release_document`` wraps several releases and the budget. Pure Python.

Accuracy a person can state
---------------------------
The ledger's ``accuracy`` holds the utility guarantee in the *score's* units
(``score_loss``; ``rank_error`` and ``cell_width`` for quantiles). A release also carries an
:class:`AccuracyStatement`: the same guarantee turned into the statistic's own units wherever
public parameters allow it, with the unit of every bound and one plain sentence. ``to_dict()``
writes its bounds into ``accuracy`` next to the ledger's (all numbers), the unit of each bound
in ``accuracy_units`` (same keys, strings) and the sentence in ``accuracy_description``:

==================  ==========================================================================
key                 what it bounds, with probability >= ``confidence``
==================  ==========================================================================
value_error         mean, ``replace`` (public n): ``|released - mean|``, in value units
sum_error           mean, ``add_remove``: ``|released - mean| <= sum_error / N + grid_error``
                    (``N`` rows kept after bounding, not released), in value units x rows
grid_error          mean: the farthest any value in ``[lower, upper]`` is from a grid point
rank_error_beyond_  quantiles: the distance from ``alpha N`` to the rank range
best_grid_point     ``[#(x < out), #(x <= out)]`` beyond the best grid point's (what the grid
                    allows); for the recursive and joint splits, together with
                    ``rank_error_share_of_n`` (see :func:`quantile_statement`)
rank_error_share_  quantiles, recursive and joint splits: the tie cuts' part of the bound, as
of_n               a share of ``N``: the distance is at most ``rank_error_beyond_best_grid_
                   point + rank_error_share_of_n * N``
count_below_kth_    top-k counts: how many fewer units (records at record level) than the true
best                k-th most frequent candidate any released candidate can have
vote_shortfall      election: how many fewer votes than the true winner (k-th) the released one
                    can have
revenue_loss        best price: revenue (price x buyers, in the prices' currency, summed over
                    the privacy units) the released price can lose against the best grid price
ks_distance         CDF: ``max_x |F_released(x) - F_data(x)|`` (a cumulative fraction), with
                    ``F_data`` the empirical CDF of the values kept after bounding, snapped to
                    the public grid (see :func:`cdf_statement`)
==================  ==========================================================================

Quantile intervals
------------------
Every quantile release (quantiles, median, min, max, and the quantiles read from a CDF) also
carries a :class:`ReleaseInterval`: for each quantile ``[lower, upper]`` in the column's units
that holds the data's own alpha-quantile (of the values kept after bounding) with probability
at least ``confidence`` over the mechanism's randomness, all quantiles at once. ``to_dict()``
writes it as ``interval`` (``lower`` and ``upper`` shaped as ``value``: one number for one
quantile, a list for several), with the epsilon (and rho) it took out of the release's: the
release's own ``epsilon`` stays the total it spent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any

from beam_dp.accounting import LedgerEntry
from beam_dp.mechanisms import score_loss_bound

__all__ = [
    "AccuracyStatement",
    "Release",
    "ReleaseInterval",
    "bound_notes",
    "cdf_statement",
    "ledger_entries_to_record",
    "make_release",
    "mean_statement",
    "quantile_statement",
    "release_document",
    "selection_statement",
]


def _jsonable(value: Any) -> Any:
    """Numpy scalars and tuples to plain JSON types."""
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _stated(bound: float) -> str:
    """A bound for a sentence: rounded *up* to 3 significant digits, never in e-notation."""
    number = float(bound)
    if number == 0.0 or not math.isfinite(number):
        return f"{number:g}"
    rounded = Context(prec=3, rounding=ROUND_CEILING).plus(Decimal(repr(number)))
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _stated_share(share: float) -> str:
    """A share of N for a sentence: rounded *up* to 2 significant digits (``0.00039``)."""
    number = float(share)
    if number == 0.0 or not math.isfinite(number):
        return f"{number:g}"
    rounded = Context(prec=2, rounding=ROUND_CEILING).plus(Decimal(repr(number)))
    return format(rounded, "f")


def _check_bounds(bounds: Mapping[str, float]) -> dict[str, float]:
    checked: dict[str, float] = {}
    for key, bound in bounds.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"accuracy bound names must be non-empty strings; received {key!r}")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise TypeError(f"accuracy bound {key!r} must be a number")
        if not math.isfinite(bound) or bound < 0:
            raise ValueError(f"accuracy bound {key!r} must be finite and >= 0")
        checked[key] = float(bound)
    return checked


@dataclass(frozen=True)
class AccuracyStatement:
    """A release's accuracy in the statistic's own units, and in plain words.

    Attributes:
        bounds: numeric bounds (>= 0) that hold with the release's ``confidence``, by name
            (``value_error``, ``rank_error_beyond_best_grid_point``, ...; see the module
            docstring). Written next to the ledger's ``accuracy`` by :meth:`Release.to_dict`.
        units: the unit of each bound (and of the ledger's bounds), by the same names.
        description: one sentence a person can read out, naming what each bound is of.

    Privacy:
        Built from public parameters only (ε, sensitivity, grid, confidence, public ``n``);
        never from data.
    """

    bounds: Mapping[str, float] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", _check_bounds(self.bounds))
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.units.items()):
            raise TypeError("'units' must map bound names to strings")
        object.__setattr__(self, "units", dict(self.units))
        if not isinstance(self.description, str):
            raise TypeError("'description' must be a string")


def _unit_word(record_level: bool) -> str:
    return "records" if record_level else "distinct privacy units"


def _ordinal(k: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th`` ... ``11th``, ``12th``, ``13th``, ``21st``."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _one_bound(
    key: str, bound: float, unit: str, description: str, score_unit: str | None = None
) -> AccuracyStatement:
    """One bound ``key`` in ``unit`` (the score loss in ``score_unit``, default the same)."""
    return AccuracyStatement(
        bounds={key: bound},
        units={key: unit, "score_loss": unit if score_unit is None else score_unit},
        description=description,
    )


def selection_statement(
    kind: str,
    *,
    score_loss: float,
    k: int,
    confidence: float,
    record_level: bool = False,
) -> AccuracyStatement:
    """The accuracy of a selection (top-k by peeling when ``k > 1``) in its score's units.

    ``score_loss`` is the per-round bound of :func:`make_release` (each of the ``k`` rounds at
    ``epsilon / k`` and failure ``(1 - confidence) / k``, a union bound). Peeling keeps at least
    ``k - i + 1`` of the true top ``k`` among the candidates left at round ``i``, so the best
    one left scores at least the true ``k``-th best: every released candidate's score is at
    least ``q_(k) - score_loss`` (``q_(1)``, the best, for ``k = 1``).

    Args:
        kind: ``"distinct_count"`` (:class:`~beam_dp.scores.DistinctUnitCount`),
            ``"votes"`` (:class:`~beam_dp.scores.PluralityVote`), ``"margin"``
            (:class:`~beam_dp.scores.VoteMargin`), ``"revenue"``
            (:class:`~beam_dp.scores.Revenue`) or ``"score"`` (any other: the score's units).
        score_loss: the per-round score-loss bound.
        k: the candidates released (rounds).
        confidence: the probability with which all the bounds hold together.
        record_level: whether each record is its own privacy unit.
    """
    loss = float(score_loss)
    level = f"With probability {confidence:g}"
    kth = "the best candidate" if k == 1 else f"the true {_ordinal(k)} best candidate"
    released = "the released candidate" if k == 1 else f"each of the {k} released candidates"
    if kind == "distinct_count":
        who = _unit_word(record_level)
        shortfall = (
            "the most frequent candidate" if k == 1 else f"the true {_ordinal(k)} most frequent"
        )
        return _one_bound(
            "count_below_kth_best",
            loss,
            who,
            f"{level}, {released} was contributed by at most {_stated(loss)} fewer {who} "
            f"than {shortfall} candidate.",
        )
    if kind in ("votes", "margin"):
        # A margin score counts each vote twice: q(w) - q(r) = 2 (votes(w) - votes(r)).
        votes = loss if kind == "votes" else loss / 2.0
        winner = "the true winner" if k == 1 else f"the true {_ordinal(k)} placed candidate"
        tail = (
            f"; a loser is released only when the true margin is at most {_stated(votes)} votes"
            if kind == "margin"
            else ""
        )
        return _one_bound(
            "vote_shortfall",
            votes,
            "votes",
            f"{level}, {released} has at most {_stated(votes)} fewer votes than {winner}{tail}.",
            score_unit="votes (the score's units)",
        )
    if kind == "revenue":
        units = "currency (the prices' units), summed over the privacy units"
        best = (
            "the best price on the grid" if k == 1 else f"the {_ordinal(k)} best price on the grid"
        )
        return _one_bound(
            "revenue_loss",
            loss,
            units,
            f"{level}, {released.replace('candidate', 'price')} earns at most "
            f"{_stated(loss)} less revenue (price x privacy units willing to pay it, in the "
            f"prices' currency) than {best}.",
        )
    return AccuracyStatement(
        units={"score_loss": "the score's units"},
        description=(
            f"{level}, {released} scores at most {_stated(loss)} below {kth} "
            "(in the score's units)."
        ),
    )


def _quantile_name(alpha: float) -> str:
    names = {0.5: "median (0.5-quantile)", 0.25: "lower quartile", 0.75: "upper quartile"}
    return names.get(alpha, f"{alpha:g}-quantile")


def quantile_statement(
    quantiles: Sequence[float],
    *,
    rank_error: float,
    confidence: float,
    several_rounds: bool,
    two_pass: bool = False,
    pairs: bool = False,
    rank_error_share: float = 0.0,
) -> AccuracyStatement:
    """The accuracy of a quantile release, named for what it bounds.

    What a quantile is with ties: for the ``N`` values kept after bounding, a value ``v`` is
    an ``alpha``-quantile when ``#(x < v) <= alpha N <= #(x <= v)``; a block of ``E`` tied
    values occupies the ranks ``[#(x < v), #(x < v) + E]``, the value's *rank range*.

    One selection per quantile (``several_rounds`` False: one quantile, or independent
    selections): the utility of grid point ``v`` is minus ``dist(v)``, the distance from
    ``alpha N`` to ``v``'s rank range (:class:`~beam_dp.scores.QuantileScore`; 0 when a block
    of values tied at ``v`` holds the quantile), and its guarantee is, with probability
    ``1 - beta``::

        dist(out) <= dist(best) + rank_error,

    ``best`` the grid point minimising it. What it does *not* give is ``dist(out) <=
    rank_error``: when the quantile falls strictly between two grid points, ``dist(best)`` is
    up to half the values strictly inside that grid cell: data-dependent, never released
    (nothing when the values are grid points). Hence the key's name,
    ``rank_error_beyond_best_grid_point``. (The tie-blind utility was ``-|rank(v) -
    alpha N|`` with ``rank(v) = #(x < v) + alpha #(x = v)``: a grid point inside a tie block
    holding the quantile scored no better than the empty points beside it.)

    The recursive and joint splits (``several_rounds``; :mod:`beam_dp.summaries.quantiles`)
    bound the distance from ``alpha N`` to the released value's rank range itself: at most
    ``rank_error + rank_error_share * N`` beyond what the grid allows. The second term is the
    tie cuts': a selection with later selections below it shares a block of tied values between
    its two sides at one of ``Q + 1`` evenly spaced places (``Q`` from the grid size:
    :func:`~beam_dp.summaries.quantiles.planning.tie_parts`, 1 024 on a 101-point grid), which
    can add ``1 / (2Q)`` of that block (at most ``N / (2Q)``), weighted down the tree as the
    ``l`` terms are (``QuantilePlan.rank_error_shares``). The grid allows nothing more when the
    values are grid points (integers on a grid at resolution 1); values strictly between grid
    points add the best grid point's own distance. The bound includes the errors of the earlier
    selections that bound the quantile's branch. With ``pairs`` (the joint split chose some
    quantiles two at a time) the best pair's two distances can add up: the sentence says so.
    """
    loss = float(rank_error)
    level = f"With probability {confidence:g}"
    alphas = [float(q) for q in quantiles]
    passes = " (both passes of the coarse-to-fine grid together)" if two_pass else ""
    rows = "values kept after bounding"
    units = {
        "rank_error_beyond_best_grid_point": f"ranks among the N {rows} (N not released)",
        "rank_error": f"ranks among the N {rows}, beyond the best grid point",
        "score_loss": f"ranks among the N {rows} (one selection)",
        "cell_width": "value units",
        "fine_rank_error": f"ranks among the N {rows}, second pass alone",
        "rank_error_share_of_n": f"ranks per value: times the N {rows} (N not released)",
    }
    if len(alphas) == 1:
        name = _quantile_name(alphas[0])
        target = f"{alphas[0]:g}*N"
    else:
        listed = ", ".join(f"{a:g}" for a in alphas)
        target = "alpha*N"
    if several_rounds:
        what = (
            f"the released {name}'s rank range is"
            if len(alphas) == 1
            else f"each released alpha-quantile's (alpha in {listed}) rank range is"
        )
        together = (
            " For two quantiles selected together, the best pair's two distances can add up."
            if pairs and len(alphas) > 1
            else ""
        )
        tie_share = float(rank_error_share)
        if not (math.isfinite(tie_share) and tie_share >= 0):
            raise ValueError(f"'rank_error_share' must be finite and >= 0; received {tie_share!r}")
        amount = (
            f"{_stated(loss)} + {_stated_share(tie_share)} * N" if tie_share > 0 else _stated(loss)
        )
        ties = (
            f" The {_stated_share(tie_share)} * N term is for blocks of tied values: where a "
            "selection splits the values inside such a block it shares the block out at one "
            "of evenly spaced places, which can miss by a small part of that block."
            if tie_share > 0
            else ""
        )
        description = (
            f"{level}, {what} at most {amount} from {target}{passes}, beyond what the "
            f"grid allows; N is the number of {rows} and is not released. A value's rank range "
            "runs from the number of values below it to the number below or equal to it, so "
            f"a value shared by many tied values is exact when the quantile falls among them.{ties}"
            " The grid allows nothing more when the values are grid points; values between "
            "grid points add the best grid point's own distance (up to the values in the grid "
            "cell around the quantile). The bound includes the errors of the earlier "
            f"selections that bound each quantile's branch.{together}"
        )
        return AccuracyStatement(
            bounds={
                "rank_error_beyond_best_grid_point": loss,
                "rank_error_share_of_n": tie_share,
            },
            units=units,
            description=description,
        )
    if len(alphas) == 1:
        what = f"the released {name}'s rank range is"
    else:
        what = f"each released alpha-quantile's (alpha in {listed}) rank range is"
    return AccuracyStatement(
        bounds={"rank_error_beyond_best_grid_point": loss},
        units=units,
        description=(
            f"{level}, {what} at most {_stated(loss)} farther from {target} than the best grid "
            f"point's{passes}; N is the number of {rows} and is not released. A value's rank "
            "range runs from the number of values below it to the number below or equal to it, "
            "so a value shared by many tied values is exact when the quantile falls among "
            "them. The best grid point's own distance is nothing when the values are grid "
            "points; values between grid points add up to half the values strictly inside the "
            "grid cell around the quantile."
        ),
    )


def mean_statement(
    *,
    relation: str,
    score_loss: float,
    rounding_error: float,
    grid_error: float,
    confidence: float,
    n: int | None = None,
    count_error: int | None = None,
) -> AccuracyStatement:
    """The accuracy of a private mean in the values' own units.

    With noisy sums (``count_error`` given, ``add_remove``): ``score_loss + rounding_error``
    bounds the numerator's error ``|step (r + Z_s) - (mean - mid) Z_c|`` (value units x rows)
    and ``count_error`` the count's noise ``|Z_c|``, jointly with probability ``confidence``,
    so ``|out - mean| <= sum_error / (N - count_error)`` whenever ``N > count_error``
    (:mod:`beam_dp.summaries.quantiles.mean`); nothing is stated for ``N <= count_error``.
    Under ``replace`` the noisy sums are stated as the selection's ``value_error`` with
    ``grid_error`` 0.

    For the selection: the real loss of the released grid point is below ``score_loss +
    rounding_error`` (``rounding_error``: one step of the integer scores, ``sensitivity /
    resolution``), and the best grid point is at most ``grid_error`` (the farthest any point of
    ``[lower, upper]`` is from the grid) from the statistic.

    * ``replace`` (``n`` public): the score is ``-|T - r|`` in value units with ``T`` the
      mean when ``n`` values are kept, so ``|out - T| <= value_error = score_loss +
      rounding_error + grid_error``.
    * ``add_remove``: the score is ``-|sum(x) - N r|`` (value units x rows), so
      ``|out - mean| <= sum_error / N + grid_error`` with ``sum_error = score_loss +
      rounding_error`` and ``N`` the (private, unreleased) number of values kept.
    """
    level = f"With probability {confidence:g}"
    grid = float(grid_error)
    loss = float(score_loss) + float(rounding_error)
    units = {"grid_error": "value units", "cell_width": "value units"}
    if relation == "replace":
        if n is None:
            raise ValueError("'n' is required for the accuracy of a mean under 'replace'")
        value_error = loss + grid
        return AccuracyStatement(
            bounds={"value_error": value_error, "grid_error": grid},
            units={**units, "value_error": "value units", "score_loss": "value units"},
            description=(
                f"{level}, the released mean is within +/- {_stated(value_error)} (in the "
                f"values' units) of the mean of the n = {n} values kept after bounding (n is "
                "public under 'replace'; if fewer are kept, of mid + sum(x - mid) / n)."
            ),
        )
    if count_error is not None:
        return _noisy_sums_statement(level, loss, int(count_error))
    examples = ", ".join(
        f"+/- {_stated(loss / rows + grid)} for N = {rows:,}" for rows in (1_000, 100_000)
    )
    return AccuracyStatement(
        bounds={"sum_error": loss, "grid_error": grid},
        units={
            **units,
            "sum_error": "value units x rows (divide by N)",
            "score_loss": "value units x rows (divide by N)",
        },
        description=(
            f"{level}, the released mean is within +/- ({_stated(loss)} / N + {_stated(grid)}) "
            "of the mean of the N values kept after bounding, in the values' units ("
            f"{examples}); N itself is not released."
        ),
    )


def _noisy_sums_statement(level: str, sum_error: float, count_error: int) -> AccuracyStatement:
    """The add/remove noisy-sums mean's statement (see :func:`mean_statement`)."""
    examples = ", ".join(
        f"+/- {_stated(sum_error / (rows - count_error))} for N = {rows:,}"
        for rows in (1_000, 100_000)
        if rows > count_error
    )
    return AccuracyStatement(
        bounds={"sum_error": sum_error, "count_error": float(count_error)},
        units={
            "sum_error": "value units x rows (divide by N - count_error)",
            "count_error": "rows",
            "score_loss": "value units x rows (the sum's noise bound)",
            "step": "value units",
        },
        description=(
            f"{level}, the released mean is within +/- {_stated(sum_error)} / (N - "
            f"{count_error}) of the mean of the N values kept after bounding, in the values' "
            f"units, whenever N > {count_error} ({examples}); N itself is not released."
        ),
    )


def cdf_statement(
    *,
    ks_distance: float,
    confidence: float,
    k: int,
    num_points: int,
    count_error: int | None = None,
) -> AccuracyStatement:
    """The accuracy of a private CDF (KS synthetic sample) in cumulative fractions.

    ``ks_distance`` bounds, with probability ``>= confidence``, ``max_i |C_i / k - N_i / n|``
    over the public grid points, with ``N_i`` the values kept after bounding that are
    ``<= g_i`` once snapped up to the grid, and ``n`` their number (the public ``n``, or, with
    a released count ``n̂``, the true number: the count's error ``count_error`` is inside the
    bound). Both step CDFs jump only at grid points, so it is their KS distance on the real
    line. A quantile read from the released CDF (the smallest grid point with ``F >= alpha``)
    then has a data CDF value within the same distance of ``alpha``.

    Args:
        ks_distance: the bound (a cumulative fraction in ``[0, 1]``).
        confidence: the probability with which it holds.
        k: the number of synthetic points (the rounding floor is ``1 / (2k)``).
        num_points: the public grid's size.
        count_error: with a released count, the bound on ``|n̂ - n|`` (rows) included in
            ``ks_distance``; None when ``n`` was public.
    """
    distance = float(ks_distance)
    level = f"With probability {confidence:g}"
    units = {
        "ks_distance": "cumulative fraction (KS distance, at every point)",
        "rounding_error": "cumulative fraction (1 / (2k), included in ks_distance)",
    }
    normaliser, count = "the public n", ""
    if count_error is not None:
        units["count_error"] = "rows (|released count - N|, included in ks_distance)"
        normaliser = "N, the number of values kept"
        count = f" N was released within +/- {count_error} rows, which the bound accounts for."
    return AccuracyStatement(
        bounds={"ks_distance": distance},
        units=units,
        description=(
            f"{level}, the released CDF is within {_stated(distance)} of the data's CDF at every "
            f"point (the KS distance to the empirical CDF of the values kept after bounding, "
            f"snapped up to the public grid of {num_points:,} points, normalised by "
            f"{normaliser}); a quantile read from it has a data CDF value within "
            f"{_stated(distance)} of its alpha. The release is {k:,} synthetic points; its "
            f"resolution alone costs up to {_stated(1 / (2 * k))}.{count}"
        ),
    )


#: An interval wider than this share of the public range "spans most of it" (release.json's
#: interval ``note``, the terminal, the report).
WIDE_INTERVAL_SHARE = 0.5


@dataclass(frozen=True)
class ReleaseInterval:
    """The randomization intervals of a quantile release, in the column's units.

    Attributes:
        quantiles: the alphas, in the release's order.
        lower, upper: each quantile's interval ends (value units).
        confidence: every interval holds its data quantile, all at once, with at least this
            probability over the mechanism's randomness.
        method: how they were made (``"rank_bracket"``:
            :mod:`beam_dp.summaries.quantiles.intervals`; ``"ks_band"``: read from a released
            CDF and its KS bound, :mod:`beam_dp.beam.cdf`).
        epsilon: the epsilon the intervals took out of the release's (0 for post-processing).
        rho: under zCDP, the rho they took out of the release's; else None.
        share: the share of the release's budget they took (None for post-processing).
        scalar: whether the release's value is one number (then ``lower`` and ``upper`` are
            written as numbers, not lists).
        public_range: the release's public bounds ``(lower, upper)``, when known: each
            interval's width is then also written as a share of that range
            (``share_of_public_range``), and ``note`` says which intervals span most of it
            (more than :data:`WIDE_INTERVAL_SHARE`): such an interval says little more than
            the bounds did.

    Privacy:
        Released values (selections inside the release's budget, or post-processing of it).
    """

    quantiles: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    confidence: float
    method: str
    epsilon: float
    rho: float | None = None
    share: float | None = None
    scalar: bool = False
    public_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.public_range is not None:
            low, high = self.public_range
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError("'public_range' must be finite with lower < upper")
        if not len(self.quantiles) == len(self.lower) == len(self.upper) >= 1:
            raise ValueError("an interval needs one lower and one upper end per quantile")
        if self.scalar and len(self.quantiles) != 1:
            raise ValueError("a scalar interval has one quantile")
        for lo, hi in zip(self.lower, self.upper, strict=True):
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError("interval ends must be finite with lower <= upper")

    def to_dict(self) -> dict[str, Any]:
        """The ``interval`` object of ``release.json``."""

        def shaped(ends: tuple[float, ...]) -> float | list[float]:
            return float(ends[0]) if self.scalar else [float(x) for x in ends]

        out: dict[str, Any] = {
            "lower": shaped(self.lower),
            "upper": shaped(self.upper),
            "confidence": float(self.confidence),
            "method": self.method,
            "quantiles": [float(q) for q in self.quantiles],
            "epsilon": float(self.epsilon),
        }
        if self.rho is not None:
            out["rho"] = float(self.rho)
        if self.share is not None:
            out["share"] = float(self.share)
        shares = self.shares_of_public_range
        if shares is not None:
            out["share_of_public_range"] = shares[0] if self.scalar else list(shares)
            note = self.wide_note
            if note is not None:
                out["note"] = note
        return out

    @property
    def shares_of_public_range(self) -> tuple[float, ...] | None:
        """Each interval's width over the public range's (None without a public range)."""
        if self.public_range is None:
            return None
        low, high = self.public_range
        return tuple(
            min(1.0, (hi - lo) / (high - low))
            for lo, hi in zip(self.lower, self.upper, strict=True)
        )

    @property
    def wide_note(self) -> str | None:
        """One sentence naming the intervals that span most of the public range, or None."""
        shares = self.shares_of_public_range
        if shares is None:
            return None
        wide = [
            (alpha, share)
            for alpha, share in zip(self.quantiles, shares, strict=True)
            if share > WIDE_INTERVAL_SHARE
        ]
        if not wide:
            return None
        which = ", ".join(f"q{alpha:g} {share:.0%}" for alpha, share in wide)
        return (
            f"intervals spanning most of the public range ({which} of it): at this epsilon "
            "and number of people they say little more than the bounds; a larger epsilon, "
            "more people or narrower public bounds tighten them"
        )


@dataclass(frozen=True)
class Release:
    """One published value and its ledger entry.

    Attributes:
        value: the released value (a candidate label, a number, or a list of them for top-k
            and multiple quantiles). Only a mechanism's output ever goes here.
        ledger: what the release spent, its sensitivity, bounds and accuracy.
        key: the public partition key for ``.PerKey`` releases.
        window: a description of the window for windowed input (e.g. its bounds).
        rng_secure: False when the release was sampled with a seeded test generator.
        statement: its accuracy in the statistic's units and in words (``None``: the
            ledger's bounds only).
        notes: sentences about the released value a reader must not miss, computed from the
            value and public parameters only (post-processing): a value released at a public
            bound says that the data may extend beyond it (:func:`bound_notes`).
        interval: for a quantile release, its randomization intervals (None otherwise).
    """

    value: Any
    ledger: LedgerEntry
    key: Any = None
    window: str | None = None
    rng_secure: bool = True
    statement: AccuracyStatement | None = None
    notes: tuple[str, ...] = ()
    interval: ReleaseInterval | None = None

    @property
    def name(self) -> str:
        return self.ledger.name

    @property
    def statistic(self) -> str:
        return self.ledger.statistic

    @property
    def accuracy(self) -> dict[str, float]:
        """The ledger's accuracy bounds and the statement's, together (all numbers)."""
        merged = dict(self.ledger.accuracy)
        if self.statement is not None:
            merged.update(self.statement.bounds)
        return merged

    def to_dict(self) -> dict[str, Any]:
        """The release object (plain JSON types).

        ``accuracy`` holds numbers only (the ledger's and the statement's bounds); with a
        statement, ``accuracy_units`` gives the unit of each bound and
        ``accuracy_description`` the sentence.
        """
        entry = self.ledger.to_dict()
        entry["accuracy"] = self.accuracy
        out: dict[str, Any] = {
            "name": entry.pop("name"),
            "statistic": entry.pop("statistic"),
            "value": _jsonable(self.value),
        }
        if self.interval is not None:
            out["interval"] = self.interval.to_dict()
        if self.key is not None:
            out["key"] = _jsonable(self.key)
        if self.window is not None:
            out["window"] = self.window
        out.update(entry)
        if self.statement is not None:
            units = {"confidence": "probability", **self.statement.units}
            out["accuracy_units"] = {k: units[k] for k in out["accuracy"] if k in units}
            out["accuracy_description"] = self.statement.description
        if self.notes:
            out["notes"] = list(self.notes)
        out["rng"] = "os_csprng" if self.rng_secure else "insecure_seeded_test_generator"
        return out


def release_document(releases: Iterable[Release], budget: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``release.json`` object: ``releases`` and ``budget``."""
    return {"releases": [r.to_dict() for r in releases], "budget": _jsonable(dict(budget))}


def make_release(
    *,
    name: str,
    statistic: str,
    value: Any,
    mechanism: str,
    epsilon: float,
    sensitivity: float,
    neighbouring: str,
    monotone: bool,
    num_candidates: int,
    contribution_bounds: Mapping[str, int],
    confidence: float = 0.95,
    rounds: int = 1,
    extra_accuracy: Mapping[str, float] | None = None,
    statement: AccuracyStatement | None = None,
    delta: float = 0.0,
    rho: float | None = None,
    key: Any = None,
    window: str | None = None,
    rng_secure: bool = True,
    notes: Sequence[str] = (),
    interval: ReleaseInterval | None = None,
) -> Release:
    """Build a release whose ledger carries the utility guarantee at ``confidence``.

    ``accuracy.score_loss`` is :func:`beam_dp.mechanisms.score_loss_bound` for one selection
    at ``epsilon / rounds`` (the per-round epsilon of a top-k or multi-round release), with
    the confidence split evenly over the rounds (a union bound), in the score's units.
    ``extra_accuracy`` adds statistic-specific bounds (``rank_error``, ``cell_width``).
    ``statement`` states them in the statistic's units (default: the selection statement for
    a score of unknown units, :func:`selection_statement` with ``kind="score"``).
    """
    per_round_confidence = 1.0 - (1.0 - confidence) / rounds
    accuracy: dict[str, float] = {
        "confidence": confidence,
        "score_loss": score_loss_bound(
            num_candidates,
            epsilon=epsilon / rounds,
            sensitivity=sensitivity,
            confidence=per_round_confidence,
            monotonic=monotone,
        ),
    }
    if extra_accuracy:
        accuracy.update(extra_accuracy)
    entry = LedgerEntry(
        name=name,
        statistic=statistic,
        mechanism=mechanism,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        sensitivity=sensitivity,
        neighbouring=neighbouring,
        monotone=monotone,
        num_candidates=num_candidates,
        contribution_bounds=dict(contribution_bounds),
        accuracy=accuracy,
    )
    if statement is None:
        statement = selection_statement(
            "score", score_loss=accuracy["score_loss"], k=rounds, confidence=confidence
        )
    return Release(
        value=value,
        ledger=entry,
        key=key,
        window=window,
        rng_secure=rng_secure,
        statement=statement,
        notes=tuple(notes),
        interval=interval,
    )


def bound_notes(
    released: Sequence[tuple[str, float]], *, lower: float, upper: float
) -> tuple[str, ...]:
    """One sentence per released value that sits on a public bound (post-processing).

    Values are clamped to ``[lower, upper]`` before anything is computed, so a value released
    at a bound says only that the statistic is at or beyond it: the data may extend past the
    bound, and a wider bound would tell more. Built from the released values and the public
    bounds alone.

    Args:
        released: ``(what, value)`` pairs, ``what`` naming the value ("the median",
            "the 0.75-quantile").
    """
    notes = []
    for what, value in released:
        for side, bound in (("lower", lower), ("upper", upper)):
            if float(value) == float(bound):
                notes.append(
                    f"{what} was released at the {side} bound {bound:g}: the data may extend "
                    f"{'below' if side == 'lower' else 'beyond'} it (values are clamped to "
                    f"[{lower:g}, {upper:g}]); a wider bound would say how far"
                )
    return tuple(notes)


def ledger_entries_to_record(releases: Iterable[Release]) -> list[LedgerEntry]:
    """The ledger entries that charge a budget for these releases.

    ``.Globally`` releases (and key selection) each cost their own entry. The per-key releases
    of one ``.PerKey`` transform cost as much as ``m`` of their entries, where
    ``m = contribution_bounds["max_keys_per_unit"]`` is the number of keys one unit can
    influence (``m = 1``: parallel composition). Windows work the same way: a transform's
    releases in several windows cost as much as ``W`` windows' worth, where
    ``W = contribution_bounds["max_windows_per_unit"]`` is the number of windows the pipeline
    lets one unit reach (each window's release runs at the share divided by ``W``). Recording
    the returned entries with ``PrivacyBudget.record`` charges exactly each transform's ε (and
    ρ).

    Raises:
        ValueError: if one transform's releases come from several windows without a
            ``max_windows_per_unit`` bound in their ledgers (nothing bounds what a unit spends
            over the windows then).
    """
    by_name: dict[str, dict[str | None, list[Release]]] = {}
    for release in releases:
        by_name.setdefault(release.ledger.name, {}).setdefault(release.window, []).append(release)
    entries: list[LedgerEntry] = []
    for name, windows in by_name.items():
        reach_windows = len(windows)
        if reach_windows > 1:
            bounds = [
                release.ledger.contribution_bounds.get("max_windows_per_unit")
                for group in windows.values()
                for release in group
            ]
            known = [int(bound) for bound in bounds if bound is not None]
            if len(known) < len(bounds):
                raise ValueError(
                    f"releases of {name!r} from several windows carry no 'max_windows_per_unit' "
                    "bound: nothing limits what one unit spends over the windows"
                )
            reach_windows = min(reach_windows, *known)
        for window in sorted(windows, key=lambda w: "" if w is None else w)[:reach_windows]:
            entries.extend(_entries_of_one_window(windows[window]))
    return entries


def _entries_of_one_window(releases: list[Release]) -> list[LedgerEntry]:
    """One transform's releases in one window: a per-key group costs ``m`` of its entries."""
    entries: list[LedgerEntry] = []
    per_key: list[LedgerEntry] = []
    for release in releases:
        if release.key is None:
            entries.append(release.ledger)
        else:
            per_key.append(release.ledger)
    if per_key:
        reach = int(per_key[0].contribution_bounds.get("max_keys_per_unit", len(per_key)))
        entries.extend(per_key[:reach])
    return entries
