"""The release record: what a job publishes for one statistic (DESIGN section 7).

A :class:`Release` is the released value plus the :class:`~beam_dp.accounting.LedgerEntry`
that says what it cost and how accurate it is. ``to_dict()`` is the JSON object written to
``release.json``; ``release_document`` wraps several releases and the budget. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from beam_dp.accounting import LedgerEntry
from beam_dp.mechanisms import score_loss_bound

__all__ = ["Release", "ledger_entries_to_record", "make_release", "release_document"]


def _jsonable(value: Any) -> Any:
    """Numpy scalars and tuples to plain JSON types."""
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


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
    """

    value: Any
    ledger: LedgerEntry
    key: Any = None
    window: str | None = None
    rng_secure: bool = True

    @property
    def name(self) -> str:
        return self.ledger.name

    @property
    def statistic(self) -> str:
        return self.ledger.statistic

    def to_dict(self) -> dict[str, Any]:
        """The DESIGN section 7 release object (plain JSON types)."""
        entry = self.ledger.to_dict()
        out: dict[str, Any] = {
            "name": entry.pop("name"),
            "statistic": entry.pop("statistic"),
            "value": _jsonable(self.value),
        }
        if self.key is not None:
            out["key"] = _jsonable(self.key)
        if self.window is not None:
            out["window"] = self.window
        out.update(entry)
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
    delta: float = 0.0,
    rho: float | None = None,
    key: Any = None,
    window: str | None = None,
    rng_secure: bool = True,
) -> Release:
    """Build a release whose ledger carries the utility guarantee at ``confidence``.

    ``accuracy.score_loss`` is :func:`beam_dp.mechanisms.score_loss_bound` for one selection
    at ``epsilon / rounds`` (the per-round epsilon of a top-k or multi-round release), with
    the confidence split evenly over the rounds (a union bound), in the score's units.
    ``extra_accuracy`` adds statistic-specific bounds (``rank_error``, ``cell_width``).
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
    return Release(value=value, ledger=entry, key=key, window=window, rng_secure=rng_secure)


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
