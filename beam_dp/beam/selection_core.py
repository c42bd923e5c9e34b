"""The pipeline shape shared by every selection transform (see :mod:`beam_dp.beam.selection`).

``expand`` is always: encode batches, bound contributions (unless each record is its own
unit), then one ``CombineGlobally`` or ``CombinePerKey`` whose ``extract_output`` samples the
release. This module builds that shape from a :class:`Plan` and holds the parameter helpers
the transforms share, and :func:`window_markers`, the one rule (shared with the quantile
transforms) on which windows release.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import apache_beam as beam
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindows

from beam_dp._validation import check_positive_int
from beam_dp.batching import ContributionBounds, PublicIndex
from beam_dp.beam.bounding import (
    BoundContributions,
    EncodeBatches,
    MatchBoundedWindows,
    check_windowing,
)
from beam_dp.beam.selection_combiners import (
    EMPTY,
    AttachKeyFn,
    AttachWindowFn,
    EncodeLabelsFn,
    EncodeWithSideCandidatesFn,
    MarkerFn,
    split_by_key,
)
from beam_dp.beam.selection_spec import (
    ResolvedBudget,
    SelectionSpec,
    effective_keys_per_unit,
    read_labels,
    split_share,
)
from beam_dp.release import Release

__all__ = [
    "KeyOptions",
    "Plan",
    "SelectionTransform",
    "check_column",
    "resolve_candidates",
    "static_labels",
    "window_markers",
]


def check_column(value: object, name: str, *, optional: bool = False) -> None:
    """A column name must be a non-empty string (or None when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty column name; received {value!r}")


def static_labels(candidates: object, name: str = "candidates") -> tuple[Any, ...]:
    """Public labels from a sequence or a text file; non-empty, distinct and finite."""
    if candidates is None:
        raise ValueError(f"'{name}' must be given: a sequence of labels or a file path")
    if isinstance(candidates, (str, os.PathLike)):
        labels = read_labels(candidates)
    elif isinstance(candidates, Iterable) and not isinstance(candidates, PCollection):
        labels = tuple(candidates)
    else:
        raise TypeError(
            f"'{name}' must be a sequence of labels or a file path; "
            f"received type {type(candidates).__name__}"
        )
    return PublicIndex(labels).labels


def resolve_candidates(
    candidates: object, *, side_input_ok: bool
) -> tuple[tuple[Any, ...] | None, PCollection | None]:
    """``(labels, None)`` for public labels, ``(None, pcoll)`` for a side-input PCollection."""
    if isinstance(candidates, PCollection):
        if not side_input_ok:
            raise TypeError(
                "'candidates' as a PCollection is supported for count scores only "
                "(TopCandidates, Election with score='plurality')"
            )
        return None, candidates
    return static_labels(candidates), None


@dataclass(frozen=True)
class KeyOptions:
    """The public keys of a ``.PerKey`` transform (all None for ``.Globally``)."""

    key_column: str | None = None
    keys: tuple[Any, ...] | None = None
    max_keys_per_unit: int | None = None

    @classmethod
    def per_key(cls, key_column: object, keys: object, max_keys_per_unit: object) -> KeyOptions:
        check_column(key_column, "key_column")
        labels = static_labels(keys, "keys")
        if max_keys_per_unit is not None:
            check_positive_int(max_keys_per_unit, "max_keys_per_unit")
        return cls(key_column, labels, max_keys_per_unit)  # type: ignore[arg-type]

    def keys_per_unit(self, record_level: bool) -> int:
        """How many keys' selections one unit can influence (1 for ``.Globally``)."""
        if self.keys is None or record_level:
            return 1
        return effective_keys_per_unit(self.max_keys_per_unit, len(self.keys))

    def split(
        self, budget: ResolvedBudget, record_level: bool, windows_per_unit: int = 1
    ) -> ResolvedBudget:
        """The budget of one key's selection in one window (see ``split_share``)."""
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


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``expand`` wires together; built and validated in ``__init__``.

    Attributes:
        encode: options of the encode step (``encode_batch`` keyword arguments).
        combine_fn: the combiner whose ``extract_output`` returns the release(s).
        bounds: contribution bounds, or None for record-level privacy (no shuffle).
        num_shards, salt: passed to ``BoundContributions``.
        side_candidates: candidates as a PCollection (a side input), if any.
        keys: public keys of a ``.PerKey`` transform.
        encode_labels: encode raw labels for DP key selection.
        max_windows_per_unit: the windows a unit keeps rows in (enforced by
            ``BoundContributions`` on windowed input).
    """

    encode: dict[str, Any]
    combine_fn: beam.CombineFn
    bounds: ContributionBounds | None
    num_shards: int
    salt: int | None
    side_candidates: PCollection | None = None
    keys: tuple[Any, ...] | None = None
    encode_labels: bool = False
    max_windows_per_unit: int = 1


def window_markers(pcoll: PCollection, *, unit_level: bool) -> PCollection:
    """One ``None`` per window that releases: the one rule for every private transform.

    A window releases if and only if it holds at least one input element (in the global
    window: always, even without input). The rule looks at the raw input, so the set of
    releasing windows does not depend on bounding, bad records or unknown labels; but it
    does depend on which windows hold data, so *which windows exist* is not protected
    unless the caller sends a heartbeat (a batch with no rows, ``{}``) in every window.

    Args:
        pcoll: the transform's input.
        unit_level: whether the data goes through ``BoundContributions`` (the markers are
            then put in its output's windowing strategy, so that the two can be flattened).
    """
    windowfn = pcoll.windowing.windowfn
    if isinstance(windowfn, GlobalWindows):
        return pcoll.pipeline | "Once" >> beam.Create([None])
    marker = beam.CombineGlobally(MarkerFn()).without_defaults()
    markers = pcoll | "WindowsWithInput" >> marker
    if unit_level:
        markers = markers | "AsBoundedWindows" >> MatchBoundedWindows(windowfn)
    return markers


def _empty_batch(_: Any) -> dict[str, Any]:
    return EMPTY


def _every_key(_: Any, num_keys: int) -> Iterator[tuple[int, dict[str, Any]]]:
    for position in range(num_keys):
        yield position, EMPTY


def _releases(releases: list[Release]) -> list[Release]:
    return releases


def expand_plan(pcoll: PCollection, plan: Plan) -> PCollection:
    """Encode, bound, combine once (per key), and label the releases with key and window.

    Every window that holds input gets a release (per public key for ``.PerKey``), and so
    does the global window without any input (:func:`window_markers`). The windowing is
    checked first (:func:`~beam_dp.beam.bounding.check_windowing`).
    """
    unit_level = plan.bounds is not None
    check_windowing(pcoll, unit_level=unit_level, max_windows_per_unit=plan.max_windows_per_unit)
    args: tuple[Any, ...] = ()
    if plan.side_candidates is not None:
        side = beam.pvalue.AsList(plan.side_candidates)
        args = (side,)
        batches = pcoll | "Encode" >> beam.ParDo(EncodeWithSideCandidatesFn(plan.encode), side)
    elif plan.encode_labels:
        batches = pcoll | "Encode" >> beam.ParDo(EncodeLabelsFn(plan.encode))
    else:
        batches = pcoll | "Encode" >> EncodeBatches(**plan.encode)
    if plan.bounds is not None:
        batches = batches | "BoundContributions" >> BoundContributions(
            plan.bounds,
            num_shards=plan.num_shards,
            salt=plan.salt,
            max_windows_per_unit=plan.max_windows_per_unit,
        )
    # Each marker brings an empty batch (per public key) so that its window releases, even
    # when all of its records were dropped or, in the global window, when there is no input.
    markers = window_markers(pcoll, unit_level=unit_level)
    if plan.keys is None:
        empty = markers | "EmptyBatch" >> beam.Map(_empty_batch)
        releases = (
            (batches, empty)
            | "WithEmptyBatch" >> beam.Flatten()
            | "Select" >> beam.CombineGlobally(plan.combine_fn, *args).without_defaults()
            | "Releases" >> beam.FlatMap(_releases)
        )
    else:
        every_key = markers | "EveryPublicKey" >> beam.FlatMap(_every_key, len(plan.keys))
        releases = (
            (batches | "SplitByKey" >> beam.FlatMap(split_by_key), every_key)
            | "WithEveryKey" >> beam.Flatten()
            | "SelectPerKey" >> beam.CombinePerKey(plan.combine_fn, *args)
            | "AttachKey" >> beam.ParDo(AttachKeyFn(plan.keys))
        )
    return releases | "AttachWindow" >> beam.ParDo(AttachWindowFn())


class SelectionTransform(beam.PTransform):
    """Base of the ``.Globally`` / ``.PerKey`` transforms: a built :class:`Plan`."""

    NAMESPACE: ClassVar[str] = ""
    VARIANT: ClassVar[str] = ""

    def _finish(
        self,
        plan: Plan,
        *,
        release_name: str,
        keys_per_unit: int,
        display: dict[str, Any],
    ) -> None:
        self._plan = plan
        self._release_name = release_name
        self._keys_per_unit = keys_per_unit
        self._display = display

    def expand(self, pcoll: PCollection) -> PCollection:
        return expand_plan(pcoll, self._plan)

    def default_label(self) -> str:
        return f"{self.NAMESPACE}.{self.VARIANT}({self._release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._display)

    @property
    def keys_per_unit(self) -> int:
        """How many of this transform's releases (per window) one unit can influence:
        1 for ``.Globally``, ``m`` for ``.PerKey`` (see ``ledger_entries_to_record``)."""
        return self._keys_per_unit

    @property
    def max_windows_per_unit(self) -> int:
        """How many windows' releases one unit can influence (enforced by bounding)."""
        return self._plan.max_windows_per_unit


def describe(
    spec: SelectionSpec,
    *,
    labels: tuple[Any, ...] | None,
    bounds: ContributionBounds | None,
    keys: KeyOptions,
    epsilon_total: float,
) -> dict[str, Any]:
    """Display data of a transform: public parameters only."""
    shown = spec.display_data()
    shown["epsilon_total"] = epsilon_total
    shown["num_candidates"] = "side input" if labels is None else len(labels)
    shown["privacy_unit"] = "record" if bounds is None else "unit_column"
    if keys.keys is not None:
        shown["num_keys"] = len(keys.keys)
    return shown
