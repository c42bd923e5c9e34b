"""Ledger entries: what one release spent and how accurate it is, as plain JSON.

Every release carries one :class:`LedgerEntry` (docs/mechanisms.md, "Budget and
composition"). The release record adds the released ``value`` next to the entry's fields;
:meth:`LedgerEntry.from_dict` ignores keys it does not know, so a release record reads back
into its entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from beam_dp._validation import (
    check_non_negative_finite,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
)
from beam_dp.accounting._checks import check_delta, check_name
from beam_dp.accounting.kinds import check_mechanism

_V = TypeVar("_V", int, float)


class FrozenMapping(Mapping[str, _V]):
    """A read-only, picklable ``str`` → number mapping with sorted keys.

    Equal to any mapping with the same items (``FrozenMapping({"a": 1}) == {"a": 1}``).
    Deliberately unhashable, like ``dict``; :class:`LedgerEntry` leaves it out of its hash.
    """

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, _V]) -> None:
        self._data: dict[str, _V] = {key: items[key] for key in sorted(items)}

    def __getitem__(self, key: str) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"

    def __getstate__(self) -> dict[str, _V]:
        return self._data

    def __setstate__(self, state: dict[str, _V]) -> None:
        self._data = state


def _checked_items(value: object, field_name: str, described: str) -> Iterator[tuple[str, Any]]:
    """The items of a mapping field, each key a non-empty string (TypeError if not a mapping)."""
    if not isinstance(value, Mapping):
        raise TypeError(
            f"'{field_name}' must be a mapping from {described}; "
            f"received type {type(value).__name__}"
        )
    for key, item in value.items():
        check_name(key, f"{field_name} key")
        yield key, item


def _bounds_mapping(value: object) -> FrozenMapping[int]:
    checked: dict[str, int] = {}
    for key, bound in _checked_items(value, "contribution_bounds", "bound name to integer"):
        check_positive_int(bound, f"contribution_bounds[{key!r}]")
        checked[key] = int(bound)
    return FrozenMapping(checked)


def _accuracy_mapping(value: object) -> FrozenMapping[float]:
    checked: dict[str, float] = {}
    for key, number in _checked_items(value, "accuracy", "name to number"):
        if key == "confidence":
            check_probability_open(number, "accuracy['confidence']")
        else:
            check_non_negative_finite(number, f"accuracy[{key!r}]")
        checked[key] = float(number)
    if checked and "confidence" not in checked:
        raise ValueError(
            "'accuracy' must include 'confidence' (the probability its bounds hold); "
            f"received keys {sorted(checked)}"
        )
    return FrozenMapping(checked)


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """The privacy and accuracy record of one release.

    Numbers are stored as ``float`` (``int`` for ``num_candidates`` and contribution
    bounds) so that ``LedgerEntry.from_dict(json.loads(json.dumps(e.to_dict()))) == e``.

    Attributes:
        name: The budget share this release spent (matches ``BudgetShare.name``).
        statistic: What was released, e.g. ``"median"``, ``"heavy_hitter"``.
        mechanism: A name from ``MECHANISMS``.
        epsilon: ε the release spent (for zCDP-accounted shares, the mechanism's ε
            parameter summed over rounds; its cost is then ``rho``). > 0 and finite.
        delta: δ the release spent, in [0, 1).
        rho: zCDP ρ, set exactly when the budget used zCDP accounting for this release.
        sensitivity: Δ of the score under ``neighbouring``, > 0 and finite.
        neighbouring: ``"add_remove"`` or ``"replace"``.
        monotone: Whether the score is monotone under ``neighbouring``.
        num_candidates: Size of the public candidate set, >= 1.
        contribution_bounds: Bounds the pipeline enforced per privacy unit (name → int >= 1),
            e.g. ``{"max_contributions": 1}``. Read-only.
        accuracy: ``confidence`` in (0, 1) and bounds >= 0 that hold with that probability,
            e.g. ``score_loss``, ``rank_error``, ``cell_width``. Read-only.

    Privacy:
        An entry only describes a release; it never contains a record. Only public
        parameters and the release's accuracy bound (a function of public parameters) go in.
    """

    name: str
    statistic: str
    mechanism: str
    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    sensitivity: float
    neighbouring: str
    monotone: bool
    num_candidates: int
    contribution_bounds: Mapping[str, int] = field(
        default_factory=lambda: FrozenMapping[int]({}), hash=False
    )
    accuracy: Mapping[str, float] = field(
        default_factory=lambda: FrozenMapping[float]({}), hash=False
    )

    def __post_init__(self) -> None:
        check_name(self.name, "name")
        check_name(self.statistic, "statistic")
        check_mechanism(self.mechanism)
        check_positive_finite(self.epsilon, "epsilon")
        check_delta(self.delta)
        if self.rho is not None:
            check_positive_finite(self.rho, "rho")
        check_positive_finite(self.sensitivity, "sensitivity")
        check_relation(self.neighbouring, "neighbouring")
        if not isinstance(self.monotone, bool):
            raise TypeError(
                f"'monotone' must be a bool; received type {type(self.monotone).__name__}"
            )
        check_positive_int(self.num_candidates, "num_candidates")
        normalised: dict[str, object] = {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
            "sensitivity": float(self.sensitivity),
            "num_candidates": int(self.num_candidates),
            "contribution_bounds": _bounds_mapping(self.contribution_bounds),
            "accuracy": _accuracy_mapping(self.accuracy),
        }
        for key, value in normalised.items():
            object.__setattr__(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """Return the entry as a dict of plain JSON types (str, float, int, bool, None)."""
        return {
            "name": self.name,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "sensitivity": self.sensitivity,
            "neighbouring": self.neighbouring,
            "monotone": self.monotone,
            "num_candidates": self.num_candidates,
            "contribution_bounds": dict(self.contribution_bounds),
            "accuracy": dict(self.accuracy),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        """Rebuild an entry from :meth:`to_dict` output (after a JSON round trip too).

        Every field must be present; other keys (such as a release record's ``value``) are
        ignored. The usual validation applies.
        """
        names = [entry_field.name for entry_field in fields(cls)]
        missing = [name for name in names if name not in data]
        if missing:
            raise ValueError(f"ledger entry is missing required keys {missing}")
        return cls(**{name: data[name] for name in names})
