"""The library guide's "In your own pipeline" examples (docs/library.md) run as written, one
after another in one namespace, in a fresh folder: per-record elements, windows, releases
written by Beam's own sink. Only the runner is chosen here: the in-process FnApiRunner, which
the DirectRunner falls back to offline after trying to fetch Prism."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

REPO = Path(__file__).resolve().parents[1]


def _section_blocks() -> list[str]:
    text = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    section = text.split("## In your own pipeline\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _section_blocks()
    assert len(blocks) == 3
    original = beam.Pipeline.__init__

    def in_process(self: beam.Pipeline, runner: Any = None, *args: Any, **kwargs: Any) -> None:
        original(self, FnApiRunner() if runner is None else runner, *args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "__init__", in_process)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "readme"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, "docs/library.md", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    names = [line.split()[0] for line in lines]
    assert "top_candidates" in names and "median" in names
    assert sum("[" in line and ")" in line for line in lines) >= 2  # the windows' releases
    assert any("Row(name='top_candidates'" in line for line in lines)
    (avro,) = tmp_path.glob("out/releases*.avro")
    with open(avro, "rb") as handle:
        (record,) = list(fastavro.reader(handle))
    assert record["name"] == "top_candidates" and record["value_text"] in ("a.com", "b.com")
    written = sorted(p.name for p in (tmp_path / "out" / "run-1").iterdir())
    assert written == ["release.avro", "release.json", "report.html"]
