"""Jobs refuse what a user did not mean, before anything runs (issue 8, "Refuse what a user did
not mean"), report only public facts unless the operator asks, and print one line on failure.

Most cases here fail before any pipeline exists: their input pattern names no file, so a job
that read anything would fail on the files instead of on the parameter.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from export_helpers import write_export

from beam_dp import telemetry
from pipelines import best_price, election, job_run, quantiles, release, top_candidates
from pipelines import cli as pipelines_cli
from pipelines._state import STATE
from pipelines.cli import failure_message
from pipelines.common import check_pipeline_flags, cli, parse_args
from pipelines.statistics import public_list, spec_from_config, statistic_keys

SECRET = 987654.25  # a record's value that must never be printed


@pytest.fixture(autouse=True)
def _exact_counts_off() -> Iterator[None]:
    telemetry.disable_exact_counts()
    yield
    telemetry.disable_exact_counts()


def _rows(bad: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"user_id": f"u{i}", "price": 0.5 + i / 100, "vote": "a" if i % 3 else "b"}
        for i in range(20)
    ]
    if bad:
        rows.append({"user_id": "u-bad", "price": math.nan, "vote": "a"})
    return rows


# ------------------------------------------------------------------------ config tables

INPUT = """
[input]
path = "{path}"
privacy_unit = "user_id"
"""
BUDGET = """
[budget]
epsilon = 1.0
"""
MEDIAN = """
[[statistics]]
name = "median_price"
type = "median"
value = "price"
lower = 0.0
upper = 2.0
num_points = 201
"""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(text.replace("{path}", str(tmp_path / "missing-*.csv")))
    return str(path)


def _release_fails(tmp_path: Path, text: str, *expected: str) -> str:
    with pytest.raises(ValueError) as info:
        release.run(["--config", _write(tmp_path, text), "--output", str(tmp_path / "out")])
    message = str(info.value)
    for part in expected:
        assert part in message, message
    assert "missing-" not in message, "a parameter error must win over the missing input"
    assert not (tmp_path / "out").exists()
    return message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            INPUT.replace("privacy_unit", "privacy_units") + BUDGET + MEDIAN,
            "unknown key 'privacy_units' in [input]; did you mean 'privacy_unit'?",
        ),
        (
            INPUT + BUDGET.replace("epsilon", "epsilom") + MEDIAN,
            "unknown key 'epsilom' in [budget]; did you mean 'epsilon'?",
        ),
        (
            INPUT + BUDGET + MEDIAN.replace("[[statistics]]", "[[statistic]]"),
            "unknown key 'statistic' in the config",
        ),
        (
            INPUT + BUDGET + MEDIAN.replace("num_points", "num_point"),
            "unknown key 'num_point' in [[statistics]] 'median_price'; did you mean 'num_points'?",
        ),
        (
            INPUT + BUDGET + MEDIAN + "max_contribution = 3\n",
            "unknown key 'max_contribution' in [[statistics]] 'median_price'; "
            "did you mean 'max_contributions'?",
        ),
        (
            INPUT + BUDGET + MEDIAN.replace('value = "price"', 'value_column = "price"'),
            "unknown key 'value_column' in [[statistics]] 'median_price'; did you mean 'value'?",
        ),
        (
            INPUT + BUDGET + MEDIAN + "quantiles = [0.25]\n",  # a median takes no quantiles
            "unknown key 'quantiles' in [[statistics]] 'median_price'",
        ),
        (
            INPUT + BUDGET + "size = 3\n" + MEDIAN,
            "unknown key 'size' in [budget]",
        ),
    ],
)
def test_unknown_keys_name_the_table_and_the_nearest_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    _release_fails(tmp_path, text, expected)


def test_unknown_top_level_key_suggests_statistics(tmp_path: Path) -> None:
    text = INPUT + BUDGET + MEDIAN.replace("[[statistics]]", "[[statistic]]")
    _release_fails(tmp_path, text, "did you mean 'statistics'?")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (INPUT + BUDGET.replace("1.0", '"1.0"') + MEDIAN, "[budget]: 'epsilon' must be a number"),
        (INPUT + BUDGET + MEDIAN.replace("201", '"201"'), "'num_points' must be an integer"),
        (INPUT + BUDGET + MEDIAN.replace("201", "201.0"), "'num_points' must be an integer"),
        (INPUT + BUDGET + MEDIAN.replace("0.0", '"0"'), "'lower' must be a number"),
        (INPUT + "record_level = 1\n" + BUDGET + MEDIAN, "'record_level' must be true or false"),
        (
            INPUT + 'on_bad_record = "drop"\n' + BUDGET + MEDIAN,
            "[input]: 'on_bad_record' must be one of ['fail', 'skip']",
        ),
    ],
)
def test_values_of_the_wrong_type_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    _release_fails(tmp_path, text, expected)


def test_top_k_as_a_string_is_not_converted() -> None:
    entry = {"name": "t", "type": "top_candidates", "candidate": "c", "candidates": ["a", "b"]}
    with pytest.raises(ValueError, match="'k' must be an integer; received a string"):
        spec_from_config({**entry, "k": "2"})
    with pytest.raises(ValueError, match="'k' must be an integer; received a number"):
        spec_from_config({**entry, "k": 2.7})


def test_statistic_keys_come_from_the_transform_signatures() -> None:
    median = statistic_keys("median", per_key=False)
    minimum = statistic_keys("min", per_key=False)
    many = statistic_keys("quantiles", per_key=True)
    assert "tail" in minimum and "tail" not in median  # PrivateMin takes a tail, not the median
    assert "quantiles" in many and "quantiles" not in median
    assert {"key", "keys", "max_keys_per_unit"} <= set(many)
    assert "keys" not in median and "max_keys_per_unit" not in median
    assert "n" in statistic_keys("mean", per_key=False)
    assert "per_unit" in statistic_keys("best_price", per_key=False)
    for kind in ("top_candidates", "election", "median"):
        assert not {"unit_column", "rng", "on_bad_record"} & set(
            statistic_keys(kind, per_key=False)
        )


def test_per_key_keys_need_a_key() -> None:
    entry = {"name": "m", "type": "median", "value": "v", "lower": 0.0, "upper": 1.0}
    with pytest.raises(ValueError, match="'keys' applies only to a per-key release"):
        spec_from_config({**entry, "keys": ["de", "fr"]})
    with pytest.raises(ValueError, match="'keys' is required"):
        spec_from_config({**entry, "key": "country"})


def test_the_shipped_configs_pass_the_strict_checks() -> None:
    configs = Path(release.__file__).parent / "configs"
    for path in sorted(configs.glob("*.toml")):
        # The streaming job's configs take the location from --landing, not [input] path.
        config = release.load_config(str(path), require_path="stream" not in path.stem)
        for entry in config["statistics"]:
            spec_from_config(entry, base=path.parent)


# ------------------------------------------------------------------- record-level privacy


def test_a_missing_privacy_unit_is_an_error_not_record_level(tmp_path: Path) -> None:
    no_unit = INPUT.replace('privacy_unit = "user_id"\n', "")
    _release_fails(tmp_path, no_unit + BUDGET + MEDIAN, "[input] needs 'privacy_unit'")
    _release_fails(
        tmp_path,
        no_unit + "record_level = false\n" + BUDGET + MEDIAN,
        "[input] needs 'privacy_unit'",
    )
    _release_fails(tmp_path, INPUT + "record_level = true\n" + BUDGET + MEDIAN, "not both")


def test_record_level_is_an_explicit_opt_in(tmp_path: Path) -> None:
    pattern = write_export(tmp_path / "in", "csv", _rows(), shards=1)
    config = INPUT.replace('privacy_unit = "user_id"', "record_level = true") + BUDGET + MEDIAN
    path = tmp_path / "job.toml"
    path.write_text(config.replace("{path}", pattern))
    document = release.run(["--config", str(path), "--output", str(tmp_path / "out")])
    bounds = document["releases"][0]["contribution_bounds"]
    assert bounds["record_level_privacy"] == 1


def _cli_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--input", str(tmp_path / "missing-*.csv"), "--value", "price", "--epsilon", "1",
            "--output", str(tmp_path / "out"), *extra]  # fmt: skip


def test_cli_needs_exactly_one_of_privacy_unit_and_record_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        best_price.run(_cli_argv(tmp_path))
    assert "one of the arguments --privacy_unit --record_level is required" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        best_price.run(_cli_argv(tmp_path, "--privacy_unit", "user_id", "--record_level"))
    assert "not allowed with argument" in capsys.readouterr().err


# --------------------------------------------------------------------------- public lists


def test_a_missing_candidates_file_is_an_error_not_a_label(tmp_path: Path) -> None:
    argv = ["--input", str(tmp_path / "missing-*.csv"), "--privacy_unit", "user_id",
            "--candidate", "site", "--candidates", str(tmp_path / "websites.txt"),
            "--epsilon", "1", "--output", str(tmp_path / "out")]  # fmt: skip
    for job in (election, top_candidates):
        with pytest.raises(ValueError, match=r"no file '.*websites\.txt'.*websites\.txt,"):
            job.run(argv)
    entry = {"name": "v", "type": "election", "candidate": "c", "candidates": "websites.txt"}
    with pytest.raises(ValueError, match=r"no file 'websites\.txt'"):
        spec_from_config(entry, base=tmp_path)
    with pytest.raises(ValueError, match=r"no file 'keys\.txt'"):
        spec_from_config(
            {"name": "m", "type": "median", "value": "v", "lower": 0.0, "upper": 1.0,
             "key": "country", "keys": "keys.txt"},
            base=tmp_path,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"'prices': no file 'prices\.txt'"):
        spec_from_config(
            {"name": "p", "type": "best_price", "value": "v", "prices": "prices.txt"},
            base=tmp_path,
        )


def test_public_lists_follow_one_rule(tmp_path: Path) -> None:
    # The library's reader (beam_dp.read_labels), as for a path given to
    # a transform: blanks stripped, blank lines and lines starting with '#' skipped.
    (tmp_path / "labels.txt").write_text("# public labels\n a \n\nb\n")
    assert public_list("labels.txt", name="candidates", base=tmp_path) == ["a", "b"]
    assert public_list(str(tmp_path / "labels.txt"), name="candidates") == ["a", "b"]
    assert public_list(["x", 3], name="keys") == ["x", 3]
    assert public_list("a, b ,c", name="candidates") == ["a", "b", "c"]
    assert public_list("only,", name="candidates") == ["only"]
    with pytest.raises(ValueError, match="an empty label"):
        public_list("a,,b", name="candidates")
    with pytest.raises(ValueError, match=r"no file 'only'.*'only,'"):
        public_list("only", name="candidates")
    (tmp_path / "a,b").write_text("z\n")
    with pytest.raises(ValueError, match="both an existing file and a comma-separated list"):
        public_list("a,b", name="candidates", base=tmp_path)
    with pytest.raises(ValueError, match="not a file"):
        public_list(str(tmp_path), name="candidates")


def test_prices_from_a_file_or_a_list(tmp_path: Path) -> None:
    (tmp_path / "prices.txt").write_text("0.5\n1.25\n")
    entry = {"name": "p", "type": "best_price", "value": "v"}
    spec = spec_from_config({**entry, "prices": "prices.txt"}, base=tmp_path)
    assert spec.params["prices"] == [0.5, 1.25]
    assert spec_from_config({**entry, "prices": "0.5,1"}).params["prices"] == [0.5, 1.0]
    assert spec_from_config({**entry, "prices": "1:2:0.5"}).params["prices"] == [1.0, 1.5]
    with pytest.raises(ValueError, match="'prices' must be decimals"):
        spec_from_config({**entry, "prices": "0.5,cheap"})


# ------------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("job", "extra", "expected"),
    [
        (
            best_price,
            ["--relaton", "replace"],
            "unknown flag '--relaton'; did you mean '--relation'?",
        ),
        (best_price, ["--relat", "replace"], "unknown flag '--relat'"),  # no abbreviations
        (
            best_price,
            ["--on-bad-record", "skip"],
            "unknown flag '--on-bad-record'; did you mean '--on_bad_record'?",
        ),
        (
            quantiles,
            ["--quantiles", "0.5", "--lower", "0", "--upper", "2", "--num-points", "5"],
            "unknown flag '--num-points'; did you mean '--num_points'?",
        ),
        (best_price, ["--direct_num_worker", "2"], "did you mean '--direct_num_workers'?"),
    ],
)
def test_unknown_flags_are_errors_before_anything_runs(
    tmp_path: Path, job: Any, extra: list[str], expected: str
) -> None:
    with pytest.raises(ValueError) as info:
        job.run(_cli_argv(tmp_path, "--privacy_unit", "user_id", *extra))
    assert expected in str(info.value)


def test_a_misspelt_required_flag_is_named_as_unknown_not_as_missing() -> None:
    with pytest.raises(ValueError) as info:
        best_price.run(["--inptu", "export.csv"])
    assert "unknown flag '--inptu'; did you mean '--input'?" in str(info.value)
    with pytest.raises(SystemExit):  # still required when no word is misspelt
        best_price.run(["--epsilon", "1"])


def test_an_expanded_glob_is_an_error_asking_to_quote_it(tmp_path: Path) -> None:
    argv = _cli_argv(tmp_path, "--privacy_unit", "user_id")
    argv[2:2] = [str(tmp_path / "export-00001.csv"), str(tmp_path / "export-00002.csv")]
    with pytest.raises(ValueError, match=r"unexpected argument .*export-00001.*quote the pattern"):
        best_price.run(argv)


@pytest.mark.parametrize(
    "flags",
    [
        ["--runner", "DirectRunner", "--direct_num_workers", "2",
         "--direct_running_mode", "multi_threading"],
        ["--temp_location", "/tmp/beam"],
        ["--runner", "FlinkRunner", "--flink_master", "host:8081", "--environment_type",
         "LOOPBACK"],
        ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
         "--temp_location", "gs://bucket/tmp", "--setup_file", "./setup.py"],
        ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
         "--dask_client_address", "tcp://scheduler:8786"],
    ],
)  # fmt: skip
def test_beam_and_runner_options_still_pass(flags: list[str]) -> None:
    check_pipeline_flags(flags)


def test_beam_options_reach_the_pipeline(tmp_path: Path) -> None:
    argv = _cli_argv(tmp_path, "--record_level", "--direct_num_workers", "2")
    args, options = parse_args(best_price._parser(), argv)
    assert args.record_level and args.privacy_unit is None
    assert options.get_all_options()["direct_num_workers"] == 2


# ------------------------------------------------------ parameters before budget and data


def test_a_bad_statistic_relation_fails_before_the_budget_and_any_read(tmp_path: Path) -> None:
    # The statistic asks for more than the total and the input does not exist: the parameter
    # error must still be the one reported.
    text = INPUT + BUDGET + MEDIAN + 'relation = "replce"\nepsilon = 5.0\n'
    _release_fails(tmp_path, text, "'relation' must be one of ['add_remove', 'replace']")
    with pytest.raises(ValueError, match="'relation'"):
        spec_from_config(
            {"name": "m", "type": "median", "value": "v", "lower": 0.0, "upper": 1.0,
             "relation": "replce"}
        )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("per_unit = 'maximum'\n", "'per_unit' must be one of"),
        ("prices = [2.0, 1.0]\n", "'prices' must be sorted strictly increasing"),
    ],
)
def test_every_transform_is_built_before_the_budget_is_asked(
    tmp_path: Path, extra: str, expected: str
) -> None:
    statistic = '[[statistics]]\nname = "p"\ntype = "best_price"\nvalue = "price"\nepsilon = 5.0\n'
    _release_fails(tmp_path, INPUT + BUDGET + statistic + extra, expected)


def test_an_input_matching_no_file_fails_before_the_run(tmp_path: Path) -> None:
    argv = _cli_argv(tmp_path, "--privacy_unit", "user_id")
    with pytest.raises(SystemExit) as info:
        cli(lambda: best_price.run(argv))
    assert "no file matches the input" in str(info.value.code)


# ---------------------------------------------------------------------------- telemetry


def test_exact_counts_are_logged_only_behind_the_operator_flag(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pattern = write_export(tmp_path / "in", "csv", _rows(bad=True), shards=1)
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--value", "price",
            "--epsilon", "1", "--on_bad_record", "skip"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        cli(lambda: best_price.run([*argv, "--output", str(tmp_path / "quiet")]))
    assert "the pipeline finished in" in caplog.text  # public facts are still logged
    assert "input: " in caplog.text and "1 file(s)" in caplog.text
    for counter in ("rows_read", "bad_records_skipped", "rows_dropped_by_bounding"):
        assert counter not in caplog.text
    assert not telemetry.exact_counts_enabled()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cli(lambda: best_price.run([*argv, "--output", str(tmp_path / "loud"),
                                    "--log_exact_counts"]))  # fmt: skip
    assert "NOT private" in caplog.text
    assert "bad_records_skipped: 1\n" in caplog.text + "\n"
    assert not telemetry.exact_counts_enabled(), "cli restores the switch when the job ends"


def test_the_flag_switches_exact_counts_on_before_the_pipeline_is_built(tmp_path: Path) -> None:
    argv = _cli_argv(tmp_path, "--privacy_unit", "user_id", "--log_exact_counts")
    parse_args(best_price._parser(), argv)
    assert telemetry.exact_counts_enabled()
    help_text = best_price._parser().format_help()
    assert "NOT PRIVATE" in help_text and "--show_tracebacks_unsafe" in help_text


# ------------------------------------------------------------------------ error output


class _LeakyRead(beam.PTransform):
    """Stands in for the reader: fails while the pipeline runs, quoting a record's value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def expand(self, pbegin: Any) -> Any:
        def boom(_: Any) -> Any:
            raise ValueError(f"Could not convert {SECRET!r} with type str")  # as pyarrow does

        return pbegin | "Start" >> beam.Create([None]) | "Decode" >> beam.Map(boom)


def test_a_library_error_while_running_prints_one_line_without_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pattern = write_export(tmp_path / "in", "csv", _rows(), shards=1)
    monkeypatch.setattr(job_run, "ReadExport", _LeakyRead)
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--value", "price",
            "--epsilon", "1", "--output", str(tmp_path / "out")]  # fmt: skip
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as info:
        cli(lambda: best_price.run(argv))
    message = str(info.value.code)
    assert message.startswith("error: the pipeline failed in stage 'ReadExport/Decode'")
    assert "--show_tracebacks_unsafe" in message and "\n" not in message
    assert "987654" not in message and "Could not convert" not in message
    assert "987654" not in caplog.text, "Beam's own error log must not reach the logs"
    assert not (tmp_path / "out").exists()
    # The operator can see everything, knowingly.
    with pytest.raises(ValueError, match="987654"):
        cli(lambda: best_price.run([*argv, "--show_tracebacks_unsafe"]))


def test_parameter_errors_are_printed_and_data_errors_too(tmp_path: Path) -> None:
    argv = _cli_argv(tmp_path, "--privacy_unit", "user_id", "--prices", "2:1:0.5")
    with pytest.raises(SystemExit) as info:
        cli(lambda: best_price.run(argv))
    assert (
        str(info.value.code) == "error: 'prices' needs 0 < START < STOP and STEP > 0; "
        "received '2:1:0.5'"
    )
    # A CSV row whose price is not a number: a data error (BadRecordError), printed without it.
    pattern = write_export(tmp_path / "in", "csv", _rows(), shards=1)
    export = tmp_path / "in" / "export-00000.csv"
    export.write_text(export.read_text() + "u-x,not-a-number,a\n")
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--value", "price",
            "--epsilon", "1", "--output", str(tmp_path / "out")]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        cli(lambda: best_price.run(argv))
    message = str(info.value.code)
    assert "export-00000.csv" in message and "field 'price'" in message
    assert "[while running" not in message and "not-a-number" not in message


def test_release_documents_are_unchanged_by_the_checks(tmp_path: Path) -> None:
    pattern = write_export(tmp_path / "in", "jsonl", _rows(), shards=2)
    path = tmp_path / "job.toml"
    path.write_text((INPUT + BUDGET + MEDIAN).replace("{path}", pattern))
    document = release.run(["--config", str(path), "--output", str(tmp_path / "out")])
    assert json.loads((tmp_path / "out" / "release.json").read_text()) == document
    assert document["budget"]["epsilon_spent"] == pytest.approx(1.0)


def _raised_in(filename: str, error: Exception) -> Exception:
    """``error`` as raised by a function whose code lives in ``filename``."""
    scope: dict[str, Any] = {"error": error}
    exec(compile("def fail():\n    raise error\n", filename, "exec"), scope)
    try:
        scope["fail"]()
    except Exception as raised:
        return raised
    raise AssertionError("unreachable")


def test_only_our_own_parameter_errors_are_printed_while_a_job_is_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While a job is prepared (config, schema, candidates), our validation's ValueError names
    # a public parameter and is printed; a library's ValueError may quote a value it read
    # (pyarrow: "Could not convert '987654' ..."), so only its type is.
    monkeypatch.setattr(STATE, "phase", "prepare")
    ours = _raised_in(pipelines_cli.__file__, ValueError("'epsilon' must be > 0; received -1"))
    assert failure_message(ours) == "'epsilon' must be > 0; received -1"
    library = _raised_in(
        str(Path(beam.__file__).parent / "io" / "fake.py"),
        ValueError(f"Could not convert {SECRET!r} with type str"),
    )
    message = failure_message(library)
    assert "987654" not in message and "Could not convert" not in message
    assert message.startswith("the job failed while it was being prepared (ValueError)")
