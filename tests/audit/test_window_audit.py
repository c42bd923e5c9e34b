"""The end-to-end privacy audit over windows (issue 26, "Tests").

Neighbouring datasets differ by one privacy unit whose records span more windows than
``max_windows_per_unit`` allows (rows in each of ``WINDOWS`` windows, its id the integer 42 in
one batch and the text "42" in another). Both are run through

* the public transforms on windowed input (bounded: Beam's FnApiRunner, a ``beam.Create`` of
  timestamped batches in ``FixedWindows``; the window bound is :func:`kept_windows`), and
* the streaming job's own graph (``pipelines.stream.run``) on a TestStream on the
  BundleBasedDirectRunner (unbounded: the window bound is the per-unit state
  :class:`WindowAdmissions`, the order the windows arrive in),

with the exact method of :mod:`test_end_to_end_audit`: every sampler call is captured with
its merged scores, its output is forced to a public one, both output pmfs are computed
exactly, and the privacy loss is summed over the rounds, statistics and windows. Bounds:

* a transform: its ``epsilon`` over all the windows (each window runs at
  ``epsilon / max_windows_per_unit``);
* the job: the config's ``[budget]`` epsilon, i.e. the job's per-window epsilon
  (``budget / max_windows_per_unit``) times the windows a unit can reach.

Under ``add_remove`` one neighbour adds the unit; under ``replace`` the unit is in the same
windows in both (windows are public under ``replace``: ``test_end_to_end_audit``'s
``moved`` fixture) with its values moved.

**The audit bites.** The same pipelines run with two mutants, installed in this module: the
window bound not enforced (every unit keeps all its windows) and the per-window epsilon not
divided (each window at the whole epsilon); the exact loss must then exceed the bound, for
every transform and for the job. Deterministic: exact pmfs, no sampling.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

sys.path.insert(0, str(Path(__file__).parent))

import test_end_to_end_audit as e2e

import beam_dp.beam._contributions
import beam_dp.beam._transform
from beam_dp.beam._contributions import WindowAdmissions
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.beam.selection import TopCandidates
from pipelines import stream

WINDOWS = 6  # windows the adversary has rows in
PER_UNIT = 2  # max_windows_per_unit: fewer than WINDOWS
SIZE = 60  # seconds per window
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary: the first window of the data
EPSILON = 1.0
JOB_EPSILON = 2.0  # the stream config's [budget]: three statistics share it
SITES = e2e.SITES
FLOOD_SITE = "s3"  # the rare candidate the adversary names in the flooding neighbour
MEAN_N = 250  # the mean's public number of values under replace (any public value is private)

_ORIGINAL_DIVIDE = beam_dp.beam._transform.divide_budget
_ORIGINAL_KEPT = beam_dp.beam._contributions.kept_windows
_ORIGINAL_ADMIT = WindowAdmissions.admit

# --------------------------------------------------------------------------- neighbours


def _background(w: int) -> list[dict[str, Any]]:
    """Window ``w``'s own units (one row each, within every bound). Sizes and the common
    value differ per window (so each window's release is told apart), the adversary's site is
    rare, and most values sit at one high value between two grid points (72.5 + 5 w: no grid
    point holds a tied block, which the tie-aware score would pin at 0 in both neighbours):
    the output laws are concentrated on the two grid points around it, whose scores move in
    opposite directions, so one unit's loss comes close to its window's share (the adversary's
    values are low)."""
    rows = []
    for u in range(200 + 20 * w):
        site = SITES[(0, 1, 0, 2, 4, 0, 1)[u % 7]]
        value = 72.5 + 5 * w if u % 7 else float((17 * u + 11 * w) % 101)
        rows.append({"user": 7000 + 1000 * w + u, "site": site, "value": value})
    return rows


def _adversary(flood: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The adversary's rows of one window: (integer-id rows, text-id rows), one person:
    flooding (the rare site, the lowest value) or quiet (the common site, the highest)."""
    if flood:
        row = {"site": FLOOD_SITE, "value": e2e.LOWER}
        count = 6
    else:
        row = {"site": "s0", "value": e2e.UPPER}
        count = 1
    ints = [{"user": e2e.ADVERSARY, **row} for _ in range(count)]
    texts = [{"user": str(e2e.ADVERSARY), **row} for _ in range(count)]
    return ints, texts


def windowed(relation: str, neighbour: str) -> list[tuple[int, pa.Table]]:
    """(timestamp, batch) pairs of one neighbour ("d" or "d_prime"): every window's
    background, and the adversary's rows in every window (add/remove: in ``d_prime`` only;
    replace: in both, quiet in ``d``, flooding in ``d_prime``)."""
    flood = neighbour == "d_prime"
    present = flood or relation == "replace"
    out: list[tuple[int, pa.Table]] = []
    for w in range(WINDOWS):
        start = BASE + w * SIZE
        out.append((start + 1, pa.Table.from_pylist(_background(w))))
        if present:
            ints, texts = _adversary(flood)
            out.append((start + 2, pa.Table.from_pylist(ints)))
            out.append((start + 3, pa.Table.from_pylist(texts)))
    return out


# --------------------------------------------------------------------------- the transforms


def _common(name: str, relation: str) -> dict[str, Any]:
    return {**e2e._common(name, relation), "max_windows_per_unit": PER_UNIT}


def _quantile(name: str, relation: str) -> dict[str, Any]:
    return {**e2e._quantile(name, relation), "max_windows_per_unit": PER_UNIT}


CASES = [
    e2e.Case(
        "w_top",
        lambda r: TopCandidates.Globally(
            candidate_column="site", candidates=list(SITES), epsilon=EPSILON, **_common("w_top", r)
        ),
        windowed=True,
    ),
    e2e.Case(
        "w_median", lambda r: PrivateMedian.Globally(**_quantile("w_median", r)), windowed=True
    ),
    e2e.Case(
        "w_mean",
        lambda r: PrivateMean.Globally(
            **_quantile("w_mean", r), **({"n": MEAN_N} if r == "replace" else {})
        ),
        windowed=True,
    ),
]
RELATIONS = ("add_remove", "replace")


# --------------------------------------------------------------------------- the mutants


def _install(monkeypatch: pytest.MonkeyPatch, mutant: str | None) -> None:
    """The recorders, and ``mutant`` over the code it breaks (wherever it is looked up)."""
    e2e.install_recorders(monkeypatch)
    if mutant is None:
        return
    if mutant == "windows_not_bounded":

        def keep_all(units: Any, *args: Any, **kwargs: Any) -> Any:
            _ORIGINAL_KEPT(units, *args, **kwargs)
            return np.ones(np.asarray(units).size, dtype=bool)

        def admit_all(self: WindowAdmissions, window: Any, units: Any) -> Any:
            _, state = _ORIGINAL_ADMIT(self, window, units)
            return np.ones(np.asarray(units).size, dtype=bool), state

        monkeypatch.setattr(beam_dp.beam._contributions, "kept_windows", keep_all)
        monkeypatch.setattr(WindowAdmissions, "admit", admit_all)
    elif mutant == "epsilon_not_divided":

        def undivided(budget: Any, *, keys_per_unit: int = 1, windows_per_unit: int = 1) -> Any:
            return _ORIGINAL_DIVIDE(budget, keys_per_unit=keys_per_unit, windows_per_unit=1)

        hits = 0
        for name, module in list(sys.modules.items()):
            if name.startswith("beam_dp.") and getattr(module, "divide_budget", None) is (
                _ORIGINAL_DIVIDE
            ):
                monkeypatch.setattr(module, "divide_budget", undivided)
                hits += 1
        assert hits, "no beam_dp module calls divide_budget: update the harness"
    else:
        raise AssertionError(f"unknown mutant {mutant!r}")


# --------------------------------------------------------------------------- the loss


@dataclasses.dataclass(frozen=True)
class Loss:
    total: float  # exact privacy loss summed over every changed release
    changed: dict[str, int]  # changed releases (windows) per statistic


def exact_loss(groups_d: list[e2e.Group], groups_dp: list[e2e.Group]) -> Loss:
    """The exact loss between two runs, summed over rounds, statistics and windows (the
    releases are paired by :func:`test_end_to_end_audit.pair_groups`)."""
    total = 0.0
    changed: dict[str, int] = {}
    for a, b in e2e.pair_groups(groups_d, groups_dp):
        for x, y in zip(a.calls, b.calls, strict=True):
            pure, extra = e2e.call_loss(x, y)
            assert extra == 0.0  # no (ε, δ) release here
            total += pure
        changed[a.transform] = changed.get(a.transform, 0) + 1
    return Loss(total, changed)


def transform_losses(mutant: str | None, relation: str) -> dict[str, Loss]:
    """Each transform's loss between the neighbours on windowed (bounded) input."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _install(monkeypatch, mutant)
        runs = [
            e2e.run_cases(CASES, relation, None, windowed(relation, neighbour))
            for neighbour in ("d", "d_prime")
        ]
    out = {}
    for case in CASES:
        for run in runs:
            assert case.name not in run.errors, run.errors[case.name]
        counts = [len(run.releases.get(case.name, [])) for run in runs]
        assert counts == [WINDOWS, WINDOWS], f"{case.name}: releases per neighbour {counts}"
        out[case.name] = exact_loss(*(run.groups[case.name] for run in runs))
    return out


# --------------------------------------------------------------------------- the job


def _job_config(tmp_path: Path, relation: str) -> Path:
    config = tmp_path / "stream.toml"
    n = f"n = {MEAN_N}\n" if relation == "replace" else ""
    quantile = (
        f'value = "value"\nlower = {e2e.LOWER}\nupper = {e2e.UPPER}\n'
        f"num_points = {e2e.NUM_POINTS}\nmax_contributions = 2\nweight = 1\n"
        f"salt = {e2e.SALT}\n"
    )
    config.write_text(
        '[input]\nprivacy_unit = "user"\nformat = "csv"\non_bad_record = "skip"\n\n'
        f'[budget]\nepsilon = {JOB_EPSILON}\nrelation = "{relation}"\n\n'
        '[[statistics]]\nname = "job_top"\ntype = "top_candidates"\ncandidate = "site"\n'
        f"candidates = {list(SITES)!r}\nweight = 1\nsalt = {e2e.SALT}\n\n"
        f'[[statistics]]\nname = "job_median"\ntype = "median"\n{quantile}\n'
        f'[[statistics]]\nname = "job_mean"\ntype = "mean"\n{quantile}{n}'
    )
    return config


def _stream_source(events: list[tuple[int, pa.Table]]) -> Callable[[beam.Pipeline], Any]:
    """A TestStream of ``(file name, RecordBatch)`` in place of the watched landing folder:
    each window's shards arrive, then the watermark passes the window."""

    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for stamp, table in events:
            batch = table.combine_chunks().to_batches()[0]
            test = test.add_elements([TimestampedValue((f"shard-{stamp}.csv", batch), stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def job_loss(tmp_path: Path, mutant: str | None, relation: str) -> Loss:
    """The streaming job's loss between the neighbours (all its statistics, all windows)."""
    groups: list[list[e2e.Group]] = []
    for neighbour in ("d", "d_prime"):
        where = tmp_path / f"{mutant}-{relation}-{neighbour}"
        where.mkdir()
        argv = ["--config", str(_job_config(where, relation)),
                "--landing", "/data/landing/*.csv", "--state", str(where / "state"),
                "--output", str(where / "out"), "--window_seconds", str(SIZE),
                "--max_windows_per_unit", str(PER_UNIT), "--grant_ahead", str(WINDOWS),
                "--poll_seconds", "0.2", "--runner", "BundleBasedDirectRunner"]  # fmt: skip
        with pytest.MonkeyPatch.context() as monkeypatch:
            _install(monkeypatch, mutant)
            recorder = e2e._RECORDER = e2e.Recorder()
            try:
                document = stream.run(
                    argv, source=_stream_source(windowed(relation, neighbour)), now=lambda: BASE
                )
            finally:
                e2e._RECORDER = None
        statuses = [w["status"] for w in document["windows"]]
        assert statuses[:WINDOWS] == ["published"] * WINDOWS, statuses
        assert len(document["releases"]) == 3 * WINDOWS
        groups.append(recorder.groups)
    return exact_loss(*groups)


# --------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def losses() -> Iterator[dict[tuple[str | None, str], dict[str, Loss]]]:
    """Every transform's loss, with the real code and with each mutant, on both relations."""
    yield {
        (mutant, relation): transform_losses(mutant, relation)
        for mutant in (None, "windows_not_bounded", "epsilon_not_divided")
        for relation in RELATIONS
    }


@pytest.mark.slow
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_a_unit_over_many_windows_costs_at_most_epsilon_and_the_mutants_are_caught(
    losses: dict[tuple[str | None, str], dict[str, Loss]], name: str, relation: str
) -> None:
    real = losses[(None, relation)][name]
    # The unit reached exactly max_windows_per_unit windows, and its loss over them is within
    # the transform's epsilon.
    assert real.changed == {name: PER_UNIT}, real.changed
    assert real.total <= EPSILON + e2e.TOLERANCE, f"{name}: loss {real.total:.4f} > ε"
    # Not bounding the windows: the unit reaches every window; not dividing epsilon: its two
    # windows run at the whole epsilon. Either one the audit must catch.
    unbounded = losses[("windows_not_bounded", relation)][name]
    assert unbounded.changed == {name: WINDOWS}, unbounded.changed
    assert unbounded.total > EPSILON, f"{name}: unbounded windows passed: {unbounded.total:.4f}"
    undivided = losses[("epsilon_not_divided", relation)][name]
    assert undivided.changed == {name: PER_UNIT}, undivided.changed
    assert undivided.total > EPSILON, f"{name}: undivided epsilon passed: {undivided.total:.4f}"


@pytest.mark.slow
@pytest.mark.parametrize("relation", RELATIONS)
def test_the_stream_job_costs_a_unit_at_most_its_window_budget_over_all_windows(
    tmp_path: Path, relation: str
) -> None:
    real = job_loss(tmp_path, None, relation)
    names = {"job_top", "job_median", "job_mean"}
    assert real.changed == dict.fromkeys(names, PER_UNIT), real.changed
    # The config's budget: the per-window epsilon (budget / max_windows_per_unit) times the
    # windows a unit reaches.
    assert real.total <= JOB_EPSILON + e2e.TOLERANCE, f"job loss {real.total:.4f} > ε"
    for mutant, reached in (("windows_not_bounded", WINDOWS), ("epsilon_not_divided", PER_UNIT)):
        broken = job_loss(tmp_path, mutant, relation)
        assert broken.changed == dict.fromkeys(names, reached), (mutant, broken.changed)
        assert broken.total > JOB_EPSILON, f"{mutant} passed the job audit: {broken.total:.4f}"
