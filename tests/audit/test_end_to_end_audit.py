"""End-to-end privacy audit: every transform, through the real Beam pipeline, on neighbours.

Issue 8, "Prove it end to end". Two methods:

1. **Exact output distributions.** The sampler entry points the pipeline calls
   (``select``, ``top_k``, ``select_per_key``, ``select_keys``, ``release_ks_cdf`` and the
   mean's ``noisy_sum_and_count``, wherever a ``beam_dp`` module looks them up)
   are wrapped: the wrapper records the merged integer scores, ε, Δ, monotonicity and method
   the combiner hands to the sampler, calls the original (so its checks still run), and
   returns a *public, data-independent* choice (the middle candidate; the first ``k``; the
   labels of a fixed public list for key selection). Forcing the choice makes every later
   round (top-k peeling, the recursive quantile split, the top-k after key selection) run on
   the same history in both neighbours, so each round's selection can be compared given the
   same previous outcomes. From the captured scores we compute both output pmfs with
   :func:`beam_dp.mechanisms.selection_probabilities` and require, summed over the rounds and
   over every key and window one privacy unit can reach, ``max |log P(r) - log P'(r)| <= ε``.
   Key selection is audited on its exact release probabilities
   (:func:`~beam_dp.mechanisms.partition_selection.release_probability`): the pure part on the
   labels both neighbours hold, and the δ part on the labels only one of them holds. The CDF
   (``release_ks_cdf``, its public entry point) on the exact laws of its noisy count and of
   its KS sample (:func:`~beam_dp.mechanisms.cdf.ks_pmf_bruteforce`, small grids only).
   The mean's noisy sums on the exact loss of discrete Laplace noise: ``|d| / scale`` for a
   value moved by ``d``, summed over the sum and the count.
   A release is the sampler calls of one Beam callback into beam_dp: a combiner's
   ``extract_output``, or a ``Map`` over a side input (a bound choice, a release at the chosen
   bound); ``test_call_sites.py`` audits every call site this way, each against its mutant.
2. **Sampling.** Many independent trials in one pipeline (one public key per trial via
   ``.PerKey``, ``max_keys_per_unit=1``, fresh unit ids per trial), outcome frequencies, and
   a Clopper-Pearson lower bound on the privacy loss of each outcome (Bonferroni over the
   events tested) that must stay at or below ε.

The audit adds the losses of every release the unit can reach: ``.PerKey`` keys and windows.
Their releases are paired between the neighbours by their scores (the runner does not say
which key or window an ``extract_output`` serves): identical ones match, the others by the
smallest distance, which must be unambiguous, so every key and window holds a background of
its own size. Under ``replace`` a unit may also move to another key or window
(``test_replace_a_unit_that_moves_to_another_key_or_window``).

The neighbouring datasets are built by an adversarial privacy unit that floods records,
arrives with its id as the integer 42 in some files and batches and as the text "42" in
others (Parquet, Avro, CSV and JSON lines; several files and batches), names every public key
and, in the windowed case, several windows. Background units stay within every bound, so
whatever rule bounding uses to choose rows, only the adversary's rows are chosen from.

The harness is tested: it must detect a bounding step that keeps every row, and a unit
identity that depends on the batch (``test_the_audit_detects_*``).

Every pipeline runs in-process (Beam's FnApiRunner), so the wrappers installed here see the
combiners' calls.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampedValue
from stats_helpers import clopper_pearson

import beam_dp.batching.bounding
import beam_dp.batching.hashing
import beam_dp.mechanisms.cdf
import beam_dp.mechanisms.noise
import beam_dp.mechanisms.partition_selection
import beam_dp.mechanisms.per_key
import beam_dp.mechanisms.selection
from beam_dp.batching import CANDIDATE, ContributionBounds
from beam_dp.beam.key_selection import KeySelection, SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMax, PrivateMedian, PrivateMin, PrivateQuantiles
from beam_dp.beam.selection import BestPrice, Election, ExponentialSelect, TopCandidates
from beam_dp.io import ReadExport
from beam_dp.mechanisms import selection_probabilities
from beam_dp.mechanisms.cdf import DEFAULT_COUNT_SHARE, ks_pmf_bruteforce
from beam_dp.mechanisms.partition_selection import release_probability
from beam_dp.release import Release

# --------------------------------------------------------------------------- public setup

SITES = ("s0", "s1", "s2", "s3", "s4")
PARTIES = ("A", "B", "C")
PRICES = (0.5, 1.0, 1.5, 2.0, 2.5)
KEYS = ("de", "fr", "jp")
KEY_SIZES = {"de": 24, "fr": 14, "jp": 8}  # units per key: distinct, so keys are told apart
LOWER, UPPER, NUM_POINTS = 0.0, 100.0, 21
FORMATS = ("parquet", "avro", "csv", "jsonl")
COLUMNS = ["user", "site", "vote", "price", "value", "country"]
ADVERSARY = 42
SALT = 20240601  # the same in both neighbours: background bounding is identical
EPSILON = 1.0
KS_EPSILON, KS_DELTA = 1.0, 1e-3
TOLERANCE = 1e-9
WINDOW_SECONDS = 60
WINDOWS = 3

# --------------------------------------------------------------------------- capture


@dataclasses.dataclass
class Call:
    """One call of a sampler entry point, as the pipeline made it."""

    kind: str  # "select", "top_k" or "select_keys"
    name: str | None  # the release the call belongs to (nearest spec's name)
    scores: list[Any]  # scores (select, top_k) or counts (select_keys)
    epsilon: float | Fraction
    sensitivity: float | Fraction = 1
    monotone: bool = False
    method: str = "permute_and_flip"
    k: int = 1
    labels: list[Any] | None = None  # select_keys: the label of each count
    delta: float = 0.0
    max_per_unit: int = 1  # select_keys: the enforced bound on labels per unit
    # The beam_dp modules between the sampler and the function Beam called (innermost
    # first): which stage of a release made the call (e.g. a bound choice, a coarse pass).
    modules: tuple[str, ...] = ()
    # Public parameters of other samplers (e.g. the CDF's normaliser and count share).
    extra: tuple[Any, ...] = ()

    def signature(self) -> tuple[Any, ...]:
        """The public parameters of the call (equal in both neighbours by construction)."""
        size = None if self.kind == "select_keys" else len(self.scores)
        return (
            self.kind,
            self.name,
            size,
            Fraction(self.epsilon),
            Fraction(self.sensitivity),
            self.monotone,
            self.method,
            self.k,
            self.delta,
            self.max_per_unit,
            self.extra,
        )

    def data(self) -> Any:
        if self.kind == "select_keys":
            assert self.labels is not None
            return dict(zip(self.labels, self.scores, strict=True))
        return list(self.scores)


@dataclasses.dataclass
class Group:
    """The sampler calls of one ``extract_output``: one release (per key and window)."""

    transform: str
    calls: list[Call] = dataclasses.field(default_factory=list)

    def signature(self) -> tuple[Any, ...]:
        return (self.transform, *(call.signature() for call in self.calls))

    def same_data(self, other: Group) -> bool:
        return all(a.data() == b.data() for a, b in zip(self.calls, other.calls, strict=True))


class Recorder:
    """Collects :class:`Group` s of one pipeline run (the in-process runner: one thread).

    A group is one call of a beam_dp function by Beam (a combiner's ``extract_output``, or a
    ``Map`` such as a bound choice or a release at a chosen bound). A call whose release has
    no spec name in reach (a bound choice) belongs to ``default``: the pipeline's only
    transform, when it runs one.
    """

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.default: str | None = None
        self._frame: Any = None
        self._busy = False

    def record(self, call: Call, extract_frame: Any, transform: str | None) -> None:
        transform = transform if transform is not None else self.default
        if extract_frame is None or transform is None:
            raise AssertionError(
                "audit harness: a sampler was called outside a beam_dp function run by Beam "
                "(or without a named spec); update the harness to the new call path"
            )
        if extract_frame is not self._frame:
            self._frame = extract_frame  # held: a new call can never reuse its identity
            self.groups.append(Group(transform))
        self.groups[-1].calls.append(call)


_RECORDER: Recorder | None = None
_FORCED_LABELS: frozenset[Any] = frozenset(SITES)


def _spec_name(obj: Any) -> str | None:
    for candidate in (obj, getattr(obj, "_spec", None)):
        name = getattr(candidate, "name", None)
        if isinstance(name, str) and name:
            return name
    return None


def _ours(frame: Any) -> bool:
    module = frame.f_globals.get("__name__", "")
    return bool(module == "beam_dp" or module.startswith("beam_dp."))


@dataclasses.dataclass
class Context:
    """Where a sampler was called from (found by walking up the stack)."""

    name: str | None  # the nearest spec's name
    extract: Any  # the frame of the release: innermost extract_output, else Beam's entry
    transform: str | None  # the release's spec name
    labels: list[Any] | None  # the nearest local 'labels' list
    modules: tuple[str, ...]  # beam_dp modules from the caller up to the entry, innermost first


def _context(depth: int = 2) -> Context:
    """The :class:`Context` of the sampler call ``depth`` frames up (2: a recorder's caller).

    The release frame is the innermost ``extract_output``; a sampler called elsewhere (a
    ``Map`` over a side input: a bound choice, a release at a chosen bound) belongs to the
    innermost beam_dp frame that Beam called, the entry of one Beam callback.
    """
    frame = sys._getframe(depth)
    name = extract = transform = labels = entry = None
    modules: list[str] = []
    while frame is not None:
        local = frame.f_locals
        ours = _ours(frame)
        if name is None and ours:  # (a test runner's frames have names of their own)
            for holder in ("self", "spec", "fn"):
                name = name or _spec_name(local.get(holder))
        if labels is None and isinstance(local.get("labels"), list):
            labels = local["labels"]
        if extract is None and frame.f_code.co_name == "extract_output":
            extract, transform = frame, _spec_name(local.get("self"))
        if ours and entry is None:
            modules.append(frame.f_globals["__name__"])
            if frame.f_back is None or not _ours(frame.f_back):
                entry = frame
        frame = frame.f_back
    if extract is None:
        extract, transform = entry, name
    return Context(name, extract, transform, labels, tuple(modules))


_ORIGINAL_SELECT = beam_dp.mechanisms.selection.select
_ORIGINAL_TOP_K = beam_dp.mechanisms.selection.top_k
_ORIGINAL_SELECT_KEYS = beam_dp.mechanisms.partition_selection.select_keys
_ORIGINAL_SELECT_PER_KEY = beam_dp.mechanisms.per_key.select_per_key
_ORIGINAL_BOUND_ROWS = beam_dp.batching.bounding.bound_rows
_ORIGINAL_RELEASE_KS_CDF = beam_dp.mechanisms.cdf.release_ks_cdf
_ORIGINAL_NOISY_SUM_AND_COUNT = beam_dp.mechanisms.noise.noisy_sum_and_count


def _as_list(scores: Any) -> list[Any]:
    values = scores.tolist() if isinstance(scores, np.ndarray) else list(scores)
    return [v if isinstance(v, (Fraction, float)) else int(v) for v in values]


def _recording_select(scores: Any, **options: Any) -> int:
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return int(_ORIGINAL_SELECT(scores, **options))
    recorder._busy = True
    try:
        _ORIGINAL_SELECT(scores, **options)  # its checks still run; its sample is discarded
        context = _context()
        values = _as_list(scores)
        recorder.record(
            Call(
                "select",
                context.name,
                values,
                options["epsilon"],
                options["sensitivity"],
                bool(options.get("monotonic", False)),
                options.get("method", "permute_and_flip"),
                modules=context.modules,
            ),
            context.extract,
            context.transform,
        )
        return len(values) // 2  # public: the same history in both neighbours
    finally:
        recorder._busy = False


def _recording_top_k(scores: Any, k: int, **options: Any) -> list[int]:
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return list(_ORIGINAL_TOP_K(scores, k, **options))
    recorder._busy = True
    try:
        _ORIGINAL_TOP_K(scores, k, **options)
        context = _context()
        recorder.record(
            Call(
                "top_k",
                context.name,
                _as_list(scores),
                options["epsilon"],
                options["sensitivity"],
                bool(options.get("monotonic", False)),
                options.get("method", "permute_and_flip"),
                k=int(k),
                modules=context.modules,
            ),
            context.extract,
            context.transform,
        )
        return list(range(int(k)))
    finally:
        recorder._busy = False


def _recording_select_per_key(scores: Any, counts: Any = None, **options: Any) -> Any:
    """Many keys' selections in one call (.PerKey): one release group per key."""
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return _ORIGINAL_SELECT_PER_KEY(scores, counts, **options)
    recorder._busy = True
    try:
        _ORIGINAL_SELECT_PER_KEY(scores, counts, **options)  # its checks run; sample discarded
        context = _context()
        name = context.name
        if name is None:
            raise AssertionError("audit harness: select_per_key called without a named spec")
        if counts is None:
            rows = [_as_list(row) for row in np.asarray(scores)]
        else:
            flat = _as_list(np.asarray(scores).ravel())
            ends = np.cumsum(np.asarray(counts)).tolist()
            rows = [flat[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
        for row in rows:
            call = Call(
                "select",
                name,
                row,
                options["epsilon"],
                options["sensitivity"],
                bool(options.get("monotonic", False)),
                options.get("method", "permute_and_flip"),
                modules=context.modules,
            )
            recorder.groups.append(Group(name, [call]))
        recorder._frame = None  # the next extract_output starts its own group
        return np.array([len(row) // 2 for row in rows], dtype=np.int64)  # public history
    finally:
        recorder._busy = False


def _recording_select_keys(counts: Any, **options: Any) -> Any:
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return _ORIGINAL_SELECT_KEYS(counts, **options)
    recorder._busy = True
    try:
        _ORIGINAL_SELECT_KEYS(counts, **options)
        context = _context()
        labels = context.labels
        values = [int(c) for c in np.asarray(counts).ravel()]
        if labels is None or len(labels) != len(values):
            raise AssertionError(
                "audit harness: cannot find the labels of the key-selection counts "
                "(a local 'labels' list in the caller); update the harness"
            )
        recorder.record(
            Call(
                "select_keys",
                context.name,
                values,
                options["epsilon"],
                1,
                True,
                "partition_selection",
                labels=list(labels),
                delta=float(options["delta"]),
                max_per_unit=int(options["max_keys_per_unit"]),
                modules=context.modules,
            ),
            context.extract,
            context.transform,
        )
        return np.array([label in _FORCED_LABELS for label in labels], dtype=bool)
    finally:
        recorder._busy = False


def _recording_release_ks_cdf(cumulative_counts: Any, **options: Any) -> Any:
    """The CDF's one release (a noisy count, then the KS sample): recorded, then drawn.

    Nothing later depends on the draw, so its real output is returned.
    """
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return _ORIGINAL_RELEASE_KS_CDF(cumulative_counts, **options)
    recorder._busy = True
    try:
        result = _ORIGINAL_RELEASE_KS_CDF(cumulative_counts, **options)  # its checks run
        if options.get("k") is None:
            raise AssertionError("audit harness: audit the CDF at a public k (k=None draws k)")
        context = _context()
        share = options.get("count_share")
        recorder.record(
            Call(
                "ks",
                context.name,
                [int(c) for c in np.asarray(cumulative_counts).ravel()],
                options["epsilon"],
                int(options.get("max_contributions", 1)) * int(options["k"]),
                k=int(options["k"]),
                modules=context.modules,
                extra=(
                    options.get("n_public"),
                    Fraction(DEFAULT_COUNT_SHARE if share is None else share),
                    int(options.get("max_contributions", 1)),
                    options.get("relation", "add_remove"),
                ),
            ),
            context.extract,
            context.transform,
        )
        return result
    finally:
        recorder._busy = False


def _recording_noisy_sum_and_count(centred_sum: int, count: int | None, **options: Any) -> Any:
    """The mean's noisy sums (an integer centred sum and, under add/remove, the count):
    recorded, then drawn. Nothing later depends on the draw, so its real output is returned.
    """
    recorder = _RECORDER
    if recorder is None or recorder._busy:
        return _ORIGINAL_NOISY_SUM_AND_COUNT(centred_sum, count, **options)
    recorder._busy = True
    try:
        result = _ORIGINAL_NOISY_SUM_AND_COUNT(centred_sum, count, **options)  # its checks run
        context = _context()
        recorder.record(
            Call(
                "noisy_sums",
                context.name,
                [int(centred_sum), 0 if count is None else int(count)],
                options["epsilon"],
                int(options["sum_sensitivity"]),
                method="laplace",
                modules=context.modules,
                extra=(
                    Fraction(options["sum_share"]),
                    int(options["count_sensitivity"]),
                    count is None,
                ),
            ),
            context.extract,
            context.transform,
        )
        return result
    finally:
        recorder._busy = False


def _patch_everywhere(
    monkeypatch: pytest.MonkeyPatch, original: Any, replacement: Any, defining: str
) -> int:
    """Replace ``original`` in every loaded beam_dp module but its own (where it is called)."""
    hits = 0
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == defining:
            continue
        if module_name != "beam_dp" and not module_name.startswith("beam_dp."):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attribute, replacement)
                hits += 1
    return hits


def install_recorders(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _patch_everywhere(
        monkeypatch, _ORIGINAL_SELECT, _recording_select, "beam_dp.mechanisms.selection"
    ), "no beam_dp module calls beam_dp.mechanisms.select: update the harness"
    assert _patch_everywhere(
        monkeypatch, _ORIGINAL_TOP_K, _recording_top_k, "beam_dp.mechanisms.selection"
    ), "no beam_dp module calls beam_dp.mechanisms.top_k: update the harness"
    assert _patch_everywhere(
        monkeypatch,
        _ORIGINAL_SELECT_PER_KEY,
        _recording_select_per_key,
        "beam_dp.mechanisms.per_key",
    ), "no beam_dp module calls select_per_key: update the harness"
    assert _patch_everywhere(
        monkeypatch,
        _ORIGINAL_SELECT_KEYS,
        _recording_select_keys,
        "beam_dp.mechanisms.partition_selection",
    ), "no beam_dp module calls select_keys: update the harness"
    assert _patch_everywhere(
        monkeypatch,
        _ORIGINAL_RELEASE_KS_CDF,
        _recording_release_ks_cdf,
        "beam_dp.mechanisms.cdf.release",
    ), "no beam_dp module calls release_ks_cdf: update the harness"
    assert _patch_everywhere(
        monkeypatch,
        _ORIGINAL_NOISY_SUM_AND_COUNT,
        _recording_noisy_sum_and_count,
        "beam_dp.mechanisms.noise",
    ), "no beam_dp module calls noisy_sum_and_count: update the harness"


# --------------------------------------------------------------------------- the audit


def _log_loss(p: np.ndarray, q: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        gaps = np.where(p == q, 0.0, np.abs(np.log(p) - np.log(q)))
    return float(np.max(gaps))


def _pmf(scores: Sequence[Any], call: Call, epsilon: float | Fraction) -> np.ndarray:
    return selection_probabilities(
        list(scores),
        epsilon=epsilon,
        sensitivity=call.sensitivity,
        monotonic=call.monotone,
        method=call.method,  # type: ignore[arg-type]
    )


def _sensitivity_violations(a: Call, b: Call) -> list[str]:
    """Diagnostics shown with a failure: scores that moved more than the declared Δ.

    Not a failure by itself: the recursive quantile split under ``replace`` lets a deeper
    node's scores move by twice its add/remove Δ and runs it at half the level's ε.
    """
    if a.kind == "ks":
        return []  # the KS scores are not the recorded counts
    if a.kind == "noisy_sums":
        problems = []
        if abs(b.scores[0] - a.scores[0]) > a.sensitivity:
            problems.append(f"{a.name}: the centred sum moved by more than its sensitivity")
        if abs(b.scores[1] - a.scores[1]) > a.extra[1]:
            problems.append(f"{a.name}: the count moved by more than its sensitivity")
        return problems
    if a.kind == "select_keys":
        counts_a, counts_b = a.data(), b.data()
        labels = set(counts_a) | set(counts_b)
        moved = {label: counts_b.get(label, 0) - counts_a.get(label, 0) for label in labels}
        problems = []
        if any(abs(v) > 1 for v in moved.values()):
            problems.append(f"{a.name}: a label's distinct-unit count moved by more than 1")
        if sum(abs(v) for v in moved.values()) > a.max_per_unit:
            problems.append(
                f"{a.name}: the unit changed {sum(abs(v) for v in moved.values())} label counts "
                f"(bound {a.max_per_unit})"
            )
        return problems
    diff = [Fraction(y) - Fraction(x) for x, y in zip(a.scores, b.scores, strict=True)]
    problems = []
    largest = max(abs(d) for d in diff)
    if largest > Fraction(a.sensitivity):
        problems.append(f"{a.name}: a score moved by {float(largest):g} > Δ = {a.sensitivity}")
    if a.monotone and any(d > 0 for d in diff) and any(d < 0 for d in diff):
        problems.append(f"{a.name}: declared monotone, but scores moved both ways")
    return problems


def _ks_pmf(counts: list[int], call: Call, epsilon: Fraction, normaliser: int) -> np.ndarray:
    _, _, c, relation = call.extra
    law = ks_pmf_bruteforce(
        counts,
        k=call.k,
        epsilon=epsilon,
        relation=relation,
        n_public=normaliser,
        max_contributions=c,
    )
    return np.array([law[z] for z in sorted(law)])


def ks_loss(a: Call, b: Call) -> float:
    """The CDF's loss: the noisy count's (exact discrete Laplace: ``ε_count |n - n'| / c``,
    attained by every output above both sizes) plus the KS sample's at each normaliser the
    count may release near the two sizes (its law given the released count, exactly)."""
    n_public, share, c, _ = a.extra
    epsilon = Fraction(a.epsilon)
    if n_public is None:  # the count is released on its share of epsilon
        count_epsilon = epsilon * share
        n_a, n_b = a.scores[-1], b.scores[-1]
        count = float(count_epsilon) * abs(n_a - n_b) / c
        normalisers = sorted({n_a, n_b, max(1, min(n_a, n_b) - c), max(n_a, n_b) + c})
        epsilon -= count_epsilon
    else:
        count, normalisers = 0.0, [int(n_public)]
    sample = max(
        _log_loss(_ks_pmf(a.scores, a, epsilon, n), _ks_pmf(b.scores, b, epsilon, n))
        for n in normalisers
    )
    return count + sample


def noisy_sums_loss(a: Call, b: Call) -> float:
    """The noisy sums' loss, exactly: discrete Laplace at scale ``b`` moved by ``d`` has
    ``max |log P(z) - log P'(z)| = |d| / b`` (attained by every output beyond both centres),
    for the sum at ``sum_share`` of epsilon and, when released, the count at the rest."""
    share, count_sensitivity, public_count = a.extra
    epsilon = Fraction(a.epsilon)
    sum_epsilon = epsilon * share
    loss = sum_epsilon * abs(b.scores[0] - a.scores[0]) / Fraction(a.sensitivity)
    if not public_count:
        loss += (epsilon - sum_epsilon) * abs(b.scores[1] - a.scores[1]) / count_sensitivity
    return float(loss)


def call_loss(a: Call, b: Call) -> tuple[float, float]:
    """(pure privacy loss, probability mass outside it) of one call between neighbours."""
    if a.kind == "noisy_sums":
        return noisy_sums_loss(a, b), 0.0
    if a.kind == "ks":
        return ks_loss(a, b), 0.0
    if a.kind == "select":
        return _log_loss(_pmf(a.scores, a, a.epsilon), _pmf(b.scores, b, b.epsilon)), 0.0
    if a.kind == "top_k":
        remaining = list(range(len(a.scores)))
        total = 0.0
        per_round = Fraction(a.epsilon) / a.k
        for chosen in range(a.k):  # the forced history: 0, 1, ..., k-1
            p = _pmf([a.scores[i] for i in remaining], a, per_round)
            q = _pmf([b.scores[i] for i in remaining], b, per_round)
            total += _log_loss(p, q)
            remaining.remove(chosen)
        return total, 0.0
    counts_a, counts_b = a.data(), b.data()

    def probability(count: int) -> float:
        return release_probability(count, a.epsilon, a.delta, a.max_per_unit)

    up = down = 0.0
    for label in set(counts_a) & set(counts_b):
        p, q = probability(counts_a[label]), probability(counts_b[label])
        up += max(math.log(p / q), math.log((1 - p) / (1 - q)))
        down += max(math.log(q / p), math.log((1 - q) / (1 - p)))
    only_a = sum(probability(c) for label, c in counts_a.items() if label not in counts_b)
    only_b = sum(probability(c) for label, c in counts_b.items() if label not in counts_a)
    return max(up, down), max(only_a, only_b)


def _distance(a: Group, b: Group) -> float:
    if a.signature() != b.signature():
        return math.inf
    total = 0.0
    for x, y in zip(a.calls, b.calls, strict=True):
        if x.kind == "select_keys":
            dx, dy = x.data(), y.data()
            total += sum(abs(dx.get(label, 0) - dy.get(label, 0)) for label in set(dx) | set(dy))
        elif x.kind == "noisy_sums":  # in units of one unit's reach: the count tells keys apart
            total += abs(x.scores[0] - y.scores[0]) / float(x.sensitivity)
            total += abs(x.scores[1] - y.scores[1])
        else:
            total += sum(abs(float(u) - float(v)) for u, v in zip(x.scores, y.scores, strict=True))
    return total


def pair_groups(groups_a: list[Group], groups_b: list[Group]) -> list[tuple[Group, Group]]:
    """Match each release of one neighbour to the same key's and window's in the other.

    Releases whose scores are identical match each other (the unit did not reach them);
    the rest are matched by the smallest total distance between their scores (keys and
    windows hold backgrounds of very different sizes). The number of releases must agree.
    """
    if len(groups_a) != len(groups_b):
        raise AssertionError(
            f"the neighbours released {len(groups_a)} and {len(groups_b)} times: which keys "
            "or windows release depends on one unit"
        )
    left, right = list(groups_a), list(groups_b)
    for group in list(left):
        for other in right:
            if group.signature() == other.signature() and group.same_data(other):
                left.remove(group)
                right.remove(other)
                break
    if not left:
        return []
    if len(left) <= 7:
        best = min(
            itertools.permutations(range(len(right))),
            key=lambda order: sum(_distance(left[i], right[j]) for i, j in enumerate(order)),
        )
        pairs = [(left[i], right[j]) for i, j in enumerate(best)]
    else:
        pairs = []
        for group in left:
            other = min(right, key=lambda g: _distance(group, g))
            right.remove(other)
            pairs.append((group, other))
    for a, b in pairs:
        if a.signature() != b.signature():
            raise AssertionError(
                f"{a.transform}: releases with different public parameters cannot be paired"
            )
        # The pairing must be unambiguous: each changed release is nearer to its partner than
        # to any other release of the other neighbour (backgrounds of different sizes).
        near = _distance(a, b)
        if any(_distance(a, g) <= near for g in groups_b if g is not b) or any(
            _distance(g, b) <= near for g in groups_a if g is not a
        ):
            raise AssertionError(
                f"{a.transform}: cannot tell which key or window a changed release belongs to "
                "(the audit data must give every key and window a distinct background)"
            )
    return pairs


@dataclasses.dataclass
class AuditResult:
    loss: float
    delta: float
    changed_releases: int
    violations: list[str]


def audit(
    groups_a: list[Group], groups_b: list[Group], *, epsilon: float, delta: float = 0.0
) -> AuditResult:
    """The privacy loss between two neighbours' runs of one transform; asserts it is ≤ ε.

    The loss adds up over the rounds of each release and over every release (key, window)
    the unit changed: their outputs are independent given the forced history.
    """
    loss = mass = 0.0
    violations: list[str] = []
    pairs = pair_groups(groups_a, groups_b)
    for a, b in pairs:
        for x, y in zip(a.calls, b.calls, strict=True):
            pure, extra = call_loss(x, y)
            loss += pure
            mass += extra
            violations += _sensitivity_violations(x, y)
    result = AuditResult(loss, mass, len(pairs), violations)
    assert loss <= epsilon + TOLERANCE, (
        f"privacy loss {loss:.4f} > ε = {epsilon} over {len(pairs)} changed release(s); "
        f"{violations}"
    )
    assert mass <= delta + TOLERANCE, f"δ part {mass:.3g} > δ = {delta}; {violations}"
    return result


# --------------------------------------------------------------------------- data


def _background(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Units within every bound: one key, one vote, one or two rows, distinct sites."""
    rows: list[dict[str, Any]] = []
    unit = 1000
    for key in KEYS:
        for _ in range(KEY_SIZES[key]):
            unit += 1
            count = 1 + unit % 2
            sites = rng.choice(
                [*SITES, "zz"], size=count, replace=False, p=[0.3, 0.2, 0.15, 0.1, 0.15, 0.1]
            )
            vote = str(rng.choice(PARTIES, p=[0.45, 0.35, 0.2]))
            for site in sites:
                rows.append(
                    {
                        "user": unit,
                        "site": str(site),
                        "vote": vote,
                        "price": float(rng.choice([0.25, 0.75, 1.25, 1.75, 2.25, 2.75])),
                        "value": float(rng.integers(0, 201)) / 2,
                        "country": key,
                    }
                )
    return rows


def _flood() -> list[dict[str, Any]]:
    """The adversary's records in the neighbour: 64 rows over every key, candidate and type."""
    rows: list[dict[str, Any]] = []
    for i in range(64):
        site = "s3" if i % 4 else (f"adv-{i}" if i % 8 else "s1")
        value = math.nan if i == 5 else (100.0 if i % 3 else 85.0)
        rows.append(
            {
                "user": ADVERSARY if i % 2 else str(ADVERSARY),  # the same person, two types
                "site": site,
                "vote": "B",
                "price": 2.75 if i % 5 else 0.25,
                "value": value,
                "country": KEYS[i % len(KEYS)],
            }
        )
    return rows


def _quiet_adversary() -> list[dict[str, Any]]:
    """The adversary's records in the other neighbour under ``replace``: two ordinary rows in
    every key. The flood names every key too, and bounding keeps a unit's keys by a hash of
    unit, key and salt, so both neighbours keep the adversary in the same keys: under
    ``replace`` a unit's records change within its keys (``docs/privacy_rules.md``; a unit
    that moves to another key is two add/remove steps, audited below). With the two rows in
    "de" alone, a ``.PerKey`` case whose flood kept another key compared a move against one ε.
    """
    return [
        {
            "user": ADVERSARY,
            "site": site,
            "vote": "A",
            "price": price,
            "value": value,
            "country": country,
        }
        for country in KEYS
        for site, price, value in (("s0", 0.75, 20.0), ("s2", 0.25, 30.0))
    ]


def write_dataset(
    directory: Path, rows: list[dict[str, Any]], adversary: list[dict[str, Any]]
) -> None:
    """Background rows spread over four formats (each unit in one file); the adversary's rows
    in every file, with its id as an integer where the format allows and as text elsewhere,
    plus one Parquet file where the id column is text."""
    directory.mkdir(parents=True)
    parts: list[list[dict[str, Any]]] = [[] for _ in FORMATS]
    for row in rows:
        parts[int(row["user"]) % len(FORMATS)].append(row)
    for i, row in enumerate(adversary):
        parts[i % len(FORMATS)].append(row)
    for part in parts:  # interleave: the adversary's rows land in several batches
        part.sort(key=lambda r: hash((str(r["user"]), r["site"], r["value"])) % 1009)
    for fmt, part in zip(FORMATS, parts, strict=True):
        path = directory / f"part-0.{fmt}"
        if fmt == "parquet":
            ints = [dict(r, user=int(r["user"])) for r in part]
            pq.write_table(pa.Table.from_pylist(ints), path, row_group_size=8)
            texts = [dict(r, user=str(r["user"])) for r in adversary[::5]]
            if texts:  # one more file whose unit column is text: "42"
                pq.write_table(pa.Table.from_pylist(texts), directory / "part-1.parquet")
        elif fmt == "avro":
            schema = {
                "type": "record",
                "name": "Row",
                "fields": [
                    {"name": "user", "type": ["long", "string"]},
                    {"name": "site", "type": "string"},
                    {"name": "vote", "type": "string"},
                    {"name": "price", "type": "double"},
                    {"name": "value", "type": "double"},
                    {"name": "country", "type": "string"},
                ],
            }
            with path.open("wb") as handle:
                fastavro.writer(handle, schema, part)
        elif fmt == "csv":
            lines = [",".join(COLUMNS)]
            lines += [",".join(str(r[c]) for c in COLUMNS) for r in part]
            path.write_text("\n".join(lines) + "\n")
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in part))


def windowed_batches(adversary: str | None) -> list[tuple[int, pa.Table]]:
    """(timestamp, batch) pairs: background in every window (windows of different sizes, so
    they are told apart); ``adversary`` is None, ``"quiet"`` (one row in the first window)
    or ``"flood"`` (ten rows as the integer id and ten as its text, in every window)."""
    rng = np.random.default_rng(7)
    out: list[tuple[int, pa.Table]] = []
    for w in range(WINDOWS):
        rows = []
        for u in range(12 + 6 * w):
            rows.append(
                {
                    "user": 5000 + 100 * w + u,
                    "site": str(rng.choice(SITES)),
                    "vote": str(rng.choice(PARTIES)),
                    "value": float(rng.integers(0, 101)),
                }
            )
        out.append((w * WINDOW_SECONDS + 1, pa.Table.from_pylist(rows)))
        if adversary == "quiet" and w == 0:
            quiet = [{"user": ADVERSARY, "site": "s0", "vote": "A", "value": 20.0}]
            out.append((w * WINDOW_SECONDS + 2, pa.Table.from_pylist(quiet)))
        if adversary == "flood":
            flood = [{"user": ADVERSARY, "site": "s3", "vote": "B", "value": 100.0}] * 10
            out.append((w * WINDOW_SECONDS + 2, pa.Table.from_pylist(flood)))
            text = [{"user": str(ADVERSARY), "site": "s3", "vote": "B", "value": 100.0}] * 10
            out.append((w * WINDOW_SECONDS + 3, pa.Table.from_pylist(text)))
    return out


# --------------------------------------------------------------------------- transforms


class RowsPerCandidate(beam.CombineFn):  # type: ignore[misc]
    """A user's score for ExponentialSelect: rows per candidate (Δ = 2 with two rows per unit)."""

    def create_accumulator(self) -> np.ndarray:
        return np.zeros(len(SITES), dtype=np.int64)

    def add_input(self, accumulator: np.ndarray, batch: dict[str, np.ndarray]) -> np.ndarray:
        accumulator += np.bincount(batch[CANDIDATE], minlength=len(SITES))
        return accumulator

    def merge_accumulators(self, accumulators: Any) -> np.ndarray:
        first, *rest = accumulators
        for other in rest:
            first += other
        return first

    def extract_output(self, accumulator: np.ndarray) -> list[int]:
        return [int(v) for v in accumulator]


@dataclasses.dataclass(frozen=True)
class Case:
    """One transform to audit: how to build it, what it may spend, on which relations."""

    name: str
    build: Callable[[str], beam.PTransform]
    relations: tuple[str, ...] = ("add_remove", "replace")
    epsilon: float = EPSILON
    delta: float = 0.0
    windowed: bool = False


def _common(name: str, relation: str) -> dict[str, Any]:
    return {
        "name": name,
        "relation": relation,
        "salt": SALT,
        "on_bad_record": "skip",
        "unit_column": "user",
    }


def _per_key(m: int = 1) -> dict[str, Any]:
    return {"key_column": "country", "keys": list(KEYS), "max_keys_per_unit": m}


def _quantile(name: str, relation: str) -> dict[str, Any]:
    return {
        **_common(name, relation),
        "lower": LOWER,
        "upper": UPPER,
        "num_points": NUM_POINTS,
        "value_column": "value",
        "max_contributions": 2,
        "epsilon": EPSILON,
    }


def _cases() -> list[Case]:
    c = _common
    return [
        Case(
            "top",
            lambda r: TopCandidates.Globally(
                candidate_column="site", candidates=list(SITES), epsilon=EPSILON, **c("top", r)
            ),
        ),
        Case(
            "top2_em",
            lambda r: TopCandidates.Globally(
                candidate_column="site",
                candidates=list(SITES),
                epsilon=EPSILON,
                k=2,
                method="exponential",
                max_candidates_per_unit=2,
                **c("top2_em", r),
            ),
        ),
        Case(
            "top_per_key",
            lambda r: TopCandidates.PerKey(
                candidate_column="site",
                candidates=list(SITES),
                epsilon=EPSILON,
                **_per_key(1),
                **c("top_per_key", r),
            ),
        ),
        Case(
            "top_key_selection",
            lambda r: TopCandidates.Globally(
                candidate_column="site",
                candidates=None,
                epsilon=EPSILON,
                k=2,
                key_selection=KeySelection(
                    KS_EPSILON, KS_DELTA, max_candidates_per_unit=2, name="top_key_selection_labels"
                ),
                **c("top_key_selection", r),
            ),
            relations=("add_remove",),
            epsilon=EPSILON + KS_EPSILON,
            delta=KS_DELTA,
        ),
        Case(
            "select_candidates",
            lambda r: SelectCandidates.Globally(
                candidate_column="site",
                unit_column="user",
                epsilon=KS_EPSILON,
                delta=KS_DELTA,
                max_candidates_per_unit=2,
                name="select_candidates",
                salt=SALT,
                on_bad_record="skip",
            ),
            relations=("add_remove",),
            epsilon=KS_EPSILON,
            delta=KS_DELTA,
        ),
        Case(
            "price",
            lambda r: BestPrice.Globally(
                value_column="price", prices=list(PRICES), epsilon=EPSILON, **c("price", r)
            ),
        ),
        Case(
            "price_per_key_m2",
            lambda r: BestPrice.PerKey(
                value_column="price",
                prices=list(PRICES),
                epsilon=EPSILON,
                **_per_key(2),
                **c("price_per_key_m2", r),
            ),
        ),
        Case(
            "vote",
            lambda r: Election.Globally(
                candidate_column="vote", candidates=list(PARTIES), epsilon=EPSILON, **c("vote", r)
            ),
        ),
        Case(
            "vote_per_key",
            lambda r: Election.PerKey(
                candidate_column="vote",
                candidates=list(PARTIES),
                epsilon=EPSILON,
                **_per_key(1),
                **c("vote_per_key", r),
            ),
        ),
        Case(
            "margin",
            lambda r: Election.Globally(
                candidate_column="vote",
                candidates=["A", "B"],
                score="margin",
                epsilon=EPSILON,
                method="exponential",
                **c("margin", r),
            ),
        ),
        Case(
            "custom",
            lambda r: ExponentialSelect.Globally(
                RowsPerCandidate(),
                candidates=list(SITES),
                candidate_column="site",
                epsilon=EPSILON,
                sensitivity=2,
                monotone=r == "add_remove",
                bounds=ContributionBounds(max_contributions_per_unit=2),
                **c("custom", r),
            ),
        ),
        Case(
            "custom_per_key",
            lambda r: ExponentialSelect.PerKey(
                RowsPerCandidate(),
                candidates=list(SITES),
                candidate_column="site",
                epsilon=EPSILON,
                sensitivity=2,
                monotone=r == "add_remove",
                bounds=ContributionBounds(max_contributions_per_unit=2),
                **_per_key(1),
                **c("custom_per_key", r),
            ),
        ),
        Case(
            "quartiles",
            lambda r: PrivateQuantiles.Globally(
                [0.25, 0.5, 0.75], split="recursive", **_quantile("quartiles", r)
            ),
        ),
        Case(
            "quantiles_per_key",
            lambda r: PrivateQuantiles.PerKey(
                [0.2, 0.8], split="independent", **_per_key(1), **_quantile("quantiles_per_key", r)
            ),
        ),
        Case("median", lambda r: PrivateMedian.Globally(**_quantile("median", r))),
        Case(
            "median_refined",  # coarse-to-fine: two passes, the second on the first's cells
            lambda r: PrivateMedian.Globally(
                refine=True, refine_points=9, **_quantile("median_refined", r)
            ),
        ),
        Case(
            "median_per_key_m2",
            lambda r: PrivateMedian.PerKey(**_per_key(2), **_quantile("median_per_key_m2", r)),
        ),
        Case("min", lambda r: PrivateMin.Globally(tail=0.1, **_quantile("min", r))),
        Case(
            "max_per_key",
            lambda r: PrivateMax.PerKey(tail=0.1, **_per_key(1), **_quantile("max_per_key", r)),
        ),
        Case(
            "mean",
            lambda r: PrivateMean.Globally(
                **_quantile("mean", r), **({"n": MEAN_N} if r == "replace" else {})
            ),
        ),
        Case(
            "mean_selection",  # the grid selection, reachable with estimator="selection"
            lambda r: PrivateMean.Globally(
                estimator="selection",
                **_quantile("mean_selection", r),
                **({"n": MEAN_N} if r == "replace" else {}),
            ),
        ),
        Case(
            "mean_per_key",
            lambda r: PrivateMean.PerKey(**_per_key(1), **_quantile("mean_per_key", r)),
            relations=("add_remove",),
        ),
        # Windows: a unit in every window; max_windows_per_unit bounds it (issue 8).
        Case(
            "windowed_top",
            lambda r: TopCandidates.Globally(
                candidate_column="site",
                candidates=list(SITES),
                epsilon=EPSILON,
                max_windows_per_unit=1,
                **c("windowed_top", r),
            ),
            windowed=True,
        ),
        Case(
            "windowed_median",
            lambda r: PrivateMedian.Globally(
                max_windows_per_unit=1, **_quantile("windowed_median", r)
            ),
            windowed=True,
        ),
    ]


# The public number of values of the replace-relation mean: every unit keeps min(rows, 2)
# values (background units have 1 or 2 rows; the adversary keeps 2 in both neighbours).
_BACKGROUND = _background(np.random.default_rng(2024))
MEAN_N = (
    sum(
        min(2, sum(1 for r in _BACKGROUND if r["user"] == u))
        for u in {r["user"] for r in _BACKGROUND}
    )
    + 2
)
CASES = _cases()


# --------------------------------------------------------------------------- running


_RELEASES: list[Release] = []


class _Collect(beam.DoFn):  # type: ignore[misc]
    def process(self, release: Release) -> None:
        _RELEASES.append(release)


def _timestamped(element: tuple[int, pa.Table]) -> TimestampedValue:
    return TimestampedValue(element[1], element[0])


@dataclasses.dataclass
class Run:
    """One neighbour's pipeline: the sampler calls and releases of each transform."""

    groups: dict[str, list[Group]]
    releases: dict[str, list[Release]]
    errors: dict[str, str]


def run_cases(
    cases: Sequence[Case],
    relation: str,
    data: Path | None,
    windowed: list[tuple[int, pa.Table]] | None,
    memory: list[pa.Table] | None = None,
) -> Run:
    """Run ``cases`` in one pipeline (each alone, to tell which fails, if the pipeline does).

    The recorders must be installed (:func:`install_recorders`).
    """
    global _RECORDER
    errors: dict[str, str] = {}
    built: list[tuple[Case, beam.PTransform]] = []
    for case in cases:
        try:
            built.append((case, case.build(relation)))
        except Exception as error:  # construction refused: reported per transform
            errors[case.name] = f"{type(error).__name__}: {error}"

    def execute(items: list[tuple[Case, beam.PTransform]]) -> None:
        assert _RECORDER is not None
        _RECORDER.default = items[0][0].name if len(items) == 1 else None
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            sources: dict[bool, Any] = {}
            if data is not None:
                reads = [
                    pipeline
                    | f"Read_{fmt}"
                    >> ReadExport(
                        str(data / f"part-*.{fmt}"), columns=COLUMNS, input_format=fmt, batch_rows=7
                    )
                    for fmt in FORMATS
                ]
                sources[False] = tuple(reads) | "AllFormats" >> beam.Flatten()
            if memory is not None:
                sources[False] = pipeline | "Batches" >> beam.Create(memory, reshuffle=False)
            if windowed is not None:
                sources[True] = (
                    pipeline
                    | "Timed" >> beam.Create(windowed, reshuffle=False)
                    | "Stamp" >> beam.Map(_timestamped)
                    | "Window" >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
                )
            for case, transform in items:
                _ = (
                    sources[case.windowed]
                    | case.name >> transform
                    | f"Collect_{case.name}" >> beam.ParDo(_Collect())
                )

    groups: dict[str, list[Group]] = {case.name: [] for case in cases}
    releases: dict[str, list[Release]] = {case.name: [] for case in cases}
    batches = [built] if built else []
    try:
        for attempt in (0, 1):
            _RECORDER = Recorder()
            _RELEASES.clear()
            failed = False
            for items in batches:
                try:
                    execute(items)
                except Exception as error:
                    if attempt == 0:
                        failed = True
                        break
                    errors[items[0][0].name] = f"pipeline failed: {type(error).__name__}: {error}"
            if not failed:
                break
            batches = [[item] for item in built]  # one pipeline per transform, to attribute
        for group in _RECORDER.groups:
            groups.setdefault(group.transform, []).append(group)
        for release in _RELEASES:
            releases.setdefault(release.ledger.name, []).append(release)
    finally:
        _RECORDER = None
    return Run(groups, releases, errors)


def _transform_of(case: Case) -> list[str]:
    """Release names of a case (key selection also releases its label set)."""
    if case.name == "top_key_selection":
        return ["top_key_selection", "top_key_selection_labels"]
    return [case.name]


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Run, Run]]]:
    """Both relations: (run on D, run on D') for every case, two pipelines per relation."""
    base = tmp_path_factory.mktemp("audit")
    out: dict[str, tuple[Run, Run]] = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        install_recorders(monkeypatch)
        for relation in ("add_remove", "replace"):
            cases = [case for case in CASES if relation in case.relations]
            quiet = _quiet_adversary() if relation == "replace" else []
            write_dataset(base / relation / "d", _BACKGROUND, quiet)
            write_dataset(base / relation / "d_prime", _BACKGROUND, _flood())
            quiet_windows = windowed_batches("quiet" if relation == "replace" else None)
            run_d = run_cases(cases, relation, base / relation / "d", quiet_windows)
            run_dp = run_cases(
                cases, relation, base / relation / "d_prime", windowed_batches("flood")
            )
            out[relation] = (run_d, run_dp)
    yield out


def _audit_case(case: Case, run_d: Run, run_dp: Run, *, steps: int = 1) -> AuditResult:
    for run, label in ((run_d, "D"), (run_dp, "D'")):
        if case.name in run.errors:
            raise AssertionError(f"{case.name} on {label}: {run.errors[case.name]}")
    counts_d = {n: len(run_d.releases.get(n, [])) for n in _transform_of(case)}
    counts_dp = {n: len(run_dp.releases.get(n, [])) for n in _transform_of(case)}
    assert counts_d == counts_dp, f"releases per name differ: {counts_d} vs {counts_dp}"
    assert all(counts_d.values()), f"{case.name}: no release"
    names = _transform_of(case)
    groups_d = [g for n in names for g in run_d.groups.get(n, [])]
    groups_dp = [g for n in names for g in run_dp.groups.get(n, [])]
    assert groups_d, f"{case.name}: no sampler call was captured"
    return audit(groups_d, groups_dp, epsilon=steps * case.epsilon, delta=steps * case.delta)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("relation", "name"),
    [(relation, case.name) for case in CASES for relation in case.relations],
)
def test_end_to_end_privacy_loss_is_at_most_epsilon(
    neighbours: dict[str, tuple[Run, Run]], relation: str, name: str
) -> None:
    case = next(case for case in CASES if case.name == name)
    run_d, run_dp = neighbours[relation]
    result = _audit_case(case, run_d, run_dp)
    # The flood reached the release: the audit compared something.
    assert result.changed_releases >= 1


# ------------------------------------------------------------- replace: a unit that moves


def _moving_batches(key: str) -> list[pa.Table]:
    """Two keys of different sizes, many low and a few high willingness-to-pay values; the
    adversary (one high value) is in ``key``. Under ``replace`` the neighbour moves it."""
    rows: list[dict[str, Any]] = []
    user = 1000
    for country, size in (("de", 40), ("fr", 70)):
        for i in range(size + 3):
            user += 1
            price, value = (0.6, 50.0) if i < size else (3.0, 95.0)
            rows.append({"user": user, "price": price, "value": value, "country": country})
    rows.append({"user": ADVERSARY, "price": 3.0, "value": 100.0, "country": key})
    return [pa.Table.from_pylist(rows)]


def _moving_windows(window_index: int) -> list[tuple[int, pa.Table]]:
    """The same in two windows (of different sizes); the adversary in ``window_index``."""
    out = []
    user = 1000
    for w, size in enumerate((40, 70)):
        rows = []
        for i in range(size + 3):
            user += 1
            rows.append({"user": user, "price": 0.6 if i < size else 3.0})
        if w == window_index:
            rows.append({"user": ADVERSARY, "price": 3.0})
        out.append((w * WINDOW_SECONDS + 1, pa.Table.from_pylist(rows)))
    return out


MOVING_CASES = [
    Case(
        "moving_price_per_key",
        lambda r: BestPrice.PerKey(
            value_column="price",
            prices=[0.5, 2.5],
            epsilon=EPSILON,
            method="exponential",
            **_per_key(1),
            **_common("moving_price_per_key", r),
        ),
    ),
    Case(
        "moving_quantiles_per_key",
        lambda r: PrivateQuantiles.PerKey(
            [0.1, 0.9],
            split="independent",
            **_per_key(1),
            **_quantile("moving_quantiles_per_key", r),
        ),
    ),
    Case(
        "moving_price_windowed",
        lambda r: BestPrice.Globally(
            value_column="price",
            prices=[0.5, 2.5],
            epsilon=EPSILON,
            method="exponential",
            max_windows_per_unit=1,
            **_common("moving_price_windowed", r),
        ),
        windowed=True,
    ),
]


@pytest.fixture(scope="module")
def moved() -> Iterator[tuple[Run, Run]]:
    """The unit's record is in "de" (first window) in one dataset, in "fr" (second window) in
    the other: two add/remove steps apart (removed from one key or window, added to another).

    Under ``replace``, keys and windows are *not* what a neighbour changes: a per-key or
    windowed release under ``replace`` treats each key's and window's number of records as
    public (the seeds' villages: a vote is switched, the voter stays in the village), so a
    neighbour changes a unit's values within its keys and windows. A unit that may move
    between keys or windows is protected under ``add_remove``, where a move is two steps.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        install_recorders(monkeypatch)
        run_d = run_cases(
            MOVING_CASES, "add_remove", None, _moving_windows(0), memory=_moving_batches("de")
        )
        run_dp = run_cases(
            MOVING_CASES, "add_remove", None, _moving_windows(1), memory=_moving_batches("fr")
        )
    yield run_d, run_dp


@pytest.mark.parametrize("name", [case.name for case in MOVING_CASES])
def test_a_unit_that_moves_to_another_key_or_window_costs_two_add_remove_steps(
    moved: tuple[Run, Run], name: str
) -> None:
    # With max_keys_per_unit = 1 (or max_windows_per_unit = 1) the unit leaves one key
    # (window) and enters another, so two releases change: together they cost at most 2ε
    # (group privacy over the two add/remove steps), and each one at most ε.
    case = next(case for case in MOVING_CASES if case.name == name)
    result = _audit_case(case, *moved, steps=2)
    assert result.changed_releases == 2


# --------------------------------------------------------------------------- test the test


def _memory_batches(with_flood: bool) -> list[pa.Table]:
    rng = np.random.default_rng(11)
    batches = []
    for b in range(6):  # every background unit in one batch, within every bound
        rows = [
            {
                "user": 100 * b + u,
                "site": str(rng.choice(SITES)),
                "vote": str(rng.choice(PARTIES)),
                "value": float(rng.integers(0, 101)),
            }
            for u in range(8)
        ]
        batches.append(pa.Table.from_pylist(rows))
    if with_flood:  # the adversary: one integer id over five batches
        for _ in range(5):
            rows = [{"user": ADVERSARY, "site": "s3", "vote": "B", "value": 100.0}] * 10
            batches.append(pa.Table.from_pylist(rows))
    return batches


_BROKEN_CASES = [
    case for case in CASES if case.name in ("top", "vote", "custom", "median", "quartiles")
]


def _unbounded(batch: Any, bounds: Any, salt: int) -> Any:
    return batch  # a broken bounding step: every row of every unit is kept


_BATCHES_SEEN = itertools.count(1)


def _per_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    """A broken identity: the same id hashes differently in every batch (every call)."""

    def hashed(values: Any) -> Any:
        result = original(values)
        with np.errstate(over="ignore"):
            nonce = np.uint64(next(_BATCHES_SEEN) * 0x9E3779B97F4A7C15 % 2**64)
        if isinstance(result, tuple):  # (hashes, bad rows)
            return (result[0] ^ nonce, *result[1:])
        return result ^ nonce

    return hashed


def _broken_audit(monkeypatch: pytest.MonkeyPatch, break_it: Callable[[], None]) -> list[str]:
    install_recorders(monkeypatch)
    break_it()
    run_d = run_cases(_BROKEN_CASES, "add_remove", None, None, memory=_memory_batches(False))
    run_dp = run_cases(_BROKEN_CASES, "add_remove", None, None, memory=_memory_batches(True))
    detected = []
    for case in _BROKEN_CASES:
        try:
            _audit_case(case, run_d, run_dp)
        except AssertionError:
            detected.append(case.name)
    return detected


def test_the_audit_passes_the_same_data_when_bounding_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The control for the two tests below: same data, same harness, the real bounding.
    assert _broken_audit(monkeypatch, lambda: None) == []


def test_the_audit_detects_a_bounding_step_that_keeps_every_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def break_it() -> None:
        hits = _patch_everywhere(
            monkeypatch, _ORIGINAL_BOUND_ROWS, _unbounded, "beam_dp.batching.bounding"
        )
        assert hits, "no beam_dp module calls bound_rows: update the harness"

    assert _broken_audit(monkeypatch, break_it) == [case.name for case in _BROKEN_CASES]


def test_the_audit_detects_an_identity_that_depends_on_the_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def break_it() -> None:
        hits = 0
        for name in ("stable_hash64", "canonical_hash64"):  # the unit hash, wherever looked up
            original = getattr(beam_dp.batching.hashing, name, None)
            if original is not None:
                hits += _patch_everywhere(
                    monkeypatch, original, _per_batch(original), "beam_dp.batching.hashing"
                )
        assert hits, "no beam_dp module calls the unit hash: update the harness"

    assert _broken_audit(monkeypatch, break_it) == [case.name for case in _BROKEN_CASES]


# --------------------------------------------------------------------------- sampling


SAMPLING_TRIALS = 2000
SAMPLING_ALPHA = 1e-6


def _trial_batches(trials: int, first_key: int, with_adversary: bool) -> list[pa.Table]:
    """Each trial (key) a fresh copy of D (5 votes A, 5 votes B) or D' (D and a unit that
    votes A 48 times, as the integer id in one batch and as its text in another)."""
    background_users, background_votes, background_keys = [], [], []
    for t in range(trials):
        for u in range(10):
            background_users.append(f"t{first_key + t}-u{u}")
            background_votes.append("A" if u < 5 else "B")
            background_keys.append(first_key + t)
    batches = [
        pa.table({"user": background_users, "vote": background_votes, "trial": background_keys})
    ]
    if with_adversary:
        ids = [1_000_000 + first_key + t for t in range(trials) for _ in range(24)]
        keys = [first_key + t for t in range(trials) for _ in range(24)]
        votes = ["A"] * len(ids)
        batches.append(pa.table({"user": ids, "vote": votes, "trial": keys}))
        batches.append(pa.table({"user": [str(i) for i in ids], "vote": votes, "trial": keys}))
    return batches


def sampled_loss(
    trials: int, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[float, dict[str, tuple[int, int]]]:
    """A (1 - SAMPLING_ALPHA) lower confidence bound on the privacy loss of Election.PerKey.

    Keys ``0 .. trials-1`` hold D, keys ``trials .. 2 trials - 1`` hold D'. Events: each
    candidate, in both directions (Bonferroni over the four).
    """
    batches = _trial_batches(trials, 0, False) + _trial_batches(trials, trials, True)
    out: list[Release] = []
    _RELEASES.clear()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            pipeline
            | beam.Create(batches, reshuffle=False)
            | Election.PerKey(
                candidate_column="vote",
                candidates=["A", "B"],
                unit_column="user",
                key_column="trial",
                keys=list(range(2 * trials)),
                max_keys_per_unit=1,
                epsilon=EPSILON,
                name="sampled_vote",
                salt=SALT,
            )
            | beam.ParDo(_Collect())
        )
    out = list(_RELEASES)
    _RELEASES.clear()
    assert len(out) == 2 * trials
    hits = {
        label: (
            sum(1 for r in out if r.key < trials and r.value == label),
            sum(1 for r in out if r.key >= trials and r.value == label),
        )
        for label in ("A", "B")
    }
    alpha = SAMPLING_ALPHA / 4  # two-sided intervals: each one-sided bound errs w.p. alpha/2
    bound = -math.inf
    for in_d, in_dp in hits.values():
        for x, y in ((in_d, in_dp), (in_dp, in_d)):
            lower_x, _ = clopper_pearson(x, trials, alpha)
            _, upper_y = clopper_pearson(y, trials, alpha)
            if lower_x > 0:
                bound = max(bound, math.log(lower_x / upper_y))
    return bound, hits


@pytest.mark.slow
def test_sampled_privacy_loss_of_many_trials_is_at_most_epsilon() -> None:
    # Correct bounding and identity: D' moves A by one vote, the loss of "B" is exactly ε.
    # A unit counted twice (42 and "42" as two units) moves it by 2: loss 2ε, detected.
    bound, hits = sampled_loss(SAMPLING_TRIALS)
    assert bound <= EPSILON, f"lower bound on the loss {bound:.3f} > ε; outcomes {hits}"


@pytest.mark.slow
def test_the_sampling_audit_detects_a_bounding_step_that_keeps_every_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _patch_everywhere(
        monkeypatch, _ORIGINAL_BOUND_ROWS, _unbounded, "beam_dp.batching.bounding"
    )
    bound, hits = sampled_loss(SAMPLING_TRIALS // 2)
    assert bound > EPSILON, f"the broken bounding went unnoticed: {bound:.3f}; {hits}"
