"""A secret marker in bad records, and the check that a job run from the command line never
shows it (issue 36): on its stdout, its stderr, in its outputs or in what it leaves in its
temporary directory, on any runner, whatever its ``--on_bad_record``.

A failing job's stderr is its progress lines and exactly one ``error:`` line, the last; a job
that skips the bad records prints progress lines only. The marker is a fresh random string
per session, so no file can hold it by chance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = f"SECRETMARKER-{uuid.uuid4().hex}"
PROGRESS = "INFO beam_dp.pipelines: "  # the prefix of a progress line (pipelines._terminal)
SITES = ["a.com", "b.com", "c.com"]
USERS = 90

# The bad record of each kind, with the marker where a value goes: a value that is not a
# number, a privacy-unit id that is not an id (a nested object), a candidate that is not one.
BAD_RECORDS: dict[str, dict[str, object]] = {
    "value": {"user_id": "u-bad-value", "website": "a.com", "weight": MARKER},
    "id": {"user_id": {"id": MARKER}, "website": "a.com", "weight": 61.0},
    "candidate": {"user_id": "u-bad-candidate", "website": {"name": MARKER}, "weight": 61.0},
}

# The batch job that reads each kind's field, with its flags; the release job reads all.
JOB_FOR_KIND = {
    "value": ("quantiles", ["--value", "weight", "--quantiles", "0.5", "--lower", "0",
                            "--upper", "200", "--num_points", "201"]),
    "id": ("best_price", ["--value", "weight", "--prices", "50:90:1"]),
    "candidate": ("election", ["--candidate", "website", "--candidates", ",".join(SITES)]),
}  # fmt: skip
FIELD_OF_KIND = {"value": "weight", "id": "user_id", "candidate": "website"}

RELEASE_CONFIG = """
[input]
path = "{pattern}"
privacy_unit = "user_id"
on_bad_record = "{on_bad_record}"

[budget]
epsilon = 3.0

[[statistics]]
name = "sites"
type = "top_candidates"
candidate = "website"
candidates = {sites}
k = 1
weight = 1

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 201
weight = 1
"""


def write_marked_export(directory: Path, kinds: Sequence[str]) -> str:
    """Two JSON-lines shards: good rows only, and good rows with the bad records of
    ``kinds`` among them (export-00001.jsonl). Returns the glob pattern."""
    directory.mkdir(parents=True)
    good = [
        {"user_id": f"u{u}", "website": SITES[u % 3], "weight": 60.0 + u % 20} for u in range(USERS)
    ]
    mixed = good[: USERS // 2] + [BAD_RECORDS[kind] for kind in kinds] + good[USERS // 2 :]
    for index, rows in enumerate([good, mixed]):
        with (directory / f"export-{index:05d}.jsonl").open("w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    return str(directory / "export-*.jsonl")


def batch_job_argv(kind: str, pattern: str, out: Path, on_bad_record: str) -> list[str]:
    """``python -m pipelines.<job>`` flags of the job that reads ``kind``'s field."""
    job, flags = JOB_FOR_KIND[kind]
    return [f"pipelines.{job}", "--input", pattern, "--privacy_unit", "user_id", "--epsilon", "1",
            "--output", str(out), "--on_bad_record", on_bad_record, *flags]  # fmt: skip


def release_job_argv(directory: Path, pattern: str, out: Path, on_bad_record: str) -> list[str]:
    """``python -m pipelines.release`` flags, its config reading every kind's field."""
    config = directory / "job.toml"
    config.write_text(
        RELEASE_CONFIG.format(pattern=pattern, on_bad_record=on_bad_record, sites=json.dumps(SITES))
    )
    return ["pipelines.release", "--config", str(config), "--output", str(out)]


def run_job(
    argv: Sequence[str], temp: Path, *, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <argv>`` as a user does, with ``temp`` as its TMPDIR."""
    temp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TMPDIR": str(temp), **(env or {})},
        check=False,
    )


def files_holding_the_marker(*roots: Path) -> list[str]:
    """The files under ``roots`` whose bytes hold the marker (any encoding of it as text)."""
    needle = MARKER.encode()
    found = []
    for root in roots:
        if root.is_file():
            paths = [root]
        else:
            paths = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
        found += [str(p) for p in paths if needle in p.read_bytes()]
    return found


def check_no_marker(result: subprocess.CompletedProcess[str], *roots: Path) -> None:
    """The marker is nowhere: stdout, stderr, any file under ``roots``."""
    assert MARKER not in result.stdout, "the marker was printed on stdout"
    assert MARKER not in result.stderr, f"the marker was printed on stderr:\n{result.stderr}"
    assert files_holding_the_marker(*roots) == []


def check_one_error_line(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The job failed; its stderr is progress lines and one ``error:`` line, the last, saying
    all of ``expected``. Returns that line."""
    assert result.returncode != 0, result.stderr
    lines = result.stderr.splitlines()
    others = [line for line in lines if not line.startswith(PROGRESS)]
    assert len(others) == 1, f"{len(others)} lines other than progress:\n{result.stderr}"
    assert others[0] == lines[-1] and others[0].startswith("error: "), result.stderr
    for part in expected:
        assert part in others[0], others[0]
    return others[0]


def check_progress_only(result: subprocess.CompletedProcess[str]) -> None:
    """The job succeeded and printed its progress lines only."""
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(PROGRESS) for line in lines), result.stderr
