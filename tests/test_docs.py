"""Every code block of the README and the guides (docs/*.md) is run by a test, or its commands
are at least parsed by the job they call.

:data:`BLOCKS` registers each fenced block (file, its first line) with what runs it; a block
added without an entry fails :func:`test_every_code_block_is_registered`. Every
``python -m pipelines.<job>`` command in any block is parsed by that job's own flag parser
(the one ``run`` uses: unknown, misspelt or abbreviated flags are refused, and flags the job
does not know must be Beam pipeline options), so a flag renamed in the code fails here even
where the command itself needs a cluster this machine does not have.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from pipelines.flags import parse_args

REPO = Path(__file__).resolve().parents[1]
FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

#: (file, the block's number in it) -> (the start of its first line, what runs it).
BLOCKS = {
    ("README.md", 0): (
        "make run",
        "CI itself (.ci/run runs make test; make run is its first step)",
    ),
    ("README.md", 1): ("# quartiles of a numeric", "tests/test_readme_commands.py (docs/jobs.md)"),
    ("README.md", 2): (
        "import apache_beam",
        "tests/test_top_k_budget_share.py (the library example)",
    ),
    ("docs/index.md", 0): ("make run", "CI itself (make docs, make test)"),
    ("docs/jobs.md", 0): ("# the most visited websites", "tests/test_readme_commands.py"),
    ("docs/library.md", 0): ("import apache_beam", "the README's library block (the same text)"),
    ("docs/library.md", 1): ("import apache_beam", "tests/test_readme_examples.py"),
    ("docs/library.md", 2): ("from apache_beam.transforms", "tests/test_readme_examples.py"),
    ("docs/library.md", 3): ("from apache_beam.io.avroio", "tests/test_readme_examples.py"),
    ("docs/runners.md", 0): (
        "make engines",
        "flags parsed here; the same jobs run on each runner in tests/engines (embedded and "
        "cluster Flink, Spark, Dask, the Dataflow dry run); no remote cluster or GCP project here",
    ),
    ("docs/streaming.md", 0): (
        "make engines",
        "flags parsed here; tests/engines/test_flink_stream_job.py runs the stream job on Flink",
    ),
    ("docs/streaming.md", 1): (
        ".venv/bin/python -m pipelines.land_shards",
        "flags parsed here; tests/pipelines/test_stream_direct_watch.py runs it offline",
    ),
}

#: Blocks that are pictures, not code (diagrams in text).
DIAGRAMS = {"docs/architecture.md"}


def _blocks() -> list[tuple[str, int, str, str]]:
    """(file, number in the file, language, body) of every fenced block."""
    found = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)
        for number, (language, body) in enumerate(blocks):
            found.append((str(path.relative_to(REPO)), number, language, body))
    return found


def test_every_code_block_is_registered() -> None:
    seen = set()
    for file, number, _, body in _blocks():
        if file in DIAGRAMS:
            continue
        assert (file, number) in BLOCKS, f"{file}: block {number} has no test (add it to BLOCKS)"
        start, _ = BLOCKS[(file, number)]
        assert body.startswith(start), f"{file}: block {number} is not the one registered"
        seen.add((file, number))
    assert seen == set(BLOCKS), f"registered blocks no file has: {set(BLOCKS) - seen}"


def test_the_blocks_said_to_be_the_same_are() -> None:
    bodies = {(file, number): body for file, number, _, body in _blocks()}
    assert bodies[("docs/library.md", 0)] == bodies[("README.md", 2)]
    assert bodies[("README.md", 1)] in bodies[("docs/jobs.md", 0)]


def _job_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for file, _, language, body in _blocks():
        if language != "sh":
            continue
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            words = shlex.split(line.split(" &", 1)[0], comments=True)
            if len(words) > 2 and words[1:2] == ["-m"] and words[2].startswith("pipelines."):
                commands.append((file, words[2:]))
    return commands


@pytest.mark.parametrize(
    ("file", "command"),
    [pytest.param(f, c, id=f"{f}:{c[0]}:{i}") for i, (f, c) in enumerate(_job_commands())],
)
def test_every_job_command_in_the_docs_parses(file: str, command: list[str]) -> None:
    module = importlib.import_module(command[0])
    parser = module._parser()
    if command[0] in ("pipelines.budget", "pipelines.land_shards"):  # no pipeline options
        parser.parse_args(command[1:])
    else:
        parse_args(parser, command[1:])


def test_the_commands_cover_the_jobs() -> None:
    called = {command[0] for _, command in _job_commands()}
    assert {"pipelines.release", "pipelines.quantiles", "pipelines.stream",
            "pipelines.budget", "pipelines.mean"} <= called  # fmt: skip
