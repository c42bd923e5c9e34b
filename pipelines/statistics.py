"""Statistic specs shared by the jobs: what to read, what budget share to ask for, which transform.

Each statistic of a job (one of the single-statistic CLIs, or an entry of the release job's
config) becomes a :class:`StatisticSpec`: the columns it reads, the budget share it requests
(mechanism and rounds, decided by the library's own planning), and the beam_dp transform that
releases it. The budget asks for every share before any transform is built, so an over-spent
budget fails before any data is read. No DP math here: sensitivities, epsilons per round and
accuracy all come from beam_dp.

Config entries fail closed: the keys a statistic accepts are derived from the real signature
of its transform (``.Globally`` or ``.PerKey``) plus the config's own keys (:data:`CONFIG_KEYS`);
any other key is an error naming the nearest valid one, and a value of the wrong type is an
error naming the key. Public lists (candidates, keys, prices) are read by one rule,
:func:`public_list`: a list, or a string naming an existing file, or a comma-separated string
with at least one comma; anything else is an error, never a guess.
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import numpy as np

from beam_dp import (
    BestPrice,
    BudgetShare,
    Election,
    KeySelection,
    PrivacyBudget,
    PrivateCDF,
    PrivateMax,
    PrivateMean,
    PrivateMedian,
    PrivateMin,
    PrivateQuantiles,
    Revenue,
    TopCandidates,
)
from beam_dp.jobs import PrivateTransform, check_relation, read_labels

__all__ = [
    "CONFIG_KEYS",
    "MAX_CANDIDATES",
    "TYPES",
    "StatisticSpec",
    "check_table",
    "parse_prices",
    "public_list",
    "spec_from_config",
    "statistic_keys",
    "suggest",
    "suggest_names",
]

MAX_CANDIDATES = 1_000_000
"""The longest public list a job scores (candidates, keys, prices): each candidate costs the
pipeline a score per shard and the mechanism a pass, so a longer list is refused when it is
read, before any work, rather than left to run for minutes or exhaust memory."""

TYPES = (
    "top_candidates",
    "best_price",
    "election",
    "quantiles",
    "median",
    "min",
    "max",
    "mean",
    "cdf",
)
_TRANSFORMS: dict[str, Any] = {
    "top_candidates": TopCandidates,
    "best_price": BestPrice,
    "election": Election,
    "quantiles": PrivateQuantiles,
    "median": PrivateMedian,
    "min": PrivateMin,
    "max": PrivateMax,
    "mean": PrivateMean,
    "cdf": PrivateCDF,
}

# Transform parameters a job sets itself (from [input], its flags, or the config's own keys).
_SET_BY_JOB = frozenset(
    {
        "unit_column",
        "candidate_column",
        "value_column",
        "key_column",
        "on_bad_record",
        "rng",
        "key_selection",
        "record_level",  # the job's --record_level (checked against --privacy_unit)
        "unit_ids",  # one identity rule for the job's unit column: the library's default
    }
)
# Keys of a statistic's config that are not transform parameters (or differ from them).
CONFIG_KEYS: dict[str, Any] = {
    "name": str,
    "type": str,
    "epsilon": float,
    "weight": float,
    "key": str,
    "keys": list[Any] | str,
}
_CANDIDATE_KEYS: dict[str, Any] = {"candidate": str, "candidates": list[Any] | str}
_KEY_SELECTION_KEYS: dict[str, Any] = {"key_selection_epsilon": float, "key_selection_delta": float}
_VALUE_KEYS: dict[str, Any] = {"value": str}
_PER_KEY_ONLY = ("keys", "max_keys_per_unit")
# Where a user who wrote a transform's own name (or a job-level key) should look instead.
_ELSEWHERE = {
    "unit_column": "'privacy_unit' in [input]",
    "privacy_unit": "'privacy_unit' in [input]",
    "record_level": "'record_level' in [input]",
    "on_bad_record": "'on_bad_record' in [input]",
    "candidate_column": "'candidate'",
    "value_column": "'value'",
    "key_column": "'key'",
}


# ----------------------------------------------------------------------- checking tables


def suggest_names(name: str, valid: collections.abc.Iterable[str]) -> list[str]:
    """The nearest valid name (``difflib.get_close_matches``), as a list of at most one."""
    return difflib.get_close_matches(name, sorted(valid), n=1)


def suggest(name: str, valid: collections.abc.Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the nearest valid name, or ``""``."""
    matches = suggest_names(name, valid)
    return f"; did you mean {matches[0]!r}?" if matches else ""


def _kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return f"a {type(value).__name__}"


def _members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _accepts(hint: Any, value: object) -> bool | None:
    """Whether ``value`` has the type ``hint`` names; None when the hint is not checked here
    (the transform validates it at construction, before any data is read)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in hint.__args__)
    if origin in (typing.Union, types.UnionType):
        results = [_accepts(member, value) for member in typing.get_args(hint)]
        if any(result is True for result in results):
            return True
        return None if any(result is None for result in results) else False
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (collections.abc.Sequence, list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(hint)
        if not args or args[0] is Any:
            return True
        items = [_accepts(args[0], item) for item in value]
        if all(item is True for item in items):
            return True
        return False if any(item is False for item in items) else None
    kind = origin if isinstance(origin, type) else hint
    if isinstance(kind, type):
        try:
            return isinstance(value, kind)
        except TypeError:
            return None
    return None


def _describe(hint: Any) -> str:
    words: list[str] = []
    for member in _members(hint):
        origin = typing.get_origin(member)
        if member is bool:
            words.append("true or false")
        elif member is int:
            words.append("an integer")
        elif member is float:
            words.append("a number")
        elif member is str:
            words.append("a string")
        elif origin is Literal:
            words.append(f"one of {list(member.__args__)}")
        elif origin in (collections.abc.Sequence, list, tuple) or member in (list, tuple):
            words.append("a list")
        elif member is dict:
            words.append("a table")
    return " or ".join(dict.fromkeys(words)) or "a value of another type"


def check_table(table: Mapping[str, Any], valid: Mapping[str, Any], where: str) -> None:
    """Every key of ``table`` must be in ``valid`` (key -> type hint) with a value of that type.

    Raises:
        ValueError: naming ``where``, the key, and the nearest valid key or the expected type.
    """
    for key, value in table.items():
        if key not in valid:
            elsewhere = _ELSEWHERE.get(key)
            hint = f"; did you mean {elsewhere}?" if elsewhere else suggest(key, valid)
            raise ValueError(f"unknown key {key!r} in {where}{hint}")
        if _accepts(valid[key], value) is False:
            raise ValueError(
                f"{where}: {key!r} must be {_describe(valid[key])}; received {_kind_of(value)}"
            )


# ---------------------------------------------------------------- keys from the signatures


def _parameters(cls: type) -> tuple[dict[str, Any], list[str]]:
    """The keyword parameters of ``cls(...)`` with their type hints, and the required ones.

    ``**options: Unpack[SomeTypedDict]`` (the options every transform shares, declared once
    in ``beam_dp.PrivateOptions``) contributes the TypedDict's keys, its required keys
    among the required ones. Followed through an untyped ``**options``: a constructor that
    forwards ``**options`` (and no ``*args``) to its parent fills the parent's positional
    parameters itself, so those are not the caller's to give.
    """
    hints_by_name: dict[str, Any] = {}
    required: list[str] = []
    filled_by_subclass = False
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        hints = typing.get_type_hints(init)
        forwards = positional = False
        for parameter in list(inspect.signature(init).parameters.values())[1:]:
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                typed = hints.get(parameter.name)
                if typing.get_origin(typed) is typing.Unpack:
                    options = typing.get_args(typed)[0]
                    for name, hint in typing.get_type_hints(options).items():
                        hints_by_name.setdefault(name, hint)
                    required.extend(sorted(options.__required_keys__))
                else:
                    forwards = True
            elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                positional = True
            elif not (filled_by_subclass and parameter.kind is not parameter.KEYWORD_ONLY):
                hints_by_name.setdefault(parameter.name, hints.get(parameter.name, Any))
                if parameter.default is parameter.empty:
                    required.append(parameter.name)
        if not forwards:
            break
        filled_by_subclass = not positional
    return hints_by_name, required


def statistic_keys(kind: str, *, per_key: bool) -> dict[str, Any]:
    """The keys a ``[[statistics]]`` entry of type ``kind`` accepts, with their type hints.

    Derived from the signature of the transform (``.PerKey`` when ``per_key``, else
    ``.Globally``), less the parameters the job sets itself, plus :data:`CONFIG_KEYS` and the
    keys that name the columns (``candidate``/``candidates`` or ``value``).
    """
    namespace = _TRANSFORMS[kind]
    variant = namespace.PerKey if per_key else namespace.Globally
    keys = {k: v for k, v in _parameters(variant)[0].items() if k not in _SET_BY_JOB}
    keys.update(CONFIG_KEYS)
    if kind in ("top_candidates", "election"):
        keys.update(_CANDIDATE_KEYS)
        if kind == "top_candidates" and not per_key:
            keys.update(_KEY_SELECTION_KEYS)
    else:
        keys.update(_VALUE_KEYS)
    if kind == "best_price":
        keys["prices"] = list[Any] | str
    if not per_key:
        for key in (*_PER_KEY_ONLY, "key"):
            keys.pop(key, None)
    return keys


# ------------------------------------------------------------------------- public lists


def public_list(spec: object, *, name: str, base: Path | None = None) -> list[Any]:
    """Public labels by one rule, for flags and configs alike; never a guess.

    * a list (from a config): as given;
    * a string naming an existing file (relative to ``base`` when given): one label per line,
      blank lines and ``#`` comments skipped (the library's own reader,
      :func:`beam_dp.read_labels`);
    * a string with at least one comma: the labels between the commas, blanks stripped (a
      trailing comma ends the list: ``'a,'`` is the one label ``a``).

    Raises:
        ValueError: for a string without a comma that names no file (say ``'a,'`` for one
            label), a string that is both a file and a comma-separated list, an empty label
            between commas, or any other type.
    """
    if isinstance(spec, (list, tuple)):
        return _limited(list(spec), name=name, source="the list")
    if not isinstance(spec, str):
        raise ValueError(f"{name!r} must be a list or a string; received {_kind_of(spec)}")
    path = Path(spec).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    is_file = path.is_file()
    if is_file and "," in spec:
        raise ValueError(
            f"{name!r}: {spec!r} is both an existing file and a comma-separated list; "
            "rename the file, or give the labels as a list"
        )
    if is_file:
        return _limited(list(read_labels(path)), name=name, source=f"the file {str(path)!r}")
    if "," not in spec:
        if path.exists():
            raise ValueError(f"{name!r}: {spec!r} is not a file (one label per line)")
        raise ValueError(
            f"{name!r}: no file {spec!r} (looked for {str(path)!r}); give an existing file with "
            f"one label per line, or a comma-separated list (a single label: {spec + ','!r}, "
            "or a list in a config)"
        )
    labels = [label.strip() for label in spec.split(",")]
    if labels[-1] == "":
        labels.pop()
    if not labels or any(label == "" for label in labels):
        raise ValueError(f"{name!r}: an empty label in the comma-separated list {spec!r}")
    return _limited(labels, name=name, source="the comma-separated list")


def _limited(labels: list[Any], *, name: str, source: str) -> list[Any]:
    """``labels`` if there are at most :data:`MAX_CANDIDATES` of them (a public count)."""
    if len(labels) > MAX_CANDIDATES:
        raise ValueError(
            f"{name!r}: {source} holds {len(labels):,} entries, more than the "
            f"{MAX_CANDIDATES:,} a job can score in reasonable time and memory; give fewer"
        )
    return labels


def parse_prices(spec: str) -> list[float]:
    """START:STOP:STEP as exact decimals, STOP excluded (0.01:2.00:0.01 is 0.01 ... 1.99).

    Each price is the float nearest its exact decimal (as ``float(Decimal(...))`` gives it).
    """
    try:
        start, stop, step = (Decimal(part) for part in spec.split(":"))
    except (ValueError, InvalidOperation):
        raise ValueError(
            f"'prices' must be START:STOP:STEP (decimals); received {spec!r}"
        ) from None
    if not all(part.is_finite() for part in (start, stop, step)):
        raise ValueError(f"'prices' needs finite START, STOP and STEP; received {spec!r}")
    if not (step > 0 and start > 0 and stop > start):
        raise ValueError(f"'prices' needs 0 < START < STOP and STEP > 0; received {spec!r}")
    count = int((stop - start) / step)
    if count > MAX_CANDIDATES:  # counted before any price is made
        raise ValueError(
            f"'prices': START:STOP:STEP {spec!r} makes about {count:,} prices, more than the "
            f"{MAX_CANDIDATES:,} a job can score in reasonable time and memory; choose a larger "
            "STEP or a narrower range"
        )
    fast = _decimal_grid(start, stop, step, count)
    if fast is not None:
        return fast
    return [float(p) for p in (start + i * step for i in range(count + 1)) if p < stop]


def _decimal_grid(start: Decimal, stop: Decimal, step: Decimal, count: int) -> list[float] | None:
    """The grid of :func:`parse_prices` with numpy, or None where it cannot be made exactly.

    With ``scale = 10**places`` (the most decimal places of the three), every price is the
    exact integer ``n = start*scale + i*step*scale`` over ``scale``; for ``n < 2**53`` and
    ``scale <= 10**22`` both are exact doubles and IEEE division rounds ``n / scale``
    correctly, which is the float nearest the decimal, as ``float(Decimal)`` gives it.
    """
    exponents = [part.as_tuple().exponent for part in (start, stop, step)]
    places = max(0, *(-e for e in exponents if isinstance(e, int)))
    if places > 22:
        return None
    scale = 10**places
    first, last, stride = (int(part * scale) for part in (start, stop, step))
    if first + stride * (count + 1) >= 1 << 53:
        return None
    numerators = first + stride * np.arange(count + 1, dtype=np.int64)
    numerators = numerators[numerators < min(last, 1 << 62)]  # every n < 2**53: exact
    prices: list[float] = (numerators.astype(np.float64) / float(scale)).tolist()
    return prices


def _prices(spec: object, base: Path | None) -> list[Any]:
    """A price grid: START:STOP:STEP, or a public list (:func:`public_list`) of decimals."""
    if isinstance(spec, str) and ":" in spec:
        path = Path(spec) if base is None or Path(spec).is_absolute() else base / spec
        if path.is_file():
            raise ValueError(
                f"'prices': {spec!r} is both an existing file and START:STOP:STEP; rename the file"
            )
        return parse_prices(spec)
    prices = public_list(spec, name="prices", base=base)
    if isinstance(spec, (list, tuple)):
        return prices
    parsed = []
    for price in prices:
        try:
            parsed.append(float(Decimal(price)))
        except (ValueError, InvalidOperation):
            raise ValueError(
                f"'prices' must be decimals (one per line or comma-separated); received {price!r}"
            ) from None
    return parsed


# ---------------------------------------------------------------------------- the spec


@dataclass
class StatisticSpec:
    """One statistic to release: its columns, budget request and transform parameters."""

    name: str
    type: str
    params: dict[str, Any]
    columns: list[str]
    mechanism: str = ""
    rounds: int = 1
    epsilon: float | None = None
    weight: float | None = None
    key_selection: dict[str, float] | None = None
    shares: dict[str, BudgetShare] = field(default_factory=dict)
    relation: str | None = None
    # A best_price grid read once (Revenue), shared by check() and transform(): a 10^6-price
    # grid is then validated and converted once per job, not once per build.
    _grid: Revenue | None = field(default=None, init=False, repr=False, compare=False)

    def request(self, budget: PrivacyBudget) -> None:
        """Ask ``budget`` for this statistic's share(s) (before any data is read).

        The share's mechanism and rounds are the built transform's (:meth:`check` learns
        them), so the job never plans a release itself.
        """
        if not self.mechanism:
            raise RuntimeError(f"statistic {self.name!r}: check() must run before request()")
        if self.key_selection is not None:
            self.shares["keys"] = budget.request(
                f"{self.name}_candidates",
                mechanism="partition_selection",
                epsilon=self.key_selection["epsilon"],
                delta=self.key_selection["delta"],
            )
        self.shares["main"] = budget.request(
            self.name,
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            weight=self.weight,
            rounds=self.rounds,
        )

    def check(
        self,
        *,
        unit_column: str | None,
        relation: str,
        on_bad_record: str,
        unit_ids: str = "normalize",
    ) -> None:
        """Build the transform once with the statistic's own epsilon (or 1.0 for a weight).

        Every parameter is validated by the transform's constructor, so a bad one fails here,
        before the budget is asked and before any data is read. Only the mechanism and the
        rounds its budget share must name are kept.
        """
        keys = None
        if self.key_selection is not None:
            keys = (self.key_selection["epsilon"], self.key_selection["delta"])
        transform = self._build(
            main=1.0 if self.epsilon is None else self.epsilon,
            keys=keys,
            unit_column=unit_column,
            relation=relation,
            on_bad_record=on_bad_record,
            unit_ids=unit_ids,
        )
        # What the budget share must name: the transform answers (e.g. a quantile release's
        # rounds are its plan's levels).
        self.mechanism = transform.mechanism
        self.rounds = transform.rounds

    def transform(
        self,
        *,
        unit_column: str | None,
        relation: str,
        on_bad_record: str,
        unit_ids: str = "normalize",
    ) -> PrivateTransform:
        """The beam_dp transform (call after ``budget.finalize()``)."""
        return self._build(
            main=self.shares["main"],
            keys=self.shares.get("keys"),
            unit_column=unit_column,
            relation=relation,
            on_bad_record=on_bad_record,
            unit_ids=unit_ids,
        )

    def _build(
        self,
        *,
        main: float | BudgetShare,
        keys: BudgetShare | tuple[float, float] | None,
        unit_column: str | None,
        relation: str,
        on_bad_record: str,
        unit_ids: str = "normalize",
    ) -> PrivateTransform:
        common: dict[str, Any] = {
            "unit_column": unit_column,
            "unit_ids": unit_ids,
            # the job checked --privacy_unit against --record_level before building anything
            "record_level": unit_column is None,
            "epsilon": main,
            "relation": relation if self.relation is None else self.relation,
            "on_bad_record": on_bad_record,
        }
        params = dict(self.params)
        if keys is not None:
            bound = params.get("max_candidates_per_unit") or 1
            if bound == "auto":  # the key selection's bound, chosen privately; not the top-k's
                params.pop("max_candidates_per_unit")
            if isinstance(keys, BudgetShare):
                selection = KeySelection(epsilon=keys, max_candidates_per_unit=bound)
            else:
                selection = KeySelection(
                    epsilon=keys[0], delta=keys[1], max_candidates_per_unit=bound
                )
            params["key_selection"] = selection
        if self.type == "best_price" and params.get("prices") is not None:
            if self._grid is None:
                prices = params["prices"]
                self._grid = prices if isinstance(prices, Revenue) else Revenue(tuple(prices))
            params["prices"] = self._grid
        namespace = _TRANSFORMS[self.type]
        variant = namespace.PerKey if "key_column" in params else namespace.Globally
        if self.type == "quantiles":
            quantiles = params.pop("quantiles")
            return variant(quantiles, **common, **params)
        return variant(**common, **params)


def spec_from_config(config: Mapping[str, Any], *, base: Path | None = None) -> StatisticSpec:
    """A statistic from one config entry (see ``pipelines.release`` for the fields).

    Raises:
        ValueError: for an unknown key (naming the nearest valid one), a value of the wrong
            type, a missing key, or a public list that is neither a list nor a file.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"every [[statistics]] entry must be a table; received {_kind_of(config)}")
    entry = dict(config)
    name = entry.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("every statistic needs a 'name' (a non-empty string)")
    where = f"[[statistics]] {name!r}"
    kind = entry.pop("type", None)
    if kind not in TYPES:
        hint = suggest(kind, TYPES) if isinstance(kind, str) else ""
        raise ValueError(f"{where}: 'type' must be one of {list(TYPES)}; received {kind!r}{hint}")
    per_key = "key" in entry
    if not per_key and any(key in entry for key in _PER_KEY_ONLY):
        present = [key for key in _PER_KEY_ONLY if key in entry]
        raise ValueError(
            f"{where}: {present[0]!r} applies only to a per-key release: give 'key' (the field "
            "holding the key) and 'keys' (the public keys)"
        )
    check_table(entry, statistic_keys(kind, per_key=per_key), where)
    namespace = _TRANSFORMS[kind]
    variant = namespace.PerKey if per_key else namespace.Globally
    required = [
        key
        for key in _parameters(variant)[1]
        if key not in _SET_BY_JOB and key not in ("epsilon", "candidates", "keys")
    ]
    required.append("candidate" if kind in ("top_candidates", "election") else "value")
    if per_key:
        required.append("keys")
    for key in required:
        if key not in entry:
            raise ValueError(f"{where}: {key!r} is required")
    if "relation" in entry:
        check_relation(entry["relation"])
    epsilon = entry.pop("epsilon", None)
    weight = entry.pop("weight", None)
    if epsilon is None and weight is None:
        weight = 1.0
    relation = entry.pop("relation", None)
    params: dict[str, Any] = {"name": name}
    columns: list[str] = []
    if per_key:
        params["key_column"] = entry.pop("key")
        params["keys"] = public_list(entry.pop("keys"), name="keys", base=base)
        columns.append(params["key_column"])
    key_selection = None
    if kind in ("top_candidates", "election"):
        params["candidate_column"] = entry.pop("candidate")
        columns.append(params["candidate_column"])
        selection_keys = [key for key in _KEY_SELECTION_KEYS if key in entry]
        if "candidates" in entry:
            params["candidates"] = public_list(
                entry.pop("candidates"), name="candidates", base=base
            )
            if selection_keys:
                raise ValueError(
                    f"{where}: {selection_keys[0]!r} applies only without 'candidates' (DP key "
                    "selection chooses the candidates from the data)"
                )
        elif kind == "election" or per_key:
            raise ValueError(f"{where}: public 'candidates' are required here")
        else:
            params["candidates"] = None
            for key in _KEY_SELECTION_KEYS:
                if key not in entry:
                    raise ValueError(
                        f"{where}: without public 'candidates', {key!r} is required (DP key "
                        "selection chooses the candidates from the data)"
                    )
            key_selection = {
                key[len("key_selection_") :]: float(entry.pop(key)) for key in _KEY_SELECTION_KEYS
            }
    else:
        params["value_column"] = entry.pop("value")
        columns.append(params["value_column"])
        if kind == "best_price" and "prices" in entry:
            entry["prices"] = _prices(entry["prices"], base)
    params.update(entry)
    return StatisticSpec(
        name=name,
        type=kind,
        params=params,
        columns=columns,
        epsilon=None if epsilon is None else float(epsilon),
        weight=None if weight is None else float(weight),
        key_selection=key_selection,
        relation=relation,
    )
