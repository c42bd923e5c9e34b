"""The stream job's ``--state`` is private and its outputs are published all or nothing
(issue 36, items 4 and 5, applied to the stream job)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

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
