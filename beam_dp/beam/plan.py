"""The one pipeline shape of every private transform: per key, per window.

Every ``.Globally`` / ``.PerKey`` transform of :mod:`beam_dp.beam.selection`,
:mod:`beam_dp.beam.key_selection` and :mod:`beam_dp.beam.quantiles` is built into a
:class:`Plan` in its constructor, and its ``expand`` is :func:`expand_plan`:

1. check the windowing (:func:`~beam_dp.beam.bounding.check_windowing`);
2. encode batches (or take raw numbers, for the quantiles' ``value_column=None``);
3. bound contributions, unless each record is its own unit;
4. add the markers of :func:`~beam_dp.beam.plan_graph.window_markers`: an empty batch in
   every window that releases (for ``.PerKey``: one per public key), so that every window
   and key that releases does, with or without data;
5. one ``CombineGlobally`` (or ``CombinePerKey`` over key positions) whose
   ``extract_output`` samples the release(s); for ``.PerKey`` with a :class:`BatchedSelectFn`
   (one selection per key), keys are grouped in shards of about :data:`BATCH_WEIGHT`
   accumulator entries, one combine per shard (every shard gets the markers), and each
   shard's keys are released by one vectorised exact draw
   (:mod:`~beam_dp.beam.per_key_draw`); with candidates from a side input, one combine
   per key yields merged scores and ``BatchElements`` groups keys for the draw
   (:class:`SelectBatchesPerKey`);
6. label each release with its public key and its window.

The graph is in :mod:`beam_dp.beam.plan_graph`, the many-keys draw in
:mod:`beam_dp.beam.per_key_draw`; their names are re-exported here.
:class:`PrivateTransform` is the base of every built transform: its label, display data and
what one unit can reach (keys, windows), and the ledger mechanism and rounds it spends.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import apache_beam as beam
from apache_beam.pvalue import PCollection

from beam_dp.accounting import BudgetShare
from beam_dp.accounting.shares import take_shares
from beam_dp.batching import ContributionBounds
from beam_dp.beam.options import CommonOptions, KeyOptions, PerKeyOptions, take_options
from beam_dp.beam.per_key_draw import (
    BATCH_WEIGHT,
    BatchedSelectFn,
    ReleaseBatchFn,
    ReleaseShardFn,
    ScoresOnlyFn,
    SelectBatchesPerKey,
    split_by_shard,
)
from beam_dp.beam.plan_graph import (
    EMPTY,
    AttachKeyFn,
    AttachWindowFn,
    MarkerFn,
    expand_plan,
    keyed_input,
    label_releases,
    split_by_key,
    values_of,
    window_markers,
)

__all__ = [
    "BATCH_WEIGHT",
    "EMPTY",
    "AttachKeyFn",
    "AttachWindowFn",
    "BatchedSelectFn",
    "Built",
    "MarkerFn",
    "Plan",
    "PrivateTransform",
    "ReleaseBatchFn",
    "ReleaseShardFn",
    "ScoresOnlyFn",
    "SelectBatchesPerKey",
    "expand_plan",
    "keyed_input",
    "label_releases",
    "split_by_key",
    "split_by_shard",
    "values_of",
    "window_markers",
]


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``expand`` wires together; built and validated in ``__init__``.

    Attributes:
        encode: options of the encode step (``encode_batch`` keyword arguments), or None
            when the elements are raw numbers (``.PerKey``: ``(key, value)`` pairs).
        combine_fn: the combiner whose ``extract_output`` returns the release(s).
        bounds: contribution bounds, or None for record-level privacy (no shuffle).
        num_shards, salt: passed to ``BoundContributions``.
        side_candidates: candidates as a PCollection (a side input of ``encode_fn`` and of
            the combiner), if any.
        keys: public keys of a ``.PerKey`` transform.
        encode_fn: a DoFn that encodes instead of ``EncodeBatches(**encode)`` (candidates
            from a side input, raw labels for DP key selection).
        max_windows_per_unit: the windows a unit keeps rows in (enforced by
            ``BoundContributions`` on windowed input).
        graph: a graph other than the one-pass path (``graph(pcoll, plan)``), for a release
            that needs more than one combine (DP key selection with a privately chosen
            ``max_candidates_per_unit``); None for :func:`expand_plan`.
    """

    encode: dict[str, Any] | None
    combine_fn: beam.CombineFn
    bounds: ContributionBounds | None
    num_shards: int
    salt: int | None
    side_candidates: PCollection | None = None
    keys: tuple[Any, ...] | None = None
    encode_fn: beam.DoFn | None = None
    max_windows_per_unit: int = 1
    graph: Callable[[PCollection, Plan], PCollection] | None = None


@dataclass(frozen=True, eq=False)
class Built:
    """A transform's :class:`Plan` and the public facts about what it releases and spends.

    Attributes:
        plan: what ``expand`` wires together.
        release_name: the release (budget share) name.
        keys_per_unit: the releases per window one unit can influence (``m`` for ``.PerKey``).
        display: display data (public parameters only).
        mechanism, rounds: the ledger mechanism and rounds a budget share must name.
        shares: the budget shares the transform spends (taken when it is built; empty when
            its epsilon is a float).
        releases: the names of the releases it makes per key and window, each with whether it
            may be absent (a top-k after DP key selection releases only if some label was
            selected); None: ``release_name`` alone, always.
    """

    plan: Plan
    release_name: str
    keys_per_unit: int
    display: dict[str, Any]
    mechanism: str
    rounds: int
    shares: tuple[BudgetShare, ...]
    releases: tuple[tuple[str, bool], ...] | None = None


class PrivateTransform(beam.PTransform):
    """Base of every ``.Globally`` / ``.PerKey`` transform: a :class:`Built` plan.

    Subclasses read their ``**options`` with :meth:`_options` and end their constructor with
    :meth:`_finish`, or do both with :meth:`_build`. ``NAMESPACE`` and ``VARIANT`` default to
    the two parts of the class's qualified name (``TopCandidates.Globally``).

    A transform built with budget shares takes them in :meth:`_finish`, after every check of
    its parameters (:func:`~beam_dp.accounting.shares.take_shares`: a share is spent once),
    and is applied to one input only: a second application would be a second release paid
    by the same shares.
    """

    NAMESPACE: ClassVar[str] = ""
    VARIANT: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__qualname__.split(".")
        if len(parts) >= 2:
            cls.NAMESPACE = cls.__dict__.get("NAMESPACE", parts[-2])
            cls.VARIANT = cls.__dict__.get("VARIANT", parts[-1])

    def _build(
        self, options: Mapping[str, Any], build: Callable[[CommonOptions, KeyOptions, Any], Built]
    ) -> None:
        """Build this variant from its ``**options``, by one path for every statistic.

        The variant's ``__init__`` declares ``**options: Unpack[X]``, ``X`` a TypedDict that
        combines the statistic's own keywords with :class:`~beam_dp.beam.options.PrivateOptions`
        (or ``PerKeyOptions``). ``X``, read from that signature (as ``pipelines.statistics``
        reads it), decides which keywords are the statistic's own (passed to ``build`` as one
        mapping, which applies their defaults), which of them are required, and the names a
        misspelt keyword is matched against. The shared ones (and ``k``, when the statistic
        has it) are validated by :meth:`_options`.

        Raises:
            TypeError: for a keyword the variant does not take (naming the nearest one it
                does) or a missing required keyword of the statistic.
        """
        accepted, required = _accepted_options(type(self))
        transform = f"{self.NAMESPACE}.{self.VARIANT}"
        for key in options:
            if key not in accepted and key not in _SHARED_NAMES:
                near = difflib.get_close_matches(key, sorted(accepted), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise TypeError(f"{transform}() got an unexpected keyword argument {key!r}{hint}")
        for key in sorted(required - options.keys()):
            raise TypeError(f"{transform}() missing required keyword argument {key!r}")
        own = {key: value for key, value in options.items() if key not in _SHARED_NAMES}
        shared = {key: value for key, value in options.items() if key in _SHARED_NAMES}
        common, keys = self._options(
            shared, unit_column=own.get("unit_column"), **({"k": own["k"]} if "k" in own else {})
        )
        self._finish(build(common, keys, own))

    def _options(
        self, options: Mapping[str, Any], *, unit_column: object, k: int = 1, **family: Any
    ) -> tuple[CommonOptions, KeyOptions]:
        """This variant's ``**options`` validated (:func:`~beam_dp.beam.options.take_options`)."""
        return take_options(
            options,
            transform=f"{self.NAMESPACE}.{self.VARIANT}",
            per_key=self.VARIANT == "PerKey",
            unit_column=unit_column,
            k=k,
            **family,
        )

    def _finish(self, built: Built) -> None:
        take_shares(built.shares, by=f"{self.NAMESPACE}.{self.VARIANT}({built.release_name!r})")
        self._applied = False
        self._built = built
        self._plan = built.plan
        self._release_name = built.release_name
        self._keys_per_unit = built.keys_per_unit
        self._display = built.display
        self._mechanism = built.mechanism
        self._rounds = built.rounds

    def expand(self, pcoll: PCollection) -> PCollection:
        if self._built.shares and self._applied:
            names = ", ".join(repr(share.name) for share in self._built.shares)
            raise ValueError(
                f"{self.default_label()} was already applied: its budget share(s) {names} pay "
                "for one release; build one transform per input, each with its own share"
            )
        self._applied = True
        return self._expand(pcoll)

    def _expand(self, pcoll: PCollection) -> PCollection:
        """The graph of this transform (what a subclass with its own graph overrides)."""
        if self._plan.graph is not None:
            return self._plan.graph(pcoll, self._plan)
        return expand_plan(pcoll, self._plan)

    def default_label(self) -> str:
        return f"{self.NAMESPACE}.{self.VARIANT}({self._release_name})"

    def display_data(self) -> dict[str, Any]:
        return dict(self._display)

    @property
    def release_name(self) -> str:
        """The name its releases carry (the budget share's name)."""
        return self._release_name

    @property
    def planned_releases(self) -> tuple[tuple[str, Any, bool], ...]:
        """``(name, key, optional)`` of every release it makes in the global window: one per
        public key for ``.PerKey`` (key None for ``.Globally``), whatever the data; a job checks
        the releases it gathers against these (``pipelines.execute``)."""
        names = self._built.releases or ((self._release_name, False),)
        keys = self._plan.keys if self._plan.keys is not None else (None,)
        return tuple((name, key, optional) for name, optional in names for key in keys)

    @property
    def keys_per_unit(self) -> int:
        """How many of this transform's releases (per window) one unit can influence:
        1 for ``.Globally``, ``m`` for ``.PerKey`` (see ``ledger_entries_to_record``)."""
        return self._keys_per_unit

    @property
    def max_windows_per_unit(self) -> int:
        """How many windows' releases one unit can influence (enforced by bounding)."""
        return self._plan.max_windows_per_unit

    @property
    def mechanism(self) -> str:
        """The ledger mechanism a budget share for this transform must name."""
        return self._mechanism

    @property
    def rounds(self) -> int:
        """The rounds a budget share for this transform must cover (``k``, or a quantile
        plan's levels)."""
        return self._rounds


#: The keywords every transform shares (validated by ``take_options``, which also refuses a
#: per-key one given to ``.Globally``).
_SHARED_NAMES = frozenset(PerKeyOptions.__required_keys__ | PerKeyOptions.__optional_keys__)


def _accepted_options(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """The keywords ``cls(**options)`` accepts, from its ``Unpack[TypedDict]`` annotation, and
    the statistic's own required ones."""
    hint = typing.get_type_hints(cls.__dict__["__init__"])["options"]
    (options,) = typing.get_args(hint)
    accepted = frozenset(options.__required_keys__ | options.__optional_keys__)
    return accepted, frozenset(options.__required_keys__) - _SHARED_NAMES
