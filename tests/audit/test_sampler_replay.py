"""Grey-box replay of every production sampler call site: equal work on neighbours (issue 36).

``docs/timing.md``'s rule: a sampler's work may depend on public parameters, on values already
released and on randomness whose law depends only on those. Here each production call site
(the ``(module, name)`` pairs :func:`test_call_sites.sampler_call_sites` finds: a beam_dp
module that looks up a sampler entry point) is driven through its public transform on
neighbouring inputs, under both relations where the transform is defined:

* the call-site audit's adversarial pairs (:data:`test_call_sites.SITES_UNDER_AUDIT`: a
  flooding adversary under ``add_remove``, values moved from one end to the other under
  ``replace``), plus the pair of issue 36 (10 labels, then one person naming 1 000 new ones);
* Hypothesis-chosen neighbours (random background units and a random adversary).

Every call the pipeline makes at a call site is captured with its arguments (the audit's
recorders force each selection's outcome to a public one, so both neighbours run the same
history), then **replayed** on the original sampler with a seeded source that logs every
request for random bits at every depth (method, bound, size: one entry per pass of every
loop) and every read of random bytes, and with the work counters the sampler keeps (the KS
CDF's :class:`~beam_dp.mechanisms.cdf.ks.Work`). Replayed from the same seed, a call whose
work is a function of its public parameters and of bits already drawn gives the same log on
both neighbours; the test requires the multiset of (public parameters, log, counters) to be
equal on the two.

What the rule allows and the replay therefore fixes: the CDF under ``add_remove`` without a
public size releases a noisy count first, and its sampler's padding is sized from that
released count; the replay holds the released count equal in both neighbours (the count's
own noise is still drawn and logged), i.e. it compares the logs conditional on the released
value. The residual events of ``docs/timing.md`` (a draw needing more rounds than padded: at
most ``e**-32`` per selection, and the CDF's ``(1 - p)**rounds``) never occurred in these
replays; they would show as a failure. The joint split's pair node (``select_pair``: a call
site the audit does not enumerate, as its own test audits it) is replayed too: its draws run
:data:`~beam_dp.summaries.quantiles.joint.PAIR_ROUNDS` rounds of fixed-size requests.

:data:`REPLAYS` registers, for each call site, the cases that reach it; a call site the audit
finds without a registered replay fails :func:`test_every_sampler_call_site_has_its_replay`.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import types
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

import test_call_sites as cs
import test_end_to_end_audit as e2e
from random_logs import WorkLog

import beam_dp.mechanisms.cdf.release
import beam_dp.mechanisms.partition_selection
import beam_dp.mechanisms.selection
from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.quantiles import PrivateQuantiles
from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples_walk
from beam_dp.mechanisms.cdf.ks import Sampler
from beam_dp.summaries.quantiles import joint
from beam_dp.summaries.quantiles.joint import select_on_errors, select_pair
from beam_dp.summaries.quantiles.recursive import ENVELOPE_GRID

#: The sampler entry points of the call-site audit, and the joint split's pair sampler (its
#: call site is audited by its own test, but its work is replayed here).
REPLAY_ENTRIES = {
    **cs.SAMPLER_ENTRIES,
    "select_pair": select_pair,
    "select_on_errors": select_on_errors,
}

#: The production call sites, found before any recorder replaces a sampler's name.
CALL_SITES = frozenset(
    cs.sampler_call_sites(
        REPLAY_ENTRIES, cs.DEFINING_MODULES | {"beam_dp.summaries.quantiles.joint"}
    )
)

#: Call sites whose work ``docs/timing.md`` documents as data dependent and not yet padded:
#: their replay would check that the difference is still there (and fail once it is fixed,
#: so that the entry moves to the equal-work replays). None left: the joint pair node moved
#: when its sampler was padded (``docs/timing.md``, the joint pair).
KNOWN_UNEQUAL: dict[tuple[str, str], str] = {}

# ------------------------------------------------------------------------ the replay source


# ------------------------------------------------------------------------------ the capture


@dataclasses.dataclass(frozen=True)
class Captured:
    """One call a pipeline made at a call site, with copies of its arguments."""

    where: tuple[str, str]
    args: tuple[Any, ...]
    options: dict[str, Any]


def _capturing(
    calls: list[Captured], where: tuple[str, str], inner: Any
) -> Any:  # the wrapper of one call site's name
    def capture(*args: Any, **options: Any) -> Any:
        kept = {key: value for key, value in options.items() if key != "rng"}
        calls.append(Captured(where, copy.deepcopy(args), copy.deepcopy(kept)))
        return inner(*args, **options)

    return capture


@contextmanager
def capturing() -> Iterator[list[Captured]]:
    """The audit's recorders (each selection's outcome forced to a public one), and every call
    site's name wrapped to capture the calls made there."""
    with pytest.MonkeyPatch.context() as patch:
        e2e.install_recorders(patch)
        calls: list[Captured] = []
        for module_name, attribute in sorted(CALL_SITES):
            module = sys.modules[module_name]
            inner = getattr(module, attribute)
            patch.setattr(module, attribute, _capturing(calls, (module_name, attribute), inner))
        yield calls


@pytest.fixture
def capture() -> Iterator[list[Captured]]:
    with capturing() as calls:
        yield calls


def _public_shape(where: tuple[str, str], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The public size of a call's data argument: the candidates (select, top_k: and k), the
    keys' candidates (select_per_key), the grid (the CDF); nothing for key selection, whose
    number of labels is private."""
    attribute = where[1]
    data = args[0] if args else ()
    if attribute == "select":
        return (len(data),)
    if attribute == "top_k":
        return (len(data), *args[1:])
    if attribute == "select_per_key":
        counts = args[1] if len(args) > 1 else None
        if counts is None:
            return tuple(np.shape(data))
        return tuple(np.asarray(counts).tolist())
    if attribute == "release_ks_cdf":
        return (len(np.asarray(data)),)
    if attribute == "select_pair":  # (first, second, rate, source)
        return (len(data), repr(args[2]))
    if attribute == "select_on_errors":  # (errors, rate, source)
        return (len(data), repr(args[1]))
    return ()


@dataclasses.dataclass(frozen=True)
class Replayed:
    """A call's public parameters, its log of requests and its work counters."""

    where: tuple[str, str]
    public: str
    log: tuple[tuple[Any, ...], ...]
    counters: tuple[tuple[str, int], ...]


def replay(call: Captured, seed: int, released_count: int | None = None) -> Replayed:
    """Run ``call`` again on the original sampler with a :class:`WorkLog` of ``seed``.

    ``released_count``: the CDF's released count held at this public value (its noise still
    drawn), so that two neighbours are compared given the same released value.
    """
    source = WorkLog(seed)
    ks_work: list[Any] = []
    original_release_count = beam_dp.mechanisms.cdf.release.release_count

    def held_count(n: int, **options: Any) -> int:
        original_release_count(n, **options)  # the noise is drawn as in production
        assert released_count is not None
        return released_count

    class CountedSampler(Sampler):
        def draw(self, *args: Any, **options: Any) -> Any:
            path = super().draw(*args, **options)
            ks_work.append(self.work)
            return path

    with pytest.MonkeyPatch.context() as patch:
        if released_count is not None:
            patch.setattr(beam_dp.mechanisms.cdf.release, "release_count", held_count)
        patch.setattr(beam_dp.mechanisms.cdf.release, "Sampler", CountedSampler)
        if call.where[1] == "select_pair":  # the source is its fourth argument
            select_pair(*call.args[:3], source)
        elif call.where[1] == "select_on_errors":  # and the third here
            select_on_errors(*call.args[:2], source)
        else:
            REPLAY_ENTRIES[call.where[1]](*call.args, **call.options, rng=source)
    counters = Counter(entry[0] for entry in source.log)
    counters["bytes drawn"] = sum(n for kind, n, *_ in source.log if kind == "bytes")
    for work in ks_work:
        for field in dataclasses.fields(work):
            counters[f"ks {field.name}"] += int(getattr(work, field.name))
    public = repr((_public_shape(call.where, call.args[:3]), sorted(call.options.items())))
    return Replayed(call.where, public, tuple(source.log), tuple(sorted(counters.items())))


def _released_count(calls: list[Captured]) -> int | None:
    """A public value for the CDF's released count (the first neighbour's size), or None."""
    for call in calls:
        noisy = call.options.get("relation", "add_remove") == "add_remove"
        if call.where[1] == "release_ks_cdf" and noisy and call.options.get("n_public") is None:
            return int(np.asarray(call.args[0])[-1])
    return None


def replayed(calls: list[Captured], seed: int, released_count: int | None) -> list[Replayed]:
    """Every call replayed from ``seed``, in an order that depends on public values only."""
    out = [replay(call, seed, released_count) for call in calls]
    return sorted(out, key=repr)


def assert_equal_work(
    first: list[Captured], second: list[Captured], seeds: tuple[int, ...] = (0, 1)
) -> None:
    """The two neighbours' calls, replayed, give equal logs and counters (per call site but
    those of :data:`KNOWN_UNEQUAL`)."""
    held = _released_count(first)
    first = [call for call in first if call.where not in KNOWN_UNEQUAL]
    second = [call for call in second if call.where not in KNOWN_UNEQUAL]
    for seed in seeds:
        a, b = replayed(first, seed, held), replayed(second, seed, held)
        for where in sorted({r.where for r in a} | {r.where for r in b}):
            mine = [r for r in a if r.where == where]
            theirs = [r for r in b if r.where == where]
            assert len(mine) == len(theirs), f"{where}: {len(mine)} calls against {len(theirs)}"
            for x, y in zip(mine, theirs, strict=True):
                assert x.public == y.public, f"{where}: the calls' public parameters differ"
                assert x.counters == y.counters, f"{where}: work counters differ (seed {seed})"
                assert x.log == y.log, f"{where}: the requests for random bits differ"
                assert x.log, f"{where}: nothing drawn (the replay's source was not used)"


# ------------------------------------------------------------------------------ the cases


class ThousandLabels:
    """Issue 36's pair: 10 labels held by a few units each, then one more person naming
    1 000 new labels (key selection at ``max_candidates_per_unit = 1024``)."""

    def batches(self, relation: str, neighbour: str) -> list[pa.Table]:
        rows = [
            {"user": 1000 + unit, "label": f"l{label}"}
            for label in range(10)
            for unit in range(3 * label + 1)
        ]
        if neighbour == "d_prime":
            rows += [{"user": e2e.ADVERSARY, "label": f"new{i}"} for i in range(1_000)]
        return [pa.Table.from_pylist(rows)]


THOUSAND_LABELS = cs.Site(
    "thousand_labels",
    lambda r: SelectCandidates.Globally(
        candidate_column="label",
        unit_column="user",
        epsilon=cs.EPSILON,
        delta=cs.DELTA,
        max_candidates_per_unit=1024,
        name="thousand_labels",
        salt=e2e.SALT,
        on_bad_record="skip",
    ),
    (),
    relations=("add_remove",),
    delta=cs.DELTA,
    data=ThousandLabels(),  # type: ignore[arg-type]
)

JOINT_PAIR = cs.Site(
    "joint_pair",  # two quantiles: the default split is the joint one, one pair node
    lambda r: PrivateQuantiles.Globally(
        [0.25, 0.75], interval=False, **cs._values("joint_pair", r)
    ),
    (),
)

FINE_GRID_QUANTILES = cs.Site(
    "fine_grid_quantiles",  # a recursive split's single node, on a grid above ENVELOPE_GRID
    lambda r: PrivateQuantiles.Globally(
        [0.5],
        interval=False,
        split="recursive",
        **{**cs._values("fine_grid_quantiles", r), "num_points": ENVELOPE_GRID + 1},
    ),
    (),
)

CASES = {
    site.name: site
    for site in (*cs.SITES_UNDER_AUDIT, THOUSAND_LABELS, JOINT_PAIR, FINE_GRID_QUANTILES)
}

#: Every production call site and the cases whose pipelines reach it (each is checked to).
REPLAYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("beam_dp.summaries.selection", "select"): (
        "select_top",
        "select_price",
        "select_vote",
        "select_margin",
        "select_custom",
    ),
    ("beam_dp.summaries.selection", "top_k"): ("top_k_rounds", "key_selection"),
    ("beam_dp.summaries.selection", "select_per_key"): ("per_key_draw",),
    ("beam_dp.beam.key_selection", "select_keys"): (
        "key_selection",
        "auto_labels",
        "thousand_labels",
    ),
    ("beam_dp.summaries.quantiles.parameters", "select"): (
        "quantile_interval",
        "quantile_interval_ends",
        "quantile_point",
        "recursive_levels",
        "independent_quantiles",
        "coarse_to_fine",
        "coarse_to_fine_quantiles",
        "mean_selection",
        "auto_rows",
        "auto_rows_per_key",
        "auto_keys",
    ),
    ("beam_dp.summaries.quantiles.mean", "noisy_sum_and_count"): ("mean", "auto_rows_mean"),
    ("beam_dp.summaries.contribution_bounds", "select"): (
        "auto_rows",
        "auto_rows_mean",
        "auto_rows_per_key",
        "auto_keys",
        "auto_labels",
    ),
    ("beam_dp.beam.cdf", "release_ks_cdf"): ("cdf_count", "cdf_public_n"),
    ("beam_dp.summaries.quantiles.recursive", "select_pair"): ("joint_pair",),
    ("beam_dp.summaries.quantiles.recursive", "select_on_errors"): ("fine_grid_quantiles",),
}

#: One case per call site for the Hypothesis neighbours (their builds take no data size).
RANDOM_CASES = (
    "select_top",
    "select_margin",
    "top_k_rounds",
    "per_key_draw",
    "key_selection",
    "auto_labels",
    "recursive_levels",
    "coarse_to_fine",
    "auto_rows",
    "auto_keys",
    "cdf_count",
)


def unreplayed(call_sites: frozenset[tuple[str, str]] | set[tuple[str, str]]) -> set[Any]:
    """The call sites without a registered replay."""
    return set(call_sites) - set(REPLAYS)


def reaches(site_name: str) -> set[tuple[str, str]]:
    return {where for where, names in REPLAYS.items() if site_name in names}


def run_pair(site: cs.Site, relation: str, data: Any, calls: list[Captured]) -> list[Any]:
    """The captured calls of ``site`` on each neighbour of ``data`` (recorders installed)."""
    out = []
    case = e2e.Case(site.name, site.build)
    for neighbour in ("d", "d_prime"):
        calls.clear()
        run = e2e.run_cases([case], relation, None, None, memory=data.batches(relation, neighbour))
        assert site.name not in run.errors, run.errors.get(site.name)
        out.append(list(calls))
    return out


# ------------------------------------------------------------------------------- the tests


def test_every_sampler_call_site_has_its_replay() -> None:
    assert CALL_SITES, "the audit found no call site: the enumeration is broken"
    assert unreplayed(CALL_SITES) == set(), "sampler call sites without a replay (REPLAYS)"
    assert set(REPLAYS) <= CALL_SITES, "a replay registered for a name no module looks up"
    named = {name for names in REPLAYS.values() for name in names}
    assert named <= set(CASES), f"replays name unknown cases: {named - set(CASES)}"


def test_a_new_call_site_without_a_replay_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # The coverage test above can fail: a module that looks up a sampler is a call site.
    fake = types.ModuleType("beam_dp.summaries.fake_release")
    fake.select = cs.SAMPLER_ENTRIES["select"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    found = cs.sampler_call_sites()
    assert unreplayed(found) == {(fake.__name__, "select")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "relation"),
    [
        pytest.param(name, relation, id=f"{name}-{relation}")
        for name in sorted({n for names in REPLAYS.values() for n in names})
        for relation in CASES[name].relations
    ],
)
def test_the_call_sites_do_the_same_work_on_the_extreme_neighbours(
    capture: list[Captured], name: str, relation: str
) -> None:
    site = CASES[name]
    first, second = run_pair(site, relation, site.data, capture)
    reached = {call.where for call in first} & {call.where for call in second}
    assert reaches(name) <= reached, f"{name}: never reached {reaches(name) - reached}"
    assert_equal_work(first, second)


def test_the_replay_fails_on_key_selection_without_padding(
    capture: list[Captured], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The replay can fail: with one noise per label present (the code before issue 36) the
    # thousand new labels draw a thousand more noises.
    first, second = run_pair(THOUSAND_LABELS, "add_remove", THOUSAND_LABELS.data, capture)
    monkeypatch.setattr(
        beam_dp.mechanisms.partition_selection, "padded_labels", lambda labels, bound: labels
    )
    with pytest.raises(AssertionError, match="select_keys"):
        assert_equal_work(first, second, seeds=(0,))


def test_the_replay_fails_on_selection_coins_flipped_by_bits(
    capture: list[Captured], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The replay can fail at a selection too: the coins flipped bit by bit (the selections'
    # coins before 2026-11-28) read by the bits of each gap.
    site = CASES["select_top"]
    first, second = run_pair(site, "add_remove", site.data, capture)
    monkeypatch.setattr(
        beam_dp.mechanisms.selection, "bernoulli_exp_multiples", bernoulli_exp_multiples_walk
    )
    with pytest.raises(AssertionError, match=r"beam_dp\.summaries\.selection"):
        assert_equal_work(first, second, seeds=(0,))


JOINT_PAIR_SITE = ("beam_dp.summaries.quantiles.recursive", "select_pair")


def _joint_pair_calls(relation: str, capture: list[Captured]) -> tuple[Captured, Captured]:
    """The pair node's call on each neighbour of the audit's uniform background."""
    first, second = run_pair(JOINT_PAIR, relation, cs.UNIFORM, capture)
    first, second = ([c for c in calls if c.where == JOINT_PAIR_SITE] for calls in (first, second))
    assert len(first) == len(second) == 1
    return first[0], second[0]


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_the_joint_pair_does_the_same_work(capture: list[Captured], relation: str) -> None:
    # The pair node's draws run PAIR_ROUNDS rounds of the same requests: replayed from the
    # same seeds, its logs are equal on the neighbours (they differed in 6 of 6 seeds before).
    first, second = _joint_pair_calls(relation, capture)
    assert not np.array_equal(first.args[0], second.args[0]), "the neighbours' scores agree"
    for seed in range(4):
        mine, theirs = replay(first, seed), replay(second, seed)
        assert mine.public == theirs.public
        assert mine.log == theirs.log and mine.counters == theirs.counters, seed


@pytest.mark.slow
def test_the_replay_fails_on_the_joint_pair_drawing_below_its_totals(
    capture: list[Captured], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The replay can fail at the pair node: with each uniform drawn by randbelow of its
    # data-dependent total (as the sampler before its padding drew the piece, the members and
    # the partners: the same law), the neighbours' logs differ.
    first, second = _joint_pair_calls("add_remove", capture)

    def below_total(words: Any, total: int, locate: Any, source: Any) -> int:
        return int(locate(source.randbelow(total)))

    monkeypatch.setattr(joint, "_uniform_unit", below_total)
    logs = [(replay(first, seed).log, replay(second, seed).log) for seed in range(2)]
    assert all(a != b for a, b in logs)


# Hypothesis neighbours: background units (1-3 rows each) and an adversary (unit 42) who is
# absent from D and present in D' (add_remove), or present in both with other rows in the
# same keys (replace: the keys a unit holds are public).
ROW = st.fixed_dictionaries(
    {
        "site": st.sampled_from(e2e.SITES),
        "label": st.sampled_from((*e2e.SITES, "n0", "n1", "n2")),
        "vote": st.sampled_from(e2e.PARTIES),
        "price": st.sampled_from((0.25, 0.75, 1.25, 2.75)),
        "value": st.sampled_from((e2e.LOWER, 7.5, 33.0, 50.0, 61.25, 90.0, e2e.UPPER)),
        "country": st.sampled_from(e2e.KEYS),
    }
)


@dataclasses.dataclass(frozen=True)
class RandomPair:
    background: tuple[dict[str, Any], ...]
    before: tuple[dict[str, Any], ...]  # the adversary's rows in D under replace
    after: tuple[dict[str, Any], ...]  # its rows in D' (both relations)

    def batches(self, relation: str, neighbour: str) -> list[pa.Table]:
        mine = self.after
        if neighbour == "d":
            mine = () if relation == "add_remove" else self.before
        rows = [*self.background, *mine]
        return [pa.Table.from_pylist(rows[i::2]) for i in range(2) if rows[i::2]]


#: One background unit per label the audit's recorders release (``e2e._FORCED_LABELS``): key
#: selection's outcome is forced to the forced labels *present*, so a forced label that only
#: the adversary names would be released on D' alone, and the top-k after it would be called
#: with another public number of candidates. With every forced label present in both
#: neighbours the released label set is the same public one, and the replay compares the two
#: neighbours given the same released labels (as it holds the CDF's released count equal).
FORCED_LABEL_ANCHORS = tuple(
    {
        "user": 900 + i,
        "site": label,
        "label": label,
        "vote": e2e.PARTIES[0],
        "price": 0.25,
        "value": e2e.LOWER,
        "country": e2e.KEYS[0],
    }
    for i, label in enumerate(sorted(e2e._FORCED_LABELS))
)


@st.composite
def random_pairs(draw: st.DrawFn) -> RandomPair:
    units = draw(st.integers(4, 30))
    background: list[dict[str, Any]] = list(FORCED_LABEL_ANCHORS)
    for unit in range(units):
        for row in draw(st.lists(ROW, min_size=1, max_size=3)):
            background.append({"user": 1000 + unit, **row})
    after = [{"user": e2e.ADVERSARY, **row} for row in draw(st.lists(ROW, min_size=1, max_size=8))]
    moved = draw(st.lists(ROW, min_size=1, max_size=8))
    keys = sorted({row["country"] for row in after})
    # under replace the adversary holds the same keys in D: each of its keys at least once
    before = [
        {"user": e2e.ADVERSARY, **row, "country": keys[i % len(keys)]}
        for i, row in enumerate(moved + moved[:1] * max(0, len(keys) - len(moved)))
    ]
    return RandomPair(tuple(background), tuple(before), tuple(after))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "relation"),
    [
        pytest.param(
            name,
            relation,
            id=f"{name}-{relation}",
        )
        for name in RANDOM_CASES
        for relation in CASES[name].relations
    ],
)
def test_the_call_sites_do_the_same_work_on_random_neighbours(name: str, relation: str) -> None:
    site = CASES[name]

    @settings(
        deadline=None,
        max_examples=3,
        derandomize=False,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(pair=random_pairs())
    def check(pair: RandomPair) -> None:
        with capturing() as calls:
            first, second = run_pair(site, relation, pair, calls)
        assert {call.where for call in first} & reaches(name), f"{name}: no call site reached"
        assert_equal_work(first, second, seeds=(0,))

    check()


def _adversary_names_a_forced_label(anchored: bool) -> RandomPair:
    """CI's pair at b31e269, rebuilt: the background names forced labels s0 and s1 only; the
    adversary (in D' alone) names s2 as well."""
    rows = [
        {**FORCED_LABEL_ANCHORS[i % 2], "user": 1000 + unit, "country": e2e.KEYS[unit % 3]}
        for i, unit in enumerate(range(6))
    ]
    adversary = ({**FORCED_LABEL_ANCHORS[2], "user": e2e.ADVERSARY},)
    background = (*FORCED_LABEL_ANCHORS, *rows) if anchored else tuple(rows)
    return RandomPair(background, adversary, adversary)


@pytest.mark.parametrize("anchored", [True, False], ids=["anchored", "forced-label-absent"])
def test_key_selection_replay_holds_the_released_labels(anchored: bool) -> None:
    # With every forced label in the background both neighbours release the same labels and
    # the top-k after key selection does the same work. Without the anchors the replay fails
    # (and so can fail): D releases {s0, s1}, D' {s0, s1, s2}, and the top-k is called with
    # two and three candidates.
    site = CASES["key_selection"]
    with capturing() as calls:
        first, second = run_pair(
            site, "add_remove", _adversary_names_a_forced_label(anchored), calls
        )
    if anchored:
        assert_equal_work(first, second, seeds=(0,))
    else:
        with pytest.raises(AssertionError, match="top_k"):
            assert_equal_work(first, second, seeds=(0,))
