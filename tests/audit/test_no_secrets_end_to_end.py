"""No record value in any message, log, metric or output, end to end (issue 8).

A secret travels through every reader (Avro, Parquet, CSV, JSON lines), every job
(``pipelines.top_candidates``, ``best_price``, ``election``, ``quantiles`` and ``release``,
through their ``cli``) and both ``on_bad_record`` modes: as a privacy-unit id, a candidate
label, a vote, a key and a value, in well-formed records, in records with a wrong-typed field,
in a column that mixes types, and in malformed files (a ragged CSV row, a bad JSON line, a
truncated Avro file, a garbage Parquet file). The unit id ``2**62 + 12345`` is above ``2**53``
(a float cannot hold it). We grep stdout and stderr (file descriptors), every log record at
DEBUG, the Beam metrics of every pipeline that ran, the ``SystemExit`` text and every output
file. Neither the text nor the number may appear anywhere.

With default settings no log line and no metric may carry an exact count of the input: the
input of :func:`test_default_telemetry_carries_no_exact_row_count` has 1 237 rows and "1237"
must not appear; with ``--log_exact_counts`` (the operator's switch, not private) it does,
which shows the grep can see it.

Library transforms get the same check on lists of dicts that mix types.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.beam.selection import BestPrice, Election, TopCandidates
from beam_dp.io.outputs import read_release_avro
from pipelines import best_price, budget, election, quantiles, release, top_candidates
from pipelines.common import cli

SECRET = "SECRET-alice@example.com"
SECRET_INT = 2**62 + 12345  # 4611686018427400249: above 2**53
# What must never be seen: the text, its parts, the integer and its float forms.
FORBIDDEN = (
    SECRET,
    "alice@example",
    "SECRET-alice",
    str(SECRET_INT),
    "461168601842740",
    "4.6116860184274",
    "4.61168601842740",
)
SITES = ["s0", "s1", "s2", "s3", "s4"]
PARTIES = ["A", "B", "C"]
KEYS = ["de", "fr", "jp"]
COLUMNS = ["user", "site", "vote", "price", "value", "country"]
FORMATS = ("avro", "parquet", "csv", "jsonl")
ROWS = 1237


# --------------------------------------------------------------------------- data


def good_rows(count: int, *, text_ids: bool, seed: int = 5) -> list[dict[str, Any]]:
    """``count`` well-formed rows of about three per unit."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        unit = i // 3
        rows.append(
            {
                "user": f"u{unit}" if text_ids else 10_000 + unit,
                "site": SITES[int(rng.integers(len(SITES)))],
                "vote": PARTIES[unit % len(PARTIES)],
                "price": round(float(rng.uniform(0.2, 1.9)), 2),
                "value": round(float(rng.uniform(10, 90)), 1),
                "country": KEYS[unit % len(KEYS)],
            }
        )
    return rows


def secret_rows(*, text_ids: bool) -> list[dict[str, Any]]:
    """Well-formed records that carry the secret as an id, a label, a vote, a key and a value.

    Each secret comes right after a value of another type in its column (an integer before
    the text, a small integer before the huge one), where a library's conversion error would
    quote it.
    """
    rows = [
        {"user": 77, "site": "s1", "vote": "A", "price": 1.0, "value": 50, "country": "de"},
        {
            "user": SECRET_INT,
            "site": SECRET,
            "vote": SECRET,
            "price": 1.0,
            "value": SECRET_INT,
            "country": SECRET,
        },
    ]
    if text_ids:  # the secret text as an id, after an integer id
        rows.append(
            {"user": SECRET, "site": "s2", "vote": "B", "price": 0.5, "value": 40, "country": "fr"}
        )
    return rows


WRONG_TYPE = {
    "user": 78,
    "site": "s1",
    "vote": "A",
    "price": SECRET,
    "value": SECRET,
    "country": "de",
}


def _csv(path: Path, rows: Sequence[dict[str, Any]], extra_lines: Sequence[str] = ()) -> None:
    lines = [",".join(COLUMNS)] + [",".join(str(r[c]) for c in COLUMNS) for r in rows]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")


def _jsonl(path: Path, rows: Sequence[dict[str, Any]], extra_lines: Sequence[str] = ()) -> None:
    lines = [json.dumps(r) for r in rows]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")


_AVRO_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "user", "type": ["long", "string"]},
        {"name": "site", "type": ["string", "long"]},
        {"name": "vote", "type": "string"},
        {"name": "price", "type": ["double", "string"]},
        {"name": "value", "type": ["double", "long", "string"]},
        {"name": "country", "type": "string"},
    ],
}


def _avro(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("wb") as handle:
        fastavro.writer(handle, _AVRO_SCHEMA, list(rows))


def _parquet(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    pq.write_table(pa.Table.from_pylist(list(rows)), path, row_group_size=64)


ARTIFACTS = (
    "secrets",  # well-formed records carrying the secret
    "wrong_type",  # a numeric field holding the secret text
    "mixed_labels",  # a label column mixing integers and text (and the secret)
    "ragged_csv",  # csv: a row with more entries than the header, one with fewer
    "bad_json",  # jsonl: a line that does not parse, one that is not an object
    "truncated_avro",  # avro: a file cut in the middle of a block
    "garbage_parquet",  # parquet: a file that is not Parquet
)


def write_export(directory: Path, fmt: str, artifacts: Sequence[str], rows: int = 240) -> str:
    """Good rows in ``fmt`` plus the chosen artifacts; returns the glob pattern."""
    directory.mkdir(parents=True, exist_ok=True)
    text_ids = fmt in ("csv", "jsonl")
    good = good_rows(rows, text_ids=text_ids)
    files: dict[str, list[dict[str, Any]]] = {"export-00000": good}
    if "secrets" in artifacts:
        files["export-00001"] = secret_rows(text_ids=text_ids or fmt == "avro")
        if fmt == "parquet":  # a text id column in another file
            files["export-00002"] = [
                {
                    "user": SECRET,
                    "site": "s2",
                    "vote": "B",
                    "price": 0.5,
                    "value": 40.0,
                    "country": "fr",
                }
            ]
    if "wrong_type" in artifacts:
        files["export-00003"] = [WRONG_TYPE, *good_rows(3, text_ids=text_ids, seed=9)]
        if fmt == "parquet":  # one type per column and file: every value text
            files["export-00003"] = [
                {k: str(v) for k, v in r.items()} for r in files["export-00003"]
            ]
    if "mixed_labels" in artifacts:  # integer labels, then the secret as a text label
        mixed = [dict(r, site=42) for r in good[:10]]
        mixed.append(dict(good[0], site=SECRET, user=90))
        mixed += [dict(r, site=42 if i % 2 else r["site"]) for i, r in enumerate(good[10:20])]
        # the text labels of the main file begin with the secret
        files["export-00000"] = [dict(good[0], site=SECRET, user=91), *good]
        if fmt == "parquet":  # Parquet: one type per column and file, so mixed across files
            files["export-00004"] = mixed[:10]
            files["export-00005"] = [mixed[10], *good[10:20]]
        else:
            files["export-00004"] = mixed
    suffix = {"avro": "avro", "parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}[fmt]
    for name, part in files.items():
        path = directory / f"{name}.{suffix}"
        if fmt == "avro":
            _avro(path, part)
        elif fmt == "parquet":
            _parquet(path, part)
        elif fmt == "csv":
            _csv(path, part)
        else:
            _jsonl(path, part)
    if fmt == "csv" and "ragged_csv" in artifacts:
        _csv(
            directory / f"export-00006.{suffix}",
            good_rows(5, text_ids=True, seed=11),
            [f"u1,s1,A,0.5,10.0,de,{SECRET}", f"{SECRET},s1"],
        )
    if fmt == "jsonl" and "bad_json" in artifacts:
        _jsonl(
            directory / f"export-00006.{suffix}",
            good_rows(5, text_ids=True, seed=11),
            [f'{{"user": "{SECRET}", "site": "s1", "price": ', f'["{SECRET}", {SECRET_INT}]'],
        )
    if fmt == "avro" and "truncated_avro" in artifacts:
        path = directory / f"export-00006.{suffix}"
        _avro(path, [dict(r, user=SECRET) for r in good_rows(200, text_ids=True, seed=12)])
        data = path.read_bytes()
        path.write_bytes(data[: len(data) * 2 // 3])
    if fmt == "parquet" and "garbage_parquet" in artifacts:
        (directory / f"export-00006.{suffix}").write_bytes(
            b"PAR1" + f"{SECRET} {SECRET_INT} ".encode() * 20 + b"PAR1"
        )
    return str(directory / f"export-*.{suffix}")


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class Seen:
    """Everything a job showed: the places a secret could leak to."""

    channels: dict[str, str]

    def leaks(self, forbidden: Sequence[str] = FORBIDDEN) -> list[str]:
        return [
            f"{channel}: {token!r}"
            for channel, text in self.channels.items()
            for token in forbidden
            if token in text
        ]


@pytest.fixture(autouse=True)
def no_ambient_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs default --ledger to $BEAM_DP_LEDGER_URL: these runs use none unless they say so."""
    monkeypatch.delenv("BEAM_DP_LEDGER_URL", raising=False)


@pytest.fixture
def pipeline_results(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The PipelineResult of every pipeline run during the test (for its metrics)."""
    results: list[Any] = []
    original = beam.Pipeline.run

    def run(self: beam.Pipeline, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        results.append(result)
        return result

    monkeypatch.setattr(beam.Pipeline, "run", run)
    return results


def _metrics_text(results: Sequence[Any]) -> str:
    lines = []
    for result in results:
        try:
            query = result.metrics().query()
        except Exception:  # a failed pipeline or a runner without metrics
            continue
        for kind, items in query.items():
            for item in items:
                lines.append(
                    f"{kind} {item.key.step} {item.key.metric.namespace} {item.key.metric.name} "
                    f"{item.committed} {item.attempted}"
                )
    return "\n".join(lines)


def _output_texts(out: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    if not out.exists():
        return texts
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        texts[f"file {path.name}"] = path.read_bytes().decode("utf-8", errors="replace")
        if path.suffix == ".avro":
            texts[f"decoded {path.name}"] = json.dumps(read_release_avro(path))
    return texts


def run_job(
    job: Callable[[list[str]], Any],
    argv: list[str],
    out: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    results: list[Any],
) -> tuple[Seen, str | None]:
    """Run ``job`` through its CLI wrapper; return what it showed and its exit text."""
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    capfd.readouterr()
    del results[:]
    exit_text: str | None = None
    try:
        cli(lambda: job(argv))
    except SystemExit as error:
        exit_text = str(error.code)
    captured = capfd.readouterr()
    records = "\n".join(
        f"{r.name} {r.levelname} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records
    )
    channels = {
        "stdout": captured.out,
        "stderr": captured.err,
        "log records": records,
        "log text": caplog.text,
        "metrics": _metrics_text(results),
        "SystemExit": exit_text or "",
        **_output_texts(out),
    }
    return Seen(channels), exit_text


def _single_job_argv(job: str, pattern: str, out: Path, mode: str) -> list[str]:
    common = [
        "--input",
        pattern,
        "--privacy_unit",
        "user",
        "--epsilon",
        "1.0",
        "--output",
        str(out),
        "--on_bad_record",
        mode,
    ]
    if job == "top_candidates":
        return [*common, "--candidate", "site", "--candidates", ",".join(SITES), "--k", "2"]
    if job == "top_candidates_key_selection":  # labels chosen from the data
        return [*common, "--candidate", "site", "--delta", "1e-12"]
    if job == "best_price":
        return [*common, "--value", "price", "--prices", "0.5,1.0,1.5"]
    if job == "election":
        return [*common, "--candidate", "vote", "--candidates", ",".join(PARTIES)]
    if job == "quantiles":
        return [
            *common,
            "--value",
            "value",
            "--quantiles",
            "0.25,0.5,0.75",
            "--lower",
            "0",
            "--upper",
            "100",
            "--num_points",
            "101",
        ]
    raise AssertionError(job)


JOBS: dict[str, Callable[[list[str]], Any]] = {
    "top_candidates": top_candidates.run,
    "top_candidates_key_selection": top_candidates.run,
    "best_price": best_price.run,
    "election": election.run,
    "quantiles": quantiles.run,
}


def _release_config(directory: Path, pattern: str, mode: str) -> Path:
    config = f"""
[input]
path = "{pattern}"
privacy_unit = "user"
on_bad_record = "{mode}"

[budget]
epsilon = 6.0
delta = 1e-12

[[statistics]]
name = "top_sites"
type = "top_candidates"
candidate = "site"
candidates = {json.dumps(SITES)}
k = 2
epsilon = 1.0

[[statistics]]
name = "labels_from_data"
type = "top_candidates"
candidate = "site"
key_selection_epsilon = 0.5
key_selection_delta = 1e-12
epsilon = 0.5

[[statistics]]
name = "price"
type = "best_price"
value = "price"
prices = [0.5, 1.0, 1.5]
epsilon = 1.0

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = {json.dumps(PARTIES)}
epsilon = 1.0

[[statistics]]
name = "value_quartiles"
type = "quantiles"
value = "value"
quantiles = [0.25, 0.5, 0.75]
lower = 0.0
upper = 100.0
num_points = 101
epsilon = 1.0

[[statistics]]
name = "median_by_country"
type = "median"
value = "value"
lower = 0.0
upper = 100.0
num_points = 101
key = "country"
keys = {json.dumps(KEYS)}
max_keys_per_unit = 1
epsilon = 0.5

[[statistics]]
name = "mean_value"
type = "mean"
value = "value"
lower = 0.0
upper = 100.0
num_points = 101
epsilon = 0.5
"""
    path = directory / "config.toml"
    path.write_text(config, encoding="utf-8")
    return path


def _assert_clean(seen: Seen, what: str) -> None:
    leaks = seen.leaks()
    assert not leaks, f"{what}: the secret reached {leaks}"


# --------------------------------------------------------------------------- tests


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "fmt"), [*(("skip", fmt) for fmt in FORMATS), ("fail", "csv"), ("fail", "parquet")]
)
def test_release_job_never_shows_the_secret(
    fmt: str,
    mode: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    pipeline_results: list[Any],
) -> None:
    # Every artifact of the format at once: with "skip" the job runs through all of them.
    # The run charges a persistent ledger (SQLite), another output to search.
    pattern = write_export(tmp_path / "in", fmt, ARTIFACTS)
    out = tmp_path / "out"
    config = _release_config(tmp_path, pattern, mode)
    ledger = f"sqlite:///{tmp_path / 'ledger' / 'budget.db'}"
    budget.run(
        [
            "create",
            "--ledger",
            ledger,
            "--dataset",
            "survey",
            "--input",
            f"{tmp_path / 'in'}/",
            "--epsilon",
            "100",
            "--delta",
            "1e-6",
        ],
        out=io.StringIO(),
    )
    seen, exit_text = run_job(
        release.run,
        ["--config", str(config), "--output", str(out), "--ledger", ledger, "--dataset", "survey"],
        out,
        capfd,
        caplog,
        pipeline_results,
    )
    history = io.StringIO()
    budget.run(["history", "--ledger", ledger, "--dataset", "survey", "--json"], out=history)
    seen.channels["ledger history"] = history.getvalue()
    for path in (tmp_path / "ledger").iterdir():
        seen.channels[f"ledger file {path.name}"] = path.read_bytes().decode("utf-8", "replace")
    _assert_clean(seen, f"release job, {fmt}, on_bad_record={mode}")
    if mode == "skip":
        assert exit_text is None, f"the job failed with on_bad_record=skip: {exit_text}"
        assert (out / "release.json").exists()
        assert '"charged": true' in seen.channels["ledger history"], "the ledger kept no run"
    else:
        assert exit_text is not None, "a bad record went through with on_bad_record=fail"
        assert not out.exists(), "a failed job must leave no output"


# One malformed or secret-carrying artifact per run, so each error path is reached in "fail"
# mode; each job reads a different format.
SINGLE_RUNS = [
    ("top_candidates", "csv", "ragged_csv"),
    ("top_candidates_key_selection", "jsonl", "mixed_labels"),
    ("top_candidates_key_selection", "parquet", "mixed_labels"),
    ("best_price", "avro", "wrong_type"),
    ("best_price", "parquet", "wrong_type"),
    ("election", "jsonl", "bad_json"),
    ("election", "parquet", "secrets"),
    ("quantiles", "avro", "truncated_avro"),
    ("quantiles", "parquet", "garbage_parquet"),
    ("quantiles", "csv", "wrong_type"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("job", "fmt", "artifact"), SINGLE_RUNS)
@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_single_jobs_never_show_the_secret(
    job: str,
    fmt: str,
    artifact: str,
    mode: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    pipeline_results: list[Any],
) -> None:
    pattern = write_export(tmp_path / "in", fmt, [artifact])
    out = tmp_path / "out"
    seen, exit_text = run_job(
        JOBS[job],
        _single_job_argv(job, pattern, out, mode),
        out,
        capfd,
        caplog,
        pipeline_results,
    )
    _assert_clean(seen, f"{job}, {fmt}, {artifact}, on_bad_record={mode}")
    if mode == "skip":
        assert exit_text is None, f"the job failed with on_bad_record=skip: {exit_text}"
    if exit_text is not None:
        assert not out.exists(), "a failed job must leave no output"


def _count_pattern(text: str, tmp_path: Path) -> list[str]:
    """Lines that hold the input's exact row count (the temporary paths left out)."""
    text = text.replace(str(tmp_path), "<tmp>")
    return [line for line in text.splitlines() if re.search(rf"(?<!\d){ROWS}(?!\d)", line)]


@pytest.mark.parametrize("exact_counts", [False, True], ids=["default", "log_exact_counts"])
def test_default_telemetry_carries_no_exact_row_count(
    exact_counts: bool,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    pipeline_results: list[Any],
) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    rows = good_rows(ROWS, text_ids=True)
    _csv(directory / "export-00000.csv", rows[:600])
    _csv(directory / "export-00001.csv", rows[600:])
    out = tmp_path / "out"
    argv = _single_job_argv("best_price", str(directory / "export-*.csv"), out, "skip")
    if exact_counts:
        argv.append("--log_exact_counts")
    seen, exit_text = run_job(JOBS["best_price"], argv, out, capfd, caplog, pipeline_results)
    assert exit_text is None, exit_text
    logs = "\n".join(seen.channels[c] for c in ("stdout", "stderr", "log records", "log text"))
    counted_logs = _count_pattern(logs, tmp_path)
    counted_metrics = _count_pattern(seen.channels["metrics"], tmp_path)
    if exact_counts:  # the operator's switch: the count is there, so the grep can see it
        assert counted_logs, "--log_exact_counts logged no exact row count"
    else:
        assert not counted_logs, f"an exact row count reached the logs: {counted_logs}"
        assert not counted_metrics, f"an exact row count reached the metrics: {counted_metrics}"


# --------------------------------------------------------------------------- library


# Each secret follows a value of another type in its column (see ``secret_rows``).
LIBRARY_BATCH = [
    {"user": 5, "site": 42, "vote": "A", "price": 1.0, "value": 10},
    {"user": SECRET, "site": SECRET, "vote": SECRET, "price": SECRET, "value": SECRET_INT},
    {"user": SECRET_INT, "site": "s1", "vote": "B", "price": 0.5, "value": 20},
    {"user": "u6", "site": "s2", "vote": "A", "price": 1.5, "value": 20.5},
]


def _library_transforms(mode: str) -> dict[str, beam.PTransform]:
    common = {"unit_column": "user", "on_bad_record": mode}
    return {
        "top": TopCandidates.Globally(
            candidate_column="site", candidates=SITES, epsilon=1.0, **common
        ),
        "key_selection": SelectCandidates.Globally(
            candidate_column="site", epsilon=1.0, delta=1e-12, **common
        ),
        "price": BestPrice.Globally(
            value_column="price", prices=[0.5, 1.0, 1.5], epsilon=1.0, **common
        ),
        "vote": Election.Globally(
            candidate_column="vote", candidates=PARTIES, epsilon=1.0, **common
        ),
        "median": PrivateMedian.Globally(
            lower=0.0, upper=100.0, num_points=101, value_column="value", epsilon=1.0, **common
        ),
    }


class _Keep(beam.DoFn):  # type: ignore[misc]
    def process(self, element: Any) -> Iterator[str]:
        yield json.dumps(element.to_dict())


@pytest.mark.parametrize("mode", ["fail", "skip"])
@pytest.mark.parametrize("name", ["top", "key_selection", "price", "vote", "median"])
def test_library_transforms_on_mixed_lists_of_dicts_never_show_the_secret(
    name: str, mode: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    transform = _library_transforms(mode)[name]
    shown = ""
    try:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                pipeline
                | beam.Create([LIBRARY_BATCH], reshuffle=False)
                | transform
                | beam.ParDo(_Keep())
                | beam.Map(print)
            )
    except Exception as error:  # what a user's traceback would print
        shown = "".join(traceback.format_exception(error))
    captured = capfd.readouterr()
    seen = Seen(
        {
            "exception": shown,
            "stdout": captured.out,
            "stderr": captured.err,
            "log text": caplog.text,
            "log records": "\n".join(r.getMessage() for r in caplog.records),
        }
    )
    _assert_clean(seen, f"{name}, on_bad_record={mode}")
    if mode == "skip":
        assert not shown, f"on_bad_record=skip raised: {shown.splitlines()[-1:]}"
