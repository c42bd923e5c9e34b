"""The stream job's ``--state`` is private and its outputs are published all or nothing
(issue 36, items 4 and 5, applied to the stream job)."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from beam_dp.io import outputs
from beam_dp.io.outputs import IncompleteReleaseError, check_release
from pipelines import stream

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary (2027-01-15)


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
        'candidates = ["a", "b"]\nweight = 1\n'
    )
    return config


def _batch(users: range, vote: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"user_id": [f"u{u}" for u in users], "vote": [vote] * len(users)}
    )


def _source(events: list[tuple[float, pa.RecordBatch]]) -> Any:
    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for stamp, batch in events:
            test = test.add_elements([TimestampedValue((f"shard-{stamp}.csv", batch), stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", str(_config(tmp_path)), "--landing", "/data/landing/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "1", "--poll_seconds", "0.2",
            "--max_windows_per_unit", "2", "--runner", "BundleBasedDirectRunner",
            *extra]  # fmt: skip


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets group and others read what a process creates by default."""
    before = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(before)


def test_nothing_under_state_is_readable_by_others_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None
) -> None:
    state = tmp_path / "state"
    renamed: list[tuple[str, int]] = []  # each file renamed into --state: its mode before
    for name in ("rename", "replace"):
        original = getattr(os, name)

        def moved(source: Any, target: Any, *args: Any, _original: Any = original,
                  **kwargs: Any) -> Any:  # fmt: skip
            if str(target).startswith(str(state)):
                renamed.append((str(source), stat.S_IMODE(os.stat(source).st_mode)))
            return _original(source, target, *args, **kwargs)

        monkeypatch.setattr(os, name, moved)
    events = [(BASE + 5, _batch(range(0, 80), "a")), (BASE + SIZE + 5, _batch(range(40, 90), "b"))]
    document = stream.run(_argv(tmp_path), source=_source(events), now=lambda: BASE)
    assert len({r["event_window"] for r in document["releases"]}) == 2
    found = sorted(state.rglob("*"))
    assert any(path.parent.name == "1" and path.parent.parent.name == "scratch" for path in found)
    assert any(path.suffix == ".json" and path.parent.name == "windows" for path in found)
    shown = {str(path): oct(stat.S_IMODE(path.stat().st_mode)) for path in found}
    assert all(stat.S_IMODE(path.stat().st_mode) & 0o077 == 0 for path in found), shown
    assert all(path.stat().st_mode & 0o700 == 0o700 for path in found if path.is_dir()), shown
    assert all(not path.name.endswith(".partial") for path in found), shown
    partials = [(source, mode) for source, mode in renamed if source.endswith(".partial")]
    assert len(partials) >= 6, renamed  # job, attempt, 2+ windows twice, 2 scratch files
    assert all(mode & 0o077 == 0 for _, mode in partials), [(s, oct(m)) for s, m in partials]


class Killed(BaseException):
    """The job's process dies here (no handler of the job catches a BaseException)."""


_OUTPUTS = ("release.json", "releases.jsonl", "release.avro", "report.html")


def _publication(out: Path) -> tuple[int, ...] | None:
    """How many releases each output file holds (the report: how many window labels), or
    None when the folder holds none of them."""
    present = [name for name in _OUTPUTS if (out / name).exists()]
    if not present:
        return None
    assert present == list(_OUTPUTS), present  # some of the files only: a partial release
    in_json = len(json.loads((out / "release.json").read_text())["releases"])
    in_lines = len((out / "releases.jsonl").read_text().splitlines())
    with (out / "release.avro").open("rb") as handle:
        in_avro = len(list(fastavro.reader(handle)))
    document = json.loads((out / "release.json").read_text())
    lines = [json.loads(line) for line in (out / "releases.jsonl").read_text().splitlines()]
    second_window = "2027-01-15T08:01:00Z, 2027-01-15T08:02:00Z"  # its label, in the report
    return (
        in_json,
        in_lines,
        in_avro,
        len({r["event_window"] for r in document["releases"]}),
        len({r["event_window"] for r in lines}),
        1 + (second_window in (out / "report.html").read_text()),
    )


class _Writes:
    """Raises Killed at the ``kill_at``-th change to the filesystem (creating, renaming,
    removing a file or folder, changing a mode), and at every one after it (a dead process
    runs no clean-up)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kill_at: int | None = None
        self.count = 0
        for name in ("rename", "replace", "remove", "unlink", "rmdir", "mkdir", "chmod"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))
        opened = os.open
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT

        def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if flags & write_flags:
                self._step()
            return opened(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        builtin_open = builtins.open

        def open_file(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(flag in mode for flag in "wax+"):
                self._step()
            return builtin_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", open_file)
        monkeypatch.setattr("io.open", open_file)
        monkeypatch.setattr(outputs, "_exchange", self._wrap(outputs._exchange))

    def _step(self) -> None:
        if self.kill_at is None:
            return
        self.count += 1
        if self.count >= self.kill_at:
            raise Killed

    def _wrap(self, function: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._step()
            return function(*args, **kwargs)

        return wrapped


def test_a_kill_between_any_two_writes_of_the_outputs_never_leaves_a_mixed_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "published" / "out"
    seen: list[tuple[Any, list[dict[str, Any]]]] = []  # the job and what it published, per call
    original = stream.StreamJob.write_outputs

    def record(self: stream.StreamJob) -> None:
        seen.append((self, list(self.published)))
        original(self)

    monkeypatch.setattr(stream.StreamJob, "write_outputs", record)
    events = [(BASE + 5, _batch(range(0, 80), "a")), (BASE + SIZE + 5, _batch(range(40, 90), "b"))]
    argv = [*_argv(tmp_path), "--output", str(out)]
    stream.run(argv, source=_source(events), now=lambda: BASE)
    job = seen[-1][0]
    # One poll may publish both windows (the outputs are written once per poll): the first
    # window's publication is the first release of the whole list.
    second = seen[-1][1]
    assert len(second) == 2, "both windows published"
    first = second[:1]
    monkeypatch.setattr(stream.StreamJob, "write_outputs", original)
    writes = _Writes(monkeypatch)
    found: set[tuple[int, ...] | None] = set()
    vouched: list[str | None] = []
    for kill_at in range(1, 200):
        shutil.rmtree(out.parent)
        job.published = first
        job.write_outputs()  # the first window's publication, whole
        before = _publication(out)
        job.published = second
        writes.kill_at, writes.count = kill_at, 0
        try:
            job.write_outputs()  # the second window's, killed at its kill_at-th write
        except Killed:
            killed = True
        else:
            killed = False
        finally:
            writes.kill_at = None
        now = _publication(out)
        after = (2, 2, 2, 2, 2, 2)  # two windows, one release each, in every file
        assert before == (1, 1, 1, 1, 1, 1)
        assert now in (before, after, None), (kill_at, now)
        if now is not None:
            try:
                vouched.append(check_release(out))  # the manifest names every file as it is
            except IncompleteReleaseError:
                vouched.append(None)
        found.add(now)
        if not killed:
            assert now == after
            break
    else:
        raise AssertionError("the outputs were never written whole")
    assert vouched and None not in vouched
    assert kill_at > 4 and found >= {(1, 1, 1, 1, 1, 1), (2, 2, 2, 2, 2, 2)}, found
