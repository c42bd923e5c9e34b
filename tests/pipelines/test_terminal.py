"""What a user sees on the terminal (issue 10): one line per failure, progress without counts,
no third-party noise, help that explains, the accuracy column in the statistic's units.

The bad-input cases run the jobs as a user does (``python -m pipelines.<job>`` in a
subprocess), so that what is printed before ``cli`` runs (Beam's import-time warnings) counts.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import (
    _terminal,
    best_price,
    common,
    election,
    job_run,
    outputs,
    quantiles,
    release,
    top_candidates,
)
from pipelines.statistics import MAX_CANDIDATES, parse_prices, public_list

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(REPO / "sample_data" / "survey" / "export-*.avro")
PROGRESS = "INFO beam_dp.pipelines: "  # the prefix of a progress line (pipelines._terminal)


def _job(
    job: str, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"pipelines.{job}", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _price_argv(pattern: str, out: Path, *extra: str) -> list[str]:
    return ["--input", pattern, "--privacy_unit", "user_id", "--value", "willingness_to_pay",
            "--epsilon", "1", "--output", str(out), *extra]  # fmt: skip


def _one_line(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The run failed, and stderr is exactly one line (saying all of ``expected``)."""
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]


def _corrupt_parquet(directory: Path) -> str:
    directory.mkdir(parents=True)
    table = pa.table(
        {
            "user_id": [f"u{i}" for i in range(1000)],
            "willingness_to_pay": [0.5 + i / 1000 for i in range(1000)],
        }
    )
    path = directory / "export-00000.parquet"
    pq.write_table(table, path, compression="snappy")
    data = bytearray(path.read_bytes())
    for i in range(200, 1200):  # inside the first column chunk's data page
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return str(directory / "*.parquet")


# ------------------------------------------------------------------- one line per failure


def test_no_file_matches_is_one_line(tmp_path: Path) -> None:
    pattern = str(tmp_path / "none-*.avro")
    _one_line(
        _job("best_price", *_price_argv(pattern, tmp_path / "out")), "no file matches", pattern
    )


def test_unwritable_output_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("not a directory")
    out = tmp_path / "a_file" / "out"
    _one_line(
        _job("best_price", *_price_argv(SAMPLE, out)), f"--output {out}", "not writable"
    )  # no progress line either: the input was not even listed


def test_unwritable_output_is_refused_before_the_pipeline_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the pipeline ran before --output was checked")

    monkeypatch.setattr(job_run, "run_releases", must_not_run)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as info:
        common.cli(lambda: best_price.run(_price_argv(SAMPLE, tmp_path / "a_file" / "out")))
    assert "not writable" in str(info.value.code)
    # A writable directory that did not exist is probed and removed again (nothing is left
    # behind if the job fails later).
    out = tmp_path / "new" / "deeper" / "out"
    outputs.check_writable(str(out))
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    outputs.check_writable(str(existing))
    assert list(existing.iterdir()) == []
    # Other filesystems are probed through Beam's FileSystems: one that cannot be written (here
    # one Beam does not know) is refused in the same words.
    with pytest.raises(ValueError, match=r"^--output nosuch://bucket/out is not writable"):
        outputs.check_writable("nosuch://bucket/out")


def test_config_typo_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text(
        f'[input]\npath = "{SAMPLE}"\nprivacy_unt = "user_id"\n\n[budget]\nepsilon = 1.0\n\n'
        '[[statistics]]\nname = "p"\ntype = "best_price"\nvalue = "willingness_to_pay"\n'
    )
    _one_line(
        _job("release", "--config", str(config), "--output", str(tmp_path / "out")),
        "'privacy_unt'",
        "[input]",
        "did you mean 'privacy_unit'",
    )


def test_corrupt_parquet_page_is_one_error_line_with_the_jobs_hint(tmp_path: Path) -> None:
    pattern = _corrupt_parquet(tmp_path / "in")
    temp = tmp_path / "temp"
    temp.mkdir()
    result = _job("best_price", *_price_argv(pattern, tmp_path / "out"), env={"TMPDIR": str(temp)})
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    errors = [line for line in lines if not line.startswith(PROGRESS)]
    assert len(errors) == 1, result.stderr  # progress lines before it, nothing else
    assert errors[0] == lines[-1] and errors[0].startswith("error: "), result.stderr
    for part in ("export-00000.parquet", "row group", "parquet", "--on_bad_record skip"):
        assert part in errors[0], errors[0]
    assert "on_bad_record='skip'" not in result.stderr  # the library's parameter, translated
    assert not (tmp_path / "out").exists()
    # Beam's staging directories (beam-temp*, tmp*) and the releases' scratch are removed.
    assert list(temp.iterdir()) == []


def test_release_job_hint_names_the_config_key(tmp_path: Path) -> None:
    pattern = _corrupt_parquet(tmp_path / "in")
    config = tmp_path / "job.toml"
    config.write_text(
        f'[input]\npath = "{pattern}"\nprivacy_unit = "user_id"\n\n[budget]\nepsilon = 1.0\n\n'
        '[[statistics]]\nname = "p"\ntype = "best_price"\nvalue = "willingness_to_pay"\n'
    )
    result = _job("release", "--config", str(config), "--output", str(tmp_path / "out"))
    assert result.returncode != 0
    assert result.stderr.splitlines()[-1].endswith(
        'use on_bad_record = "skip" in the config\'s [input] to skip such files)'
    ), result.stderr


# --------------------------------------------------------------- candidate lists: a limit


def test_a_huge_price_grid_is_refused_before_any_work(tmp_path: Path) -> None:
    # 10^9 prices ran past 5 minutes before the limit; 30 s is a guard against a hang, not a
    # measure (the refusal takes as long as starting Python and importing Beam).
    result = _job(
        "best_price",
        *_price_argv(SAMPLE, tmp_path / "out", "--prices", "0.000001:1000:0.000001"),
        timeout=30,
    )
    line = _one_line(result, "'prices'", f"{MAX_CANDIDATES:,}", "larger STEP")
    assert "999,999,999" in line  # the number of prices asked for (public: from the flag)
    with pytest.raises(ValueError, match="more than the 1,000,000"):
        parse_prices("0.01:100000:0.01")  # the example: 10^7 prices
    assert len(parse_prices("0.01:10000.01:0.01")) == MAX_CANDIDATES  # the limit itself is fine


def test_a_huge_candidate_list_is_refused(tmp_path: Path) -> None:
    labels = [f"c{i}" for i in range(MAX_CANDIDATES + 1)]
    with pytest.raises(ValueError, match="'candidates': the list holds 1,000,001 entries"):
        public_list(labels, name="candidates")
    path = tmp_path / "many.txt"
    path.write_text("\n".join(labels))
    with pytest.raises(ValueError, match="more than the 1,000,000"):
        public_list(str(path), name="candidates")
    assert len(public_list(labels[:MAX_CANDIDATES], name="candidates")) == MAX_CANDIDATES


# ------------------------------------------------------------- a normal run: progress only


def test_a_normal_run_prints_progress_and_no_third_party_noise(tmp_path: Path) -> None:
    result = _job("best_price", *_price_argv(SAMPLE, tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "apitools" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(PROGRESS) for line in lines), result.stderr
    text = result.stderr
    assert "(3 file(s), about " in text and " kB)" in text  # files and their approximate size
    assert "the pipeline finished in " in text
    assert "stage(s) done: ReadExport, best_price, AllReleases, Collect" in text
    assert "revenue loss <=" in result.stdout or "score within" in result.stdout


def test_known_noise_is_filtered_and_other_records_pass(caplog: pytest.LogCaptureFixture) -> None:
    _terminal.quiet_third_party()
    for name in _terminal.ENVIRONMENT:  # set for the processes a job spawns; not for tests
        os.environ.pop(name, None)
    with caplog.at_level(logging.INFO):
        logging.getLogger().warning("apitools not found, and bigquery client libraries ...")
        logging.getLogger("apache_beam.options.pipeline_options").warning(
            "Discarding unparseable args: %s", ["--x"]
        )
        logging.getLogger("apache_beam.runners.dask.transform_evaluator").warning(
            "The new default partition size is 128, it used to be 1 in previous versions."
        )
        logging.getLogger("apache_beam.options.pipeline_options").warning("something else")
    assert "apitools" not in caplog.text
    assert "Discarding" not in caplog.text and "partition size" not in caplog.text
    assert "something else" in caplog.text


def test_importing_the_package_installs_nothing() -> None:
    code = (
        "import logging, pipelines\n"
        "assert not logging.getLogger().filters, logging.getLogger().filters\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != _terminal.QUIET_ENV},
        check=False,
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------------------ --help


@pytest.mark.parametrize("job", [best_price, election, quantiles, top_candidates, release])
def test_help_explains_every_flag_and_its_default(job: Any) -> None:
    parser = release._parser() if job is release else job._parser()
    text = parser.format_help()
    assert "seed" not in text.lower()
    assert "``" not in text and ":func:" not in text  # no reStructuredText markup
    for action in parser._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        flag = action.option_strings[0]
        assert action.help and len(action.help) > 20, flag
        if not action.required and flag not in ("--privacy_unit", "--record_level"):
            assert "default" in action.help.lower(), flag
    assert "Beam pipeline option" in text and "stderr" in text


def test_release_help_documents_the_config() -> None:
    text = release._parser().format_help()
    assert "The release job's config" in text  # the README section
    for key in (*release.INPUT_KEYS, *release.BUDGET_KEYS, "weight", "candidates", "prices"):
        assert key in text, key
    for kind in ("top_candidates", "best_price", "election", "quantiles", "mean"):
        assert f'type = "{kind}"' in text, kind


# ----------------------------------------------------------------- the summary's accuracy


def _document(release_record: dict[str, Any]) -> dict[str, Any]:
    base = {"name": "price", "value": 0.45, "epsilon": 1.0, "key": None}
    budget = {"epsilon_spent": 1.0, "epsilon_total": 1.0, "delta_spent": 0.0, "delta_total": 0.0}
    return {"releases": [{**base, **release_record}], "budget": budget}


def _summary(document: dict[str, Any]) -> str:
    out = io.StringIO()
    common.print_summary(document, file=out)
    return out.getvalue()


def test_summary_shows_accuracy_in_the_statistics_units_when_stated() -> None:
    stated = _summary(
        _document(
            {
                "accuracy": {"confidence": 0.9, "score_loss": 16.4952, "revenue_loss": 16.4952},
                "accuracy_units": {"revenue_loss": "currency", "score_loss": "currency"},
                "accuracy_description": "With probability 0.9, the released price earns at "
                "most 16.5 less revenue than the best price on the grid.",
            }
        )
    )
    assert "accuracy (90%)" in stated
    assert "revenue loss <= 16.5" in stated  # rounded up, never down
    assert "score within" not in stated
    assert "price: With probability 0.9, the released price earns" in stated
    plain = _summary(_document({"accuracy": {"score_loss": 16.4952, "rank_error": 3.0}}))
    assert "score within 16.5; rank error <= 3" in plain  # a release without the statement
    assert "in words" not in plain


def test_budget_help_explains_every_flag_and_its_default() -> None:
    from pipelines import budget

    parser = budget._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if not action.option_strings or action.option_strings == ["-h", "--help"]:
                continue
            flag = f"{name} {action.option_strings[0]}"
            assert action.help and len(action.help) > 20, flag
            if not action.required:
                assert "default" in action.help.lower(), flag


@pytest.mark.parametrize(
    "argv",
    [
        ["--input", "x", "--record_level", "--value", "v", "--epsilon", "1", "--output", "o",
         "--relation", "nope"],
        ["--input", "x"],
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        best_price._parser().parse_args(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "python -m pipelines.best_price --help" in lines[0]


# A log record's first line: ours ("LEVEL logger: message", pipelines._terminal.LOG_FORMAT)
# or Dask's default ("2024-05-01 12:00:00,123 - logger - LEVEL - message"); the lines up to the
# next record's first line (a traceback) belong to it.
_OUR_RECORD = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<logger>[\w.]+): ")
_DASK_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - (?P<logger>[\w.]+) - "
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - (?P<message>.*)$"
)
# What Dask's worker processes may log while the job closes the local cluster its runner
# started (execute.wait_for closes the client, and with it the cluster, when the run ends): a
# worker's heartbeat reaching a scheduler that is already gone. Not ours to print, not ours to
# silence in the job (the worker processes are Dask's), and not a sign of anything wrong.
_DASK_SHUTDOWN = (
    "Failed to communicate with scheduler during heartbeat",
    "Unexpected exception during heartbeat. Closing worker",
    "Scheduler was unaware of this worker; shutting down",
    "Failed to log closing event",
    "Closing dangling stream",
    # the nanny's kill of a worker slow to stop (seen under a load of 30 on two cores)
    "Worker process still alive after",
)


def _records(stderr: str) -> list[list[str]]:
    """``stderr`` cut into log records (first line and continuation lines); a line before any
    record's first line is a record of its own."""
    records: list[list[str]] = []
    for line in stderr.splitlines():
        if _OUR_RECORD.match(line) or _DASK_RECORD.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return records


def _without_dask_shutdown(stderr: str) -> list[list[str]]:
    """The records of ``stderr`` but Dask's own shutdown records: a warning or an error of a
    ``distributed`` logger whose message is one of :data:`_DASK_SHUTDOWN`, with its
    traceback. Anything else Dask prints (its start-up chatter at INFO, any other warning)
    stays, and so does everything from any other logger."""
    kept = []
    for record in _records(stderr):
        match = _DASK_RECORD.match(record[0])
        if (
            match is not None
            and match["logger"].split(".")[0] == "distributed"
            and match["level"] in ("WARNING", "ERROR")
            and match["message"].startswith(_DASK_SHUTDOWN)
        ):
            continue
        kept.append(record)
    return kept


def _progress_only(stderr: str) -> bool:
    """Every record left is one line of our progress (and there is one)."""
    records = _without_dask_shutdown(stderr)
    return bool(records) and all(len(r) == 1 and r[0].startswith(PROGRESS) for r in records)


_HEARTBEAT = """\
2026-05-01 12:00:03,456 - distributed.worker - ERROR - Failed to communicate with scheduler \
during heartbeat.
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/distributed/comm/tcp.py", line 226, in read
    frames_nosplit_nbytes_bin = await stream.read_bytes(fmt_size)
tornado.iostream.StreamClosedError: Stream is closed

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/distributed/worker.py", line 1164, in heartbeat
    response = await retry_operation(
distributed.comm.core.CommClosedError: in <TCP (closed) ConnectionPool.heartbeat_worker \
local=tcp://127.0.0.1:40000 remote=tcp://127.0.0.1:40001>: Stream is closed
"""


def test_only_the_runners_own_shutdown_records_are_left_out_of_a_dask_runs_output() -> None:
    ours = [
        f"{PROGRESS}running 4 stage(s): ReadExport, best_price, AllReleases, Collect",
        f"{PROGRESS}the pipeline finished in 22.6 s; 4 stage(s) done: ReadExport",
    ]
    # The noise of issue 28 (a worker's heartbeat after the scheduler closed): left out,
    # wherever it lands between our lines.
    assert _progress_only("\n".join([ours[0], _HEARTBEAT, ours[1]]))
    assert _progress_only("\n".join([*ours, _HEARTBEAT]))
    # Everything else still fails the check: Dask's start-up chatter, any other Dask
    # warning, the same message from another logger, a bare traceback, a line of ours that
    # is not progress, and no output at all.
    for other in (
        "2026-05-01 12:00:01,000 - distributed.scheduler - INFO - State start",
        "2026-05-01 12:00:01,000 - distributed.worker - WARNING - Compute Failed",
        _HEARTBEAT.replace("distributed.worker", "apache_beam.runners.dask"),
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>',
        "WARNING beam_dp.pipelines: 1 207 rows read",
        f"{PROGRESS}started\n  a line under it",
    ):
        assert not _progress_only("\n".join([ours[0], other, ours[1]])), other
    assert not _progress_only("")


@pytest.mark.slow
def test_a_dask_run_prints_progress_only(tmp_path: Path) -> None:
    # The runner starts a local cluster: its scheduler's and workers' start-up logs, Beam's
    # warnings in the worker processes and Dask's partition warnings must not show. The
    # workers' own shutdown records (a heartbeat that finds the scheduler closed) may: they
    # are Dask's, printed by its worker processes as the cluster closes, in any order with
    # our last lines (issue 28: the test failed once on one).
    result = _job(
        "best_price",
        *_price_argv(SAMPLE, tmp_path / "out"),
        "--runner",
        "apache_beam.runners.dask.dask_runner.DaskRunner",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert _progress_only(result.stderr), result.stderr


def test_mixed_relations_are_refused_before_the_pipeline_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The budget refused them only when it recorded the releases, after the data was read.
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the pipeline ran with statistics the budget cannot compose")

    monkeypatch.setattr(job_run, "run_releases", must_not_run)
    config = tmp_path / "job.toml"
    statistic = '[[statistics]]\nname = "{}"\ntype = "best_price"\nvalue = "w"\n{}\n'
    config.write_text(
        f'[input]\npath = "{SAMPLE}"\nprivacy_unit = "user_id"\n\n'
        '[budget]\nepsilon = 2.0\nrelation = "replace"\n\n'
        + statistic.format("a", "")
        + statistic.format("b", 'relation = "add_remove"')
    )
    with pytest.raises(SystemExit) as info:
        common.cli(lambda: release.run(["--config", str(config), "--output", str(tmp_path / "o")]))
    message = str(info.value.code)
    assert "different neighbouring relations (add_remove, replace)" in message, message
    assert not (tmp_path / "o").exists()


def test_summary_never_cuts_a_bound_and_marks_a_cut_value() -> None:
    long_key = "rank_error_beyond_best_grid_point"
    text = _summary(
        _document(
            {
                "value": [61.7919 + i for i in range(12)],
                "accuracy": {"fine_rank_error": 19.5, long_key: 195.0, "confidence": 0.95},
                "accuracy_units": {"fine_rank_error": "ranks", long_key: "ranks"},
            }
        )
    )
    row = text.splitlines()[2]
    assert row.endswith("fine rank error <= 19.5; rank error beyond best grid point <= 195"), row
    # the twelve values do not fit: they wrap onto the next lines, none cut (issue 40)
    assert "..." not in text and "72.7919" in text.splitlines()[4]


def test_the_ledger_sees_the_relation_the_statistics_are_released_under(tmp_path: Path) -> None:
    # [budget] leaves the relation at its default (add_remove) and the statistic overrides it:
    # its releases are private under 'replace', which an add_remove dataset must refuse (a
    # replace guarantee treats the number of people as public: it is no add_remove one).
    from pipelines import budget

    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "survey", "--input",
                str(REPO / "sample_data" / "survey"), "--epsilon", "5"],
               out=io.StringIO())  # fmt: skip
    config = tmp_path / "job.toml"
    config.write_text(
        f'[input]\npath = "{SAMPLE}"\nprivacy_unit = "user_id"\n\n[budget]\nepsilon = 1.0\n\n'
        '[[statistics]]\nname = "p"\ntype = "best_price"\nvalue = "willingness_to_pay"\n'
        'relation = "replace"\n'
    )
    argv = ["--config", str(config), "--output", str(tmp_path / "o"), "--ledger", url,
            "--dataset", "survey"]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        common.cli(lambda: release.run(argv))
    assert "relation='replace'" in str(info.value.code), info.value.code
    assert not (tmp_path / "o").exists()


def test_summary_shows_a_released_cdf_by_its_quantiles_not_its_arrays() -> None:
    value = {
        "points": [48.0, 55.0, 59.0, 70.0],
        "steps": [48.0, 55.0, 59.0, 70.0],
        "cdf": [0.25, 0.5, 0.75, 1.0],
        "quantiles": {"0.1": 48.0, "0.5": 55.0},
        "k": 4,
    }
    shown = _summary(_document({"name": "weights", "value": value}))
    assert "CDF of 4 synthetic points: q0.1=48, q0.5=55" in shown
    assert "'steps'" not in shown and "0.75" not in shown


def test_summary_names_the_privately_chosen_rows_per_person() -> None:
    auto = {
        "name": "weights",
        "value": 69.5,
        "contribution_bounds": {"max_contributions_per_unit": 8, "max_contributions_cap": 1024},
        "accuracy": {"epsilon_bound_choice": 0.2, "epsilon_statistic": 0.8},
    }
    shown = _summary(_document(auto))
    assert "rows per person, chosen privately (max_contributions = auto):" in shown
    assert "weights: 8 of at most 1024 (epsilon 0.2 of the release's 1 chose it)" in shown
    # one line when every key got the same bound; a line per key and window otherwise
    document = _document({**auto, "key": "de"})
    first = document["releases"][0]
    other = {**first, "key": "fr", "contribution_bounds": {**auto["contribution_bounds"]}}
    document["releases"].append(other)
    assert _summary(document).count("weights: 8 of at most 1024") == 1
    other["contribution_bounds"]["max_contributions_per_unit"] = 16
    shown = _summary(document)
    assert "weights: 8 of at most 1024 (epsilon 0.2 of the release's 1 chose it) [de]" in shown
    assert "weights: 16 of at most 1024 (epsilon 0.2 of the release's 1 chose it) [fr]" in shown
    fixed = _summary(_document({"contribution_bounds": {"max_contributions_per_unit": 4}}))
    assert "chosen privately" not in fixed
