"""The jobs guide's commands (docs/jobs.md) run one after another on a fresh clone, right
after `make run`: each in a copy of the repository's layout, with `make run`'s output in place
first, exactly as written (only `.venv/bin/python` becomes this interpreter)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _readme_job_commands() -> list[list[str]]:
    text = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    block = text.split("```sh\n# the most visited websites", 1)[1].split("```", 1)[0]
    commands = []
    for command in re.sub(r"\\\n\s*", " ", block).splitlines():
        if command.startswith(".venv/bin/python"):
            commands.append(shlex.split(command))
    return commands


@pytest.mark.slow
def test_the_readme_commands_run_after_make_run(tmp_path: Path) -> None:
    commands = _readme_job_commands()
    assert len(commands) == 6, commands
    for name in ("sample_data", "pipelines"):
        os.symlink(REPO / name, tmp_path / name)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BEAM_DP_LEDGER_URL", None)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip

    # what `make run` leaves in out/ (its release job, without the ledger)
    config = "pipelines/configs/sample_survey.toml"
    made = run([".venv/bin/python", "-m", "pipelines.release", "--config", config,
                "--output", "out", "--overwrite"])  # fmt: skip
    assert made.returncode == 0, made.stderr
    for argv in commands:
        done = run(argv)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    assert (tmp_path / "out" / "release" / "release.json").exists()
    shutil.rmtree(tmp_path / "out")
