"""The one construction path of every private transform: keywords, options, budget, transform.

A ``.Globally`` / ``.PerKey`` constructor lists what is specific to its statistic and takes the
rest as ``**options: Unpack[X]`` (PEP 692): ``X`` combines the statistic's own keywords with
:class:`PrivateOptions` (``.PerKey``: :class:`PerKeyOptions`; the grid statistics also
:class:`GridOptions`), so that editors, mypy and ``pipelines.statistics`` (which derives the
config keys from it) read one declaration. The constructor is one call,
:meth:`PrivateTransform._build`:

1. :func:`check_keywords`, the one keyword check: an unknown keyword is refused with the
   nearest valid one, a missing required one is named, a per-key option given to ``.Globally``
   is refused;
2. the statistic's build function reads its own keywords and calls :func:`take_options` (the
   shared ones, validated once, into :class:`CommonOptions`), reads the budget
   (:meth:`CommonOptions.budget`: a float or a :class:`~beam_dp.accounting.BudgetShare`),
   divides it over the keys and windows one unit can reach (:func:`divide_budget`), and returns
   a :class:`Built`: the :class:`~beam_dp.beam._graph.Wiring` and the public facts;
3. :meth:`PrivateTransform._finish` takes the budget shares (a share is spent once).

This module has no ``from __future__ import annotations``: under it, a class-form TypedDict
loses ``Required`` on Python 3.11 (its annotations stay strings).
"""

import dataclasses
import datetime
import decimal
import difflib
import os
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Literal, Required, TypedDict

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.accounting import BudgetShare
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.shares import take_shares
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho, floor_float
from beam_dp.batching import ContributionBounds, PublicIndex
from beam_dp.batching.columns import (
    COLUMN_TYPES,
    LabelMatch,
    RecordList,
    check_label_match,
    is_record,
)
from beam_dp.batching.hashing import UnitIds, check_unit_ids
from beam_dp.beam._graph import Wiring
from beam_dp.mechanisms import Method, RandomSource
from beam_dp.mechanisms.selection import check_method
from beam_dp.release import Release
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.selection import mechanism_name

__all__ = [
    "Built",
    "CommonOptions",
    "EpsilonLike",
    "GridLike",
    "GridOptions",
    "MissingKeywordError",
    "PerKeyOptions",
    "PrivateOptions",
    "PrivateTransform",
    "PublicList",
    "ResolvedBudget",
    "check_column",
    "check_keywords",
    "check_privacy_unit",
    "divide_budget",
    "read_labels",
    "static_labels",
    "take_options",
]

EpsilonLike = float | BudgetShare
#: Public labels: a sequence, or a path to a text file (see :func:`read_labels`).
PublicList = Sequence[Any] | str | os.PathLike[str]
GridLike = str | Sequence[float] | npt.NDArray[np.float64] | Grid


# ------------------------------------------------------------------------------ keywords


class PrivateOptions(TypedDict, total=False):
    """The keyword options every private transform takes (``.Globally`` and ``.PerKey``).

    Attributes:
        epsilon: a float (> 0, finite) or an allocated ``BudgetShare`` whose mechanism and
            rounds match the transform (its ``mechanism`` and ``rounds`` say which).
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        relation: ``"add_remove"`` (default) or ``"replace"``.
        name: the release name (default: the statistic; a share's name with a share).
        confidence: the level at which the accuracy bounds hold (default 0.95).
        num_shards: parallelism of contribution bounding (default 32).
        salt: decides which rows survive a bound (random per pipeline by default).
        on_bad_record: ``"fail"`` (default) or ``"skip"`` (drop bad records: a null or NaN
            value, a bad unit id...).
        record_level: ``True`` to run without a ``unit_column``: every record is then its own
            privacy unit, which protects single records, not people (default False: a
            transform without either is refused).
        unit_ids: how privacy-unit ids are read: ``"normalize"`` (default: the identity rule
            of :mod:`beam_dp.batching.hashing`) or ``"exact"`` (ids already canonical;
            recorded in each release's contribution bounds).
        label_match: how data values meet the public candidates and keys: ``"exact"``
            (default: text as it is) or ``"normalize"`` (surrounding whitespace, case and
            Unicode form ignored on both sides; the released label is the public one as
            given; public labels that would then be equal are refused).
        rng: None (the OS CSPRNG); a seeded source for tests only (it is copied to every
            worker, so workers repeat each other's draws).
        max_windows_per_unit: on windowed input, the windows a unit keeps rows in (enforced;
            default 1); each window's release runs at ``ε / max_windows_per_unit``.
    """

    epsilon: Required[EpsilonLike]
    method: Method
    relation: Relation
    name: str | None
    confidence: float
    num_shards: int
    salt: int | None
    on_bad_record: str
    rng: RandomSource | None
    max_windows_per_unit: int
    record_level: bool
    unit_ids: UnitIds
    label_match: LabelMatch


class PerKeyOptions(PrivateOptions, total=False):
    """:class:`PrivateOptions` plus the public keys of a ``.PerKey`` transform.

    Attributes:
        key_column: the key field (the grid statistics default to ``"key"``, and take
            ``(key, value)`` pairs with ``value_column=None``).
        keys: the public keys, a sequence or a file path (records with other keys are
            dropped; every key gets a release, with or without data).
        max_keys_per_unit: the keys kept per unit (selections: default None, no bound; grid
            statistics: default 1). One unit influences ``m = min(max_keys_per_unit,
            len(keys))`` keys, and each key's release runs at ``ε / m``
            (:func:`divide_budget`). ``"auto"`` (quantiles, median, min, max, mean): ``m``
            chosen privately per window.
    """

    key_column: str
    keys: Required[PublicList]
    max_keys_per_unit: int | Literal["auto"] | None


class GridOptions(TypedDict, total=False):
    """What the grid statistics (quantiles, median, min, max, mean, CDF) read and clamp.

    Attributes:
        lower, upper: public clamping bounds (finite, ``lower < upper``).
        unit_column: the privacy-unit field; without one, ``record_level=True``.
        value_column: the numeric field (default ``"value"``); None when the elements are
            numbers or arrays of numbers (``.PerKey``: ``(key, value)`` pairs), which is
            record-level only.
        grid: ``"uniform"`` (default), ``"log"`` (heavy tails; ``lower > 0``), explicit points
            inside ``[lower, upper]``, or a ``Grid``.
        num_points: grid size for ``"uniform"`` and ``"log"`` (2 to ``MAX_GRID_POINTS``).
        max_contributions: values kept per unit (needs ``unit_column``); the sensitivity is
            multiplied by it. ``"auto"``: chosen privately per window from the histogram of
            rows per unit (per (unit, key) for ``.PerKey``) with ``bound_share`` of epsilon
            (quantiles, median, min, max, mean).
        bound_share: with an ``"auto"`` bound, the share of epsilon that chooses it (default
            1/10).
        bound_cap: with ``max_contributions="auto"``, the largest candidate bound (default
            1024; the candidates are the powers of two up to it). With
            ``max_keys_per_unit="auto"`` the cap is the number of public keys.
        bound_rule: ``"quantile"`` (default; :mod:`beam_dp.summaries.contribution_bounds`).
        bound_alpha: the quantile of the per-unit counts the rule targets (default 0.9).
        resolution: the column's resolution (``"integer"`` or 1, ``"0.01"`` for cents): the
            grid is then the multiples of it in ``[lower, upper]``, at most ``num_points``
            (:func:`beam_dp.summaries.grids.resolution_grid`). Excludes ``grid``.
    """

    lower: Required[float]
    upper: Required[float]
    unit_column: str | None
    value_column: str | None
    grid: GridLike
    num_points: int
    max_contributions: int | Literal["auto"]
    bound_share: float | Fraction
    bound_cap: int
    bound_rule: str
    bound_alpha: float | Fraction
    resolution: int | float | str | Fraction


#: The keywords every transform shares (validated by :func:`take_options`).
SHARED_KEYS = frozenset(PerKeyOptions.__required_keys__ | PerKeyOptions.__optional_keys__)
_PER_KEY_ONLY = SHARED_KEYS - PrivateOptions.__required_keys__ - PrivateOptions.__optional_keys__


def _declared(cls: type) -> Any:
    """The TypedDict of ``cls(**options: Unpack[...])``: the first ``__init__`` up its MRO
    that declares one (as ``pipelines.statistics`` reads it)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        hint = typing.get_type_hints(init).get("options")
        if typing.get_origin(hint) is typing.Unpack:
            return typing.get_args(hint)[0]
    raise TypeError(f"{cls.__qualname__}.__init__ declares no **options: Unpack[...]")


class MissingKeywordError(TypeError, ValueError):
    """A required keyword of a transform is missing.

    A ``TypeError``, as Python's own for a missing argument, and a ``ValueError``, as the
    transforms raised for a missing ``epsilon``, ``keys``, ``lower`` or ``upper`` before they
    shared one keyword check (as numpy's ``AxisError`` is both a ``ValueError`` and an
    ``IndexError``): code that catches either keeps working.
    """


def check_keywords(
    cls: "type[PrivateTransform]", options: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one keyword check of every transform: ``(own, shared)`` keywords of ``options``.

    ``cls``'s declared TypedDict (its ``**options: Unpack[...]``, as ``pipelines.statistics``
    reads it) decides which keywords it accepts and requires; the shared ones are those of
    :class:`PerKeyOptions`, validated by :func:`take_options`.

    Raises:
        TypeError: for a keyword ``cls`` does not take (naming the nearest one it does).
        MissingKeywordError: for a missing required keyword (a TypeError and a ValueError).
        ValueError: for a per-key option given to a ``.Globally`` transform.
    """
    declared = _declared(cls)
    accepted = declared.__required_keys__ | declared.__optional_keys__
    transform = f"{cls.NAMESPACE}.{cls.VARIANT}"
    for key in options:
        if key in accepted:
            continue
        if key in _PER_KEY_ONLY and cls.HAS_PER_KEY:
            raise ValueError(f"{key!r} applies only to .PerKey ({transform})")
        near = difflib.get_close_matches(key, sorted(accepted), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise TypeError(f"{transform}() got an unexpected keyword argument {key!r}{hint}")
    for key in sorted(declared.__required_keys__ - options.keys()):
        raise MissingKeywordError(f"{transform}() missing required keyword argument {key!r}")
    own = {key: value for key, value in options.items() if key not in SHARED_KEYS}
    shared = {key: value for key, value in options.items() if key in SHARED_KEYS}
    return own, shared


# ------------------------------------------------------------------------ columns, labels


def check_column(value: object, name: str, *, optional: bool = False) -> None:
    """A column name must be a non-empty string (or None when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty column name; received {value!r}")


def check_privacy_unit(unit_column: object, record_level: object) -> bool:
    """The privacy unit of a transform: a ``unit_column``, or ``record_level=True``, not both.

    Fails closed, as the jobs do: without a unit column, record-level privacy (which protects
    single records, not people) must be asked for explicitly.

    Returns:
        Whether each record is its own privacy unit.

    Raises:
        ValueError: naming both options, for neither or both of them.
        TypeError: for a ``record_level`` that is not a bool.
    """
    if not isinstance(record_level, bool):
        raise TypeError(f"'record_level' must be True or False; received {record_level!r}")
    check_column(unit_column, "unit_column", optional=True)
    if unit_column is not None and record_level:
        raise ValueError(
            "give either a privacy unit ('unit_column') or record-level privacy "
            "(record_level=True), not both"
        )
    if unit_column is None and not record_level:
        raise ValueError(
            "no privacy unit: give 'unit_column' (the field identifying a person), or ask for "
            "record-level privacy explicitly with record_level=True, which protects single "
            "records, not people"
        )
    return record_level


def read_labels(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Public labels from a text file: the one reader, for transforms and jobs alike.

    One label per line, surrounding blanks stripped; blank lines and comment lines (whose
    first non-blank character is ``#``) are skipped. A label cannot start with ``#``.

    Raises:
        ValueError: for a file that cannot be read or holds no labels (naming the file only).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise ValueError(
            f"label file {os.fspath(path)!r} cannot be read as UTF-8 text (one label per line)"
        ) from None
    stripped = (line.strip() for line in text.splitlines())
    labels = tuple(line for line in stripped if line and not line.startswith("#"))
    if not labels:
        raise ValueError(f"candidate file {os.fspath(path)!r} holds no labels")
    return labels


def static_labels(candidates: object, name: str = "candidates") -> tuple[Any, ...]:
    """Public labels from a sequence or a text file; non-empty, distinct and finite."""
    if candidates is None:
        raise ValueError(f"'{name}' must be given: a sequence of labels or a file path")
    if isinstance(candidates, (str, os.PathLike)):
        labels = read_labels(candidates)
    elif isinstance(candidates, Iterable) and not _is_pcollection(candidates):
        labels = tuple(candidates)
    else:
        raise TypeError(
            f"'{name}' must be a sequence of labels or a file path; "
            f"received type {type(candidates).__name__}"
        )
    return PublicIndex(labels).labels


def _is_pcollection(value: object) -> bool:
    # Duck-typed: a PCollection is never a sequence of public labels.
    return type(value).__name__ == "PCollection" and hasattr(value, "pipeline")


# -------------------------------------------------------------------------------- budget


@dataclass(frozen=True)
class ResolvedBudget:
    """A release's privacy parameters after reading a float or a budget share.

    Attributes:
        name: the release (share) name.
        epsilon: ε over the ``rounds`` selections of one release.
        rho: zCDP cost of one release when the share is accounted by zCDP, else None.
        mechanism: the ledger's mechanism name (decides the zCDP rate when ``rho`` is set).
        rounds: how many equal rounds ``epsilon`` is divided into (k for top-k).
        delta: δ of an (ε, δ) release (DP key selection), else None.
    """

    name: str
    epsilon: float
    rho: float | None
    mechanism: str | None = None
    rounds: int = 1
    delta: float | None = None


def resolve_budget(
    epsilon: object, *, name: str | None, default_name: str, mechanism: str, rounds: int
) -> ResolvedBudget:
    """Read ``epsilon`` (a float or an allocated :class:`BudgetShare`) for one transform.

    A share must be allocated (``PrivacyBudget.finalize()`` or ``spend()`` ran), be for the
    same mechanism as the transform (so that permute-and-flip is never accounted with the
    exponential mechanism's zCDP rate; a share for ``method`` pays for its top-k form
    ``method + "_top_k"``, of the same kind, when ``k`` is above 1) and cover ``rounds``
    selections (``k`` for top-k).

    Raises:
        ValueError: naming the parameter and the rule, before any pipeline runs.
    """
    if isinstance(epsilon, BudgetShare):
        if not epsilon.allocated:
            raise ValueError(
                f"budget share {epsilon.name!r} has no epsilon yet: call "
                "PrivacyBudget.finalize() before building the transform"
            )
        if mechanism not in (epsilon.mechanism, f"{epsilon.mechanism}_top_k"):
            raise ValueError(
                f"budget share {epsilon.name!r} was requested for mechanism "
                f"{epsilon.mechanism!r}, but this transform runs {mechanism!r}; request the "
                "share with the transform's mechanism (its method, and k for top-k, decide it)"
            )
        if epsilon.rounds != rounds:
            raise ValueError(
                f"budget share {epsilon.name!r} covers rounds={epsilon.rounds}, but this "
                f"transform composes {rounds} round(s) (k for top-k, the levels or quantiles of a "
                f"quantile release); request it with rounds={rounds}"
            )
        if name is not None and name != epsilon.name:
            raise ValueError(
                f"'name' ({name!r}) differs from the budget share's name ({epsilon.name!r}); "
                "releases are recorded against the share, so leave 'name' unset"
            )
        return ResolvedBudget(
            epsilon.name, float(epsilon.epsilon), epsilon.rho, mechanism, int(rounds)
        )
    check_positive_finite(epsilon, "epsilon")
    chosen = default_name if name is None else name
    if not isinstance(chosen, str) or not chosen:
        raise ValueError(f"'name' must be a non-empty string; received {chosen!r}")
    return ResolvedBudget(chosen, float(epsilon), None, mechanism, int(rounds))  # type: ignore[arg-type]


def divide_budget(
    budget: ResolvedBudget, *, keys_per_unit: int = 1, windows_per_unit: int = 1
) -> ResolvedBudget:
    """The budget of one release when a unit can influence ``keys · windows`` releases.

    One unit can influence ``n = keys_per_unit · windows_per_unit`` releases (one per public
    key and window), which together must cost no more than ``budget``:

    * basic composition (``budget.rho`` is None): each release runs at ``ε / n`` (and ``δ / n``
      for an (ε, δ) release), rounded down, so that ``n`` of them never exceed ``ε`` (``δ``);
    * zCDP (``budget.rho`` set): each release gets ``ρ / n`` (rounded down), and runs at the
      largest ε whose cost at the mechanism's rate is at most that (``ε / √n`` for the
      mechanisms accounted by ``ρ ∝ ε²``), rounded down with exact rational arithmetic.

    With ``n = 1`` the budget is returned as it is.

    Privacy:
        The ``n`` releases one unit can reach compose to the share's ε (basic) or ρ (zCDP);
        releases the unit cannot reach are parallel to them (``docs/privacy_rules.md``).
    """
    check_positive_int(keys_per_unit, "keys_per_unit")
    check_positive_int(windows_per_unit, "windows_per_unit")
    parts = keys_per_unit * windows_per_unit
    if parts == 1:
        return budget
    if budget.rho is None:
        epsilon = floor_float(Fraction(budget.epsilon) / parts)
        delta = None if budget.delta is None else floor_float(Fraction(budget.delta) / parts)
        return dataclasses.replace(budget, epsilon=epsilon, delta=delta)
    if budget.mechanism is None:
        raise ValueError("a zCDP budget needs its mechanism to be divided over keys or windows")
    kind = privacy_kind(budget.mechanism)
    if kind not in ZCDP_RATE:
        raise ValueError(
            f"mechanism {budget.mechanism!r} has no zCDP rate to divide its budget over keys "
            "or windows"
        )
    rate = ZCDP_RATE[kind]
    rho = floor_float(Fraction(budget.rho) / parts)
    # The largest ε (over the release's rounds) with rate · ε² / rounds <= rho, exactly.
    epsilon = epsilon_per_round_for_rho(rho, rate / budget.rounds, 1)
    return dataclasses.replace(budget, epsilon=epsilon, rho=rho)


# ------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class CommonOptions:
    """The validated shared options of one transform (:class:`PrivateOptions`, and for
    ``.PerKey`` its keys), plus ``k``, the selections of one release.

    Built by :func:`take_options`; see :class:`PrivateOptions` and :class:`PerKeyOptions` for
    their meaning. ``keys`` is None for ``.Globally``; ``key_column`` is None when there are
    no keys or the elements are ``(key, value)`` pairs.
    """

    epsilon: EpsilonLike
    method: Method = "permute_and_flip"
    relation: Relation = "add_remove"
    k: int = 1
    name: str | None = None
    confidence: float = 0.95
    num_shards: int = 32
    salt: int | None = None
    on_bad_record: str = "fail"
    rng: RandomSource | None = None
    max_windows_per_unit: int = 1
    record_level: bool = False
    unit_ids: UnitIds = "normalize"
    label_match: LabelMatch = "exact"
    key_column: str | None = None
    keys: tuple[Any, ...] | None = None
    max_keys_per_unit: int | None = None

    def __post_init__(self) -> None:
        check_method(self.method)
        check_positive_int(self.max_windows_per_unit, "max_windows_per_unit")
        check_relation(self.relation)
        check_positive_int(self.k, "k")
        check_probability_open(self.confidence, "confidence")
        check_positive_int(self.num_shards, "num_shards")
        if self.salt is not None and (
            isinstance(self.salt, bool) or not isinstance(self.salt, int)
        ):
            raise TypeError(f"'salt' must be an integer or None; received {self.salt!r}")
        if self.on_bad_record not in ("fail", "skip"):
            raise ValueError(
                f"'on_bad_record' must be 'fail' or 'skip'; received {self.on_bad_record!r}"
            )
        check_unit_ids(self.unit_ids)
        check_label_match(self.label_match)
        if not isinstance(self.record_level, bool):
            raise TypeError(f"'record_level' must be True or False; received {self.record_level!r}")
        if self.rng is not None and not isinstance(self.rng, RandomSource):
            raise TypeError("'rng' must be None (the OS CSPRNG) or a beam_dp RandomSource")
        if not isinstance(self.epsilon, BudgetShare):
            check_positive_finite(self.epsilon, "epsilon")

    @property
    def mechanism(self) -> str:
        return mechanism_name(self.method, self.k)

    def shares(self) -> tuple[BudgetShare, ...]:
        """The budget share this transform spends, if ``epsilon`` is one."""
        return (self.epsilon,) if isinstance(self.epsilon, BudgetShare) else ()

    def budget(self, default_name: str, *, rounds: int | None = None) -> ResolvedBudget:
        """The resolved ε (and ρ) and release name; see :func:`resolve_budget`.

        ``rounds`` defaults to ``k`` (top-k); a quantile release passes its plan's rounds
        (its mechanism is then ``method`` itself).
        """
        return resolve_budget(
            self.epsilon,
            name=self.name,
            default_name=default_name,
            mechanism=self.mechanism if rounds is None else self.method,
            rounds=self.k if rounds is None else rounds,
        )

    def windows_per_unit(self, record_level: bool) -> int:
        """The windows whose releases one unit can influence (``max_windows_per_unit``).

        Raises:
            ValueError: for a bound above 1 with record-level privacy, where no unit column
                tells a unit's windows apart (each record is in one fixed window).
        """
        if record_level and self.max_windows_per_unit != 1:
            raise ValueError(
                "'max_windows_per_unit' applies only with a 'unit_column': with unit_column="
                "None (record-level privacy) every record is its own unit and lies in one "
                f"window; received {self.max_windows_per_unit!r}"
            )
        return int(self.max_windows_per_unit)

    def keys_per_unit(self, record_level: bool) -> int:
        """How many keys' releases one unit can influence: 1 for ``.Globally`` and at record
        level, else ``min(max_keys_per_unit, len(keys))``."""
        if self.keys is None or record_level:
            return 1
        if self.max_keys_per_unit is None:
            return len(self.keys)
        return min(self.max_keys_per_unit, len(self.keys))

    def per_release(self, budget: ResolvedBudget, record_level: bool) -> ResolvedBudget:
        """The budget of one key's release in one window (see :func:`divide_budget`)."""
        return divide_budget(
            budget,
            keys_per_unit=self.keys_per_unit(record_level),
            windows_per_unit=self.windows_per_unit(record_level),
        )

    def check_k(self, num_candidates: int | None) -> None:
        """``k`` must not exceed the number of public candidates (when known)."""
        if num_candidates is not None and self.k > num_candidates:
            raise ValueError(
                f"'k' must be at most the number of candidates ({num_candidates}); "
                f"received {self.k}"
            )

    def unit_bounds(self, record_level: bool) -> dict[str, int]:
        """What the ledger records about the privacy unit (next to the contribution bounds):
        ``record_level_privacy`` for record-level privacy, ``exact_unit_ids`` for ids read
        as given (``unit_ids="exact"``); nothing for the default identity rule."""
        if record_level:
            return {"record_level_privacy": 1}
        if self.unit_ids == "exact":
            return {"exact_unit_ids": 1}
        return {}

    def key_bounds(self, record_level: bool) -> dict[str, int]:
        """What the ledger records about the keys a unit reaches (``.PerKey`` only)."""
        if self.keys is None:
            return {}
        return {"max_keys_per_unit": self.keys_per_unit(record_level)}

    def encode_options(self, unit_column: str | None, columns: Mapping[str, Any]) -> dict[str, Any]:
        """The options of the encode step: the unit, its id rule, bad records, the statistic's
        own ``columns`` (and candidates), and the keys."""
        return {
            "unit_column": unit_column,
            "unit_ids": self.unit_ids,
            "on_bad_record": self.on_bad_record,
            **columns,
            "key_column": self.key_column,
            "keys": None if self.keys is None else PublicIndex(self.keys, self.label_match),
        }

    def wiring(
        self,
        combine_fn: beam.CombineFn,
        *,
        record_level: bool,
        encode: dict[str, Any] | None,
        bounds: ContributionBounds | None,
        **extra: Any,
    ) -> Wiring:
        """The :class:`~beam_dp.beam._graph.Wiring` of a transform over these options.

        Args:
            combine_fn: the statistic's combiner.
            record_level: whether each record is its own privacy unit.
            encode: the options of the encode step (:meth:`encode_options`), or None when the
                elements are raw numbers.
            bounds: the contribution bounds to enforce (None at record level).
            **extra: other :class:`~beam_dp.beam._graph.Wiring` fields (``encode_fn``,
                ``side_candidates``, ``graph``).
        """
        return Wiring(
            encode=encode,
            combine_fn=combine_fn,
            bounds=bounds,
            num_shards=self.num_shards,
            salt=self.salt,
            keys=self.keys,
            max_windows_per_unit=self.windows_per_unit(record_level),
            **extra,
        )


def take_options(
    variant: "PrivateTransform",
    shared: Mapping[str, Any],
    *,
    unit_column: object,
    k: int = 1,
    defaults: Mapping[str, Any] | None = None,
    key_batches: bool = True,
) -> CommonOptions:
    """The shared keywords of ``variant`` (:func:`check_keywords`), validated once.

    Args:
        variant: the transform being built (its name, and whether it is ``.PerKey``).
        shared: the shared keywords as the caller gave them.
        unit_column: the statistic's privacy-unit field (None needs ``record_level=True``).
        k: the number of selections of one release (top-k), validated here too.
        defaults: the family's defaults that differ from :class:`CommonOptions`'.
        key_batches: False when the per-key elements are ``(key, value)`` pairs (no key
            column is read).

    Raises:
        ValueError, TypeError: naming the parameter and the rule (no privacy unit, no keys,
            a bad value), before any pipeline runs.
    """
    given = {**(defaults or {}), **shared}
    per_key = {key: given.pop(key) for key in list(given) if key in _PER_KEY_ONLY}
    common = CommonOptions(k=k, **given)
    check_privacy_unit(unit_column, common.record_level)
    if variant.VARIANT != "PerKey":
        return common
    transform = f"{variant.NAMESPACE}.{variant.VARIANT}"
    if per_key.get("keys") is None:
        raise ValueError(f"'keys' (the public partition keys) is required for {transform}")
    if key_batches:
        check_column(per_key.get("key_column"), "key_column")
    labels = static_labels(per_key["keys"], "keys")
    PublicIndex(labels, common.label_match)  # keys that one label would merge are refused
    max_keys_per_unit = per_key.get("max_keys_per_unit")
    if isinstance(max_keys_per_unit, str) and max_keys_per_unit == "auto":
        # The quantile family and the mean take it (their build reads it before this point).
        raise ValueError(
            "'max_keys_per_unit' must be an integer >= 1 or None here; 'auto' (a privately "
            "chosen number of keys per unit) is available for the quantiles, median, min, "
            "max and mean .PerKey transforms"
        )
    if max_keys_per_unit is not None:
        check_positive_int(max_keys_per_unit, "max_keys_per_unit")
    return dataclasses.replace(
        common,
        key_column=per_key.get("key_column") if key_batches else None,
        keys=labels,
        max_keys_per_unit=max_keys_per_unit,
    )


# ----------------------------------------------------------------------------- transform


#: Exact types of a field's value that make a plain dict one record at once: a value of one
#: of these is not a column (no subclass is taken), so the dict is not a mapping of columns.
_SCALAR_TYPES = frozenset(
    {
        int,
        float,
        str,
        bool,
        bytes,
        type(None),
        decimal.Decimal,
        datetime.datetime,
        datetime.date,
        np.int64,
        np.int32,
        np.float64,
        np.float32,
        np.bool_,
        np.str_,
    }
)
#: A value no record holds: ``dict.get``'s default for a field a dict lacks.
_ABSENT = object()


class BatchGlobalRecordsFn(beam.DoFn):
    """:class:`BatchRecordsFn` for the global window: one list per bundle (at the window's end,
    as Beam's ``BatchElements`` emits there), without reading each element's window."""

    def __init__(self, size: int = 0) -> None:
        super().__init__()
        self._size = size or RECORDS_PER_BATCH

    def start_bundle(self) -> None:
        self._records = RecordList()
        self._probe: Any = _ABSENT  # a field name of the last dict record (see _is_listed)

    def process(self, element: Any) -> Iterable[Any]:
        # Not a generator, and a plain dict whose probed field holds a scalar is a record at
        # once: per-record input pays one call per record here, as little as it can.
        if not (
            type(element) is dict and type(element.get(self._probe, _ABSENT)) in _SCALAR_TYPES
        ) and not self._is_listed(element):
            return (element,)  # a batch, a (key, value) pair, or a heartbeat ({}: no record)
        records = self._records
        records.append(element)
        if len(records) < self._size:
            return ()
        self._records = RecordList()
        return (records,)

    def _is_listed(self, element: Any) -> bool:
        """:func:`_listed`, keeping a dict record's first field name as the next probe."""
        if not _listed(element):
            return False
        if type(element) is dict:
            self._probe = next(iter(element))
        return True

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._records:
            records, self._records = self._records, RecordList()
            yield GlobalWindows.windowed_value_at_end_of_window(records)


def _listed(element: Any) -> bool:
    """Whether ``element`` is one record to put in a list: :func:`~beam_dp.batching.columns.
    is_record`, not a heartbeat (``{}``); a plain dict is told apart by its first value that is
    not a column (the same rule, without the abstract-class checks).

    The batching DoFns first try a cheaper sufficient test: a plain dict whose value of a
    probed field (one field name of the last dict record) has one of the exact types in
    ``_SCALAR_TYPES`` holds a value that is not a column, so it is a record by this rule.
    """
    if type(element) is dict:
        for value in element.values():
            if not isinstance(value, COLUMN_TYPES):
                return True  # the usual record: its first field holds one value
            break
        return any(not isinstance(value, COLUMN_TYPES) for value in element.values())
    return is_record(element) and not (isinstance(element, Mapping) and not element)


#: Records per list that :class:`BatchRecordsFn` hands to the encode step. Each list costs
#: a few milliseconds past the encode step (bounding splits it into ``num_shards`` parts, each
#: shuffled), so lists of 4096 records spent ~1 µs a record there; at 16384 a quarter of that,
#: while a list's dicts stay a few MB (benchmarks/RESULTS.md).
RECORDS_PER_BATCH = 16384


class BatchRecordsFn(beam.DoFn):
    """One record per element (a dict, a ``beam.Row`` or other NamedTuple, a dataclass) into
    lists of records, per window, within a bundle; every other element passes as it is.

    The encode step reads a list of records as one batch (:func:`~beam_dp.batching.columns.
    as_table`: a :class:`~beam_dp.batching.columns.RecordList`, read into the fields the
    statistic uses), and reads each record's fields alone (its type rule never looks at the
    other records), so a record releases the same whatever list it lands in. A list keeps its
    records' window and the latest of their timestamps (inside that window).
    """

    def __init__(self, size: int = RECORDS_PER_BATCH) -> None:
        super().__init__()
        check_positive_int(size, "size")
        self._size = size

    def start_bundle(self) -> None:
        self._buffers: dict[Any, tuple[RecordList, Timestamp]] = {}
        self._probe: Any = _ABSENT

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
    ) -> Iterator[Any]:
        if not (type(element) is dict and type(element.get(self._probe, _ABSENT)) in _SCALAR_TYPES):
            if not _listed(element):
                yield element  # a batch, a (key, value) pair, or a heartbeat ({}: no record)
                return
            if type(element) is dict:
                self._probe = next(iter(element))
        records, latest = self._buffers.get(window, (RecordList(), timestamp))
        records.append(element)
        self._buffers[window] = (records, max(latest, timestamp))
        if len(records) >= self._size:
            del self._buffers[window]
            yield records  # the current element's window and timestamp

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for window, (records, latest) in self._buffers.items():
            yield WindowedValue(records, latest, (window,))
        self._buffers = {}


@dataclass(frozen=True, eq=False)
class Built:
    """A transform's :class:`~beam_dp.beam._graph.Wiring` and the public facts about what it
    releases and spends.

    Attributes:
        wiring: what ``expand`` wires together.
        release_name: the release (budget share) name.
        keys_per_unit: the releases per window one unit can influence (``m`` for ``.PerKey``).
        display: display data (public parameters only).
        mechanism, rounds: the ledger mechanism and rounds a budget share must name.
        shares: the budget shares the transform spends (taken when it is built; empty when
            its epsilon is a float).
        releases: the names of the releases it makes per key and window, each with whether it
            may be absent (a top-k after DP key selection releases only if some label was
            selected); None: ``release_name`` alone, always.
        spec: the statistic's spec (what every release needs after the merge; public), for
            a family whose graph combines more than once.
    """

    wiring: Wiring
    release_name: str
    keys_per_unit: int
    display: dict[str, Any]
    mechanism: str
    rounds: int
    shares: tuple[BudgetShare, ...]
    releases: tuple[tuple[str, bool], ...] | None = None
    spec: Any = None


@beam.typehints.with_output_types(Release)
class PrivateTransform(beam.PTransform):
    """Base of every ``.Globally`` / ``.PerKey`` transform: a :class:`Built` wiring.

    A variant's ``__init__`` declares ``**options: Unpack[X]`` and calls :meth:`_build` with
    the statistic's build function. ``NAMESPACE`` and ``VARIANT`` default to the two parts of
    the class's qualified name (``TopCandidates.Globally``).

    A transform built with budget shares takes them in :meth:`_finish`, after every check of
    its parameters (:func:`~beam_dp.accounting.shares.take_shares`: a share is spent once),
    and is applied to one input only: a second application would be a second release paid
    by the same shares.
    """

    NAMESPACE: ClassVar[str] = ""
    VARIANT: ClassVar[str] = ""
    #: Whether the namespace has a ``.PerKey`` variant (a per-key option given to
    #: ``.Globally`` is then named as such).
    HAS_PER_KEY: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__qualname__.split(".")
        if len(parts) >= 2:
            cls.NAMESPACE = cls.__dict__.get("NAMESPACE", parts[-2])
            cls.VARIANT = cls.__dict__.get("VARIANT", parts[-1])

    def _build(
        self,
        options: Mapping[str, Any],
        build: "Callable[[PrivateTransform, dict[str, Any], dict[str, Any]], Built]",
    ) -> None:
        """Build this variant from its ``**options``: the one path of every statistic.

        :func:`check_keywords` splits the keywords into the statistic's own and the shared
        ones; ``build(self, own, shared)`` validates both (the shared ones with
        :func:`take_options`) and returns the :class:`Built` transform.
        """
        own, shared = check_keywords(type(self), options)
        self._finish(build(self, own, shared))

    def _finish(self, built: Built) -> None:
        take_shares(built.shares, by=f"{self.NAMESPACE}.{self.VARIANT}({built.release_name!r})")
        self._applied = False
        self._built = built
        self._spec = built.spec

    @property
    def _wiring(self) -> Wiring:
        return self._built.wiring

    def expand(self, pcoll: PCollection) -> PCollection:
        if self._built.shares and self._applied:
            names = ", ".join(repr(share.name) for share in self._built.shares)
            raise ValueError(
                f"{self.default_label()} was already applied: its budget share(s) {names} pay "
                "for one release; build one transform per input, each with its own share"
            )
        self._applied = True
        windowed = not isinstance(pcoll.windowing.windowfn, GlobalWindows)
        batch_fn = BatchRecordsFn() if windowed else BatchGlobalRecordsFn()
        batched = pcoll | "BatchRecords" >> beam.ParDo(batch_fn)
        return self._expand(batched)

    def _expand(self, pcoll: PCollection) -> PCollection:
        """The graph of this transform (what a family with more than one combine overrides)."""
        return self._wiring.expand(pcoll)

    def default_label(self) -> str:
        return f"{self.NAMESPACE}.{self.VARIANT}({self._built.release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._built.display)

    @property
    def release_name(self) -> str:
        """The name its releases carry (the budget share's name)."""
        return self._built.release_name

    @property
    def planned_releases(self) -> tuple[tuple[str, Any, bool], ...]:
        """``(name, key, optional)`` of every release it makes in the global window: one per
        public key for ``.PerKey`` (key None for ``.Globally``), whatever the data; a job checks
        the releases it gathers against these (``pipelines.execute``)."""
        names = self._built.releases or ((self._built.release_name, False),)
        keys = self._wiring.keys if self._wiring.keys is not None else (None,)
        return tuple((name, key, optional) for name, optional in names for key in keys)

    @property
    def keys_per_unit(self) -> int:
        """How many of this transform's releases (per window) one unit can influence:
        1 for ``.Globally``, ``m`` for ``.PerKey`` (see ``ledger_entries_to_record``)."""
        return self._built.keys_per_unit

    @property
    def max_windows_per_unit(self) -> int:
        """How many windows' releases one unit can influence (enforced by bounding)."""
        return self._wiring.max_windows_per_unit

    @property
    def mechanism(self) -> str:
        """The ledger mechanism a budget share for this transform must name."""
        return self._built.mechanism

    @property
    def rounds(self) -> int:
        """The rounds a budget share for this transform must cover (``k``, or a quantile
        plan's levels)."""
        return self._built.rounds
