"""The options every private transform takes, declared once, and what they resolve to.

Every ``.Globally`` / ``.PerKey`` constructor of :mod:`beam_dp.beam.selection` and
:mod:`beam_dp.beam.quantiles` lists only what is specific to its statistic and takes the rest
as ``**options: Unpack[PrivateOptions]`` (``Unpack[PerKeyOptions]`` for ``.PerKey``), PEP 692:
editors and mypy see every keyword with its type, ``pipelines.statistics`` reads the accepted
config keys from the same TypedDict, and :func:`take_options` validates them once, at
construction, naming the parameter and the rule. (A shared options dataclass that callers
build would change every call site; a base-class ``__init__`` with all keywords would hide the
statistic's own ones among the common ones.)

This module also holds the rules those options need, each in one place: the column-name check,
the public label-file reader, the budget resolution (a float or a
:class:`~beam_dp.accounting.BudgetShare`) and :func:`split_share`, the one function that splits
a share over the keys and windows one unit can reach. No Beam here.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Required, TypedDict

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.accounting import BudgetShare
from beam_dp.accounting.kinds import ZCDP_RATE, privacy_kind
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho, floor_float
from beam_dp.batching import PublicIndex
from beam_dp.batching.hashing import UnitIds, check_unit_ids
from beam_dp.mechanisms import Method, RandomSource
from beam_dp.mechanisms.selection import check_method

__all__ = [
    "CommonOptions",
    "EpsilonLike",
    "KeyOptions",
    "PerKeyOptions",
    "PrivateOptions",
    "PublicList",
    "ResolvedBudget",
    "check_column",
    "check_privacy_unit",
    "check_relation",
    "check_windows_per_unit",
    "effective_keys_per_unit",
    "mechanism_name",
    "read_labels",
    "resolve_budget",
    "split_share",
    "static_labels",
    "take_options",
]

EpsilonLike = float | BudgetShare
#: Public labels: a sequence, or a path to a text file (see :func:`read_labels`).
PublicList = Sequence[Any] | str | os.PathLike[str]


class PrivateOptions(TypedDict, total=False):
    """The keyword options every private transform takes (``.Globally`` and ``.PerKey``).

    Attributes:
        epsilon: required: a float (> 0, finite) or an allocated ``BudgetShare`` whose
            mechanism and rounds match the transform.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        relation: ``"add_remove"`` (default) or ``"replace"``.
        name: the release name (default: the statistic; a share's name with a share).
        confidence: the level at which the accuracy bounds hold (default 0.95).
        num_shards: parallelism of contribution bounding (default 32).
        salt: decides which rows survive a bound (random per pipeline by default).
        on_bad_record: ``"fail"`` (default, for every transform, as for the jobs) or
            ``"skip"`` (drop bad records: a null or NaN value, a bad unit id...).
        record_level: ``True`` to run without a ``unit_column``: every record is then its own
            privacy unit, which protects single records, not people. Required when
            ``unit_column`` is None (default False: a transform without a unit and without
            it is refused, as the jobs refuse one without ``--privacy_unit`` or
            ``--record_level``).
        unit_ids: how privacy-unit ids are read: ``"normalize"`` (default: the identity rule
            of :mod:`beam_dp.batching.hashing`, which merges the forms one person's id
            takes, ``12`` and ``"12.0"``, ``"ABC"`` and ``"abc"``) or ``"exact"`` (for ids
            already canonical: text as it is). ``"exact"`` is recorded in each release's
            contribution bounds (``exact_unit_ids``).
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


class PerKeyOptions(PrivateOptions, total=False):
    """:class:`PrivateOptions` plus the public keys of a ``.PerKey`` transform.

    Attributes:
        key_column: the key field (required by the selections; the quantile transforms
            default to ``"key"``, and take ``(key, value)`` pairs with ``value_column=None``).
        keys: required: the public keys, a sequence or a file path (records with other keys
            are dropped; every key gets a release, with or without data).
        max_keys_per_unit: the keys kept per unit (selections: default None, no bound;
            quantiles: default 1). One unit influences ``m = min(max_keys_per_unit,
            len(keys))`` keys, and each key's release runs at ``ε / m`` (:func:`split_share`).
            ``"auto"`` (quantile family and mean): ``m`` chosen privately per window
            (:mod:`beam_dp.beam.quantiles`).
    """

    key_column: str
    keys: Required[PublicList]
    max_keys_per_unit: int | Literal["auto"] | None


_COMMON_KEYS = frozenset(PrivateOptions.__required_keys__ | PrivateOptions.__optional_keys__)
_PER_KEY_ONLY = frozenset(PerKeyOptions.__required_keys__ | PerKeyOptions.__optional_keys__) - (
    _COMMON_KEYS
)


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
    # Without importing Beam here: a PCollection is never a sequence of public labels.
    return type(value).__name__ == "PCollection" and hasattr(value, "pipeline")


def mechanism_name(method: Method, k: int) -> str:
    """The ledger's mechanism name for ``k`` selections with ``method``."""
    return method if k == 1 else f"{method}_top_k"


@dataclass(frozen=True)
class ResolvedBudget:
    """A selection's privacy parameters after reading a float or a budget share.

    Attributes:
        name: the release (share) name.
        epsilon: ε over the ``rounds`` selections of one release.
        rho: zCDP cost of one release when the share is accounted by zCDP, else None.
        mechanism: the ledger's mechanism name (decides the zCDP rate when ``rho`` is set).
        rounds: how many equal rounds ``epsilon`` is split into (k for top-k).
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
    exponential mechanism's zCDP rate) and cover ``rounds`` selections (``k`` for top-k).

    Raises:
        ValueError: naming the parameter and the rule, before any pipeline runs.
    """
    if isinstance(epsilon, BudgetShare):
        if not epsilon.allocated:
            raise ValueError(
                f"budget share {epsilon.name!r} has no epsilon yet: call "
                "PrivacyBudget.finalize() before building the transform"
            )
        if epsilon.mechanism != mechanism:
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


@dataclass(frozen=True)
class CommonOptions:
    """The validated :class:`PrivateOptions` (plus ``k``, the selections of one release).

    Built by :func:`take_options`; see :class:`PrivateOptions` for their meaning.
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

    def unit_bounds(self, record_level: bool) -> dict[str, int]:
        """What the ledger records about the privacy unit (next to the contribution bounds):
        ``record_level_privacy`` for record-level privacy, ``exact_unit_ids`` for ids read
        as given (``unit_ids="exact"``); nothing for the default identity rule."""
        if record_level:
            return {"record_level_privacy": 1}
        if self.unit_ids == "exact":
            return {"exact_unit_ids": 1}
        return {}

    def encode_options(self, unit_column: str | None) -> dict[str, Any]:
        """The options of the encode step that come from here (unit, id rule, bad records)."""
        return {
            "unit_column": unit_column,
            "unit_ids": self.unit_ids,
            "on_bad_record": self.on_bad_record,
        }

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
        return check_windows_per_unit(self.max_windows_per_unit, record_level)

    def check_k(self, num_candidates: int | None) -> None:
        """``k`` must not exceed the number of public candidates (when known)."""
        if num_candidates is not None and self.k > num_candidates:
            raise ValueError(
                f"'k' must be at most the number of candidates ({num_candidates}); "
                f"received {self.k}"
            )


def effective_keys_per_unit(max_keys_per_unit: int | None, num_keys: int) -> int:
    """How many keys' selections one unit can influence: ``min(max_keys_per_unit, keys)``."""
    return num_keys if max_keys_per_unit is None else min(max_keys_per_unit, num_keys)


def check_windows_per_unit(max_windows_per_unit: object, record_level: bool) -> int:
    """Validate ``max_windows_per_unit``: an integer >= 1, and 1 with record-level privacy.

    Record-level privacy has no unit column to bound a unit's windows with; a record is in
    exactly one window because only ``FixedWindows`` are accepted then (see
    :func:`beam_dp.beam.bounding.check_windowing`).
    """
    check_positive_int(max_windows_per_unit, "max_windows_per_unit")
    if record_level and max_windows_per_unit != 1:
        raise ValueError(
            "'max_windows_per_unit' applies only with a 'unit_column': with unit_column=None "
            "(record-level privacy) every record is its own unit and lies in one window; "
            f"received {max_windows_per_unit!r}"
        )
    return int(max_windows_per_unit)  # type: ignore[call-overload]


def split_share(
    budget: ResolvedBudget, *, keys_per_unit: int = 1, windows_per_unit: int = 1
) -> ResolvedBudget:
    """The budget of one release when a unit can influence ``keys · windows`` releases.

    A ``.PerKey`` transform releases once per public key (and every transform once per
    window); one unit can influence ``n = keys_per_unit · windows_per_unit`` of those
    releases, and together they must cost no more than ``budget``:

    * basic composition (``budget.rho`` is None): each release runs at ``ε / n`` (and
      ``δ / n`` for an (ε, δ) release), rounded down, so that ``n`` of them never exceed
      ``ε`` (and ``δ``);
    * zCDP (``budget.rho`` set): each release gets ``ρ / n`` (rounded down), and runs at the
      largest ε whose cost at the mechanism's rate is at most that: ``ε / √n`` for the
      mechanisms accounted by ``ρ ∝ ε²``, rounded down with exact rational arithmetic so
      that ``n`` releases cost at most the share's ρ.

    With ``n = 1`` (``.Globally``, one window per unit, or ``max_keys_per_unit=1``: parallel
    composition) the budget is returned as it is.

    Privacy:
        The ``n`` releases one unit can reach compose to the share's ε (basic) or ρ (zCDP);
        releases the unit cannot reach are parallel to them.
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
        raise ValueError("a zCDP budget needs its mechanism to be split over keys or windows")
    kind = privacy_kind(budget.mechanism)
    if kind not in ZCDP_RATE:
        raise ValueError(
            f"mechanism {budget.mechanism!r} has no zCDP rate to split its budget over keys "
            "or windows"
        )
    rate = ZCDP_RATE[kind]
    rho = floor_float(Fraction(budget.rho) / parts)
    # The largest ε (over the release's rounds) with rate · ε² / rounds <= rho, exactly.
    epsilon = epsilon_per_round_for_rho(rho, rate / budget.rounds, 1)
    return dataclasses.replace(budget, epsilon=epsilon, rho=rho)


@dataclass(frozen=True)
class KeyOptions:
    """The public keys of a ``.PerKey`` transform (all None for ``.Globally``)."""

    key_column: str | None = None
    keys: tuple[Any, ...] | None = None
    max_keys_per_unit: int | None = None

    @classmethod
    def per_key(
        cls, key_column: object, keys: object, max_keys_per_unit: object, *, batches: bool = True
    ) -> KeyOptions:
        """Validated per-key options; ``batches=False`` when the elements are ``(key, value)``
        pairs (no key column is read)."""
        if batches:
            check_column(key_column, "key_column")
        labels = static_labels(keys, "keys")
        if isinstance(max_keys_per_unit, str) and max_keys_per_unit == "auto":
            # The quantile family and the mean take it (quantile_options.take_value_options
            # turns it into a choice before this point); here it reaches the other transforms.
            raise ValueError(
                "'max_keys_per_unit' must be an integer >= 1 or None here; 'auto' (a privately "
                "chosen number of keys per unit) is available for the quantiles, median, min, "
                "max and mean .PerKey transforms"
            )
        if max_keys_per_unit is not None:
            check_positive_int(max_keys_per_unit, "max_keys_per_unit")
        column = key_column if batches else None
        return cls(column, labels, max_keys_per_unit)  # type: ignore[arg-type]

    def keys_per_unit(self, record_level: bool) -> int:
        """How many keys' releases one unit can influence (1 for ``.Globally``)."""
        if self.keys is None or record_level:
            return 1
        return effective_keys_per_unit(self.max_keys_per_unit, len(self.keys))

    def split(
        self, budget: ResolvedBudget, record_level: bool, windows_per_unit: int = 1
    ) -> ResolvedBudget:
        """The budget of one key's release in one window (see :func:`split_share`)."""
        return split_share(
            budget,
            keys_per_unit=self.keys_per_unit(record_level),
            windows_per_unit=windows_per_unit,
        )

    def ledger_bounds(self, record_level: bool) -> dict[str, int]:
        if self.keys is None:
            return {}
        return {"max_keys_per_unit": self.keys_per_unit(record_level)}

    def encode_options(self) -> dict[str, Any]:
        return {
            "key_column": self.key_column,
            "keys": None if self.keys is None else PublicIndex(self.keys),
        }


def take_options(
    options: Mapping[str, Any],
    *,
    transform: str,
    per_key: bool,
    unit_column: object,
    k: int = 1,
    defaults: Mapping[str, Any] | None = None,
    key_batches: bool = True,
) -> tuple[CommonOptions, KeyOptions]:
    """Validate a constructor's ``**options`` (:class:`PrivateOptions`, or
    :class:`PerKeyOptions` when ``per_key``) into the common and the per-key options.

    Args:
        options: the keyword options as the caller gave them.
        transform: the transform's name, for messages (``"TopCandidates.PerKey"``).
        per_key: whether the transform is a ``.PerKey`` one.
        unit_column: the statistic's privacy-unit field (None with ``record_level=True``;
            :func:`check_privacy_unit`).
        k: the number of selections of one release (top-k), validated here too.
        defaults: the statistic family's defaults that differ from :class:`CommonOptions`'
            (``key_column``, ``max_keys_per_unit``).
        key_batches: False when the per-key elements are ``(key, value)`` pairs.

    Raises:
        TypeError: for a keyword no transform takes, naming the nearest valid one.
        ValueError: for a per-key option given to a ``.Globally`` transform, a missing
            ``epsilon``, no privacy unit (neither ``unit_column`` nor ``record_level=True``),
            or any value breaking its rule (naming the parameter).
    """
    given = {**(defaults or {}), **options}
    valid = _COMMON_KEYS | _PER_KEY_ONLY if per_key else _COMMON_KEYS
    for key in options:
        if key not in valid:
            if key in _PER_KEY_ONLY:
                raise ValueError(f"{key!r} applies only to .PerKey ({transform})")
            near = difflib.get_close_matches(key, sorted(valid), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TypeError(f"{transform}() got an unexpected keyword argument {key!r}{hint}")
    if "epsilon" not in given:
        raise ValueError(f"{transform}: 'epsilon' is required (a float or a BudgetShare)")
    common = CommonOptions(k=k, **{key: given[key] for key in _COMMON_KEYS if key in given})
    check_privacy_unit(unit_column, common.record_level)
    if not per_key:
        return common, KeyOptions()
    if given.get("keys") is None:
        raise ValueError(f"'keys' (the public partition keys) is required for {transform}")
    keys = KeyOptions.per_key(
        given.get("key_column"),
        given["keys"],
        given.get("max_keys_per_unit"),
        batches=key_batches,
    )
    return common, keys
