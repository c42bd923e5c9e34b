"""Issue 27 end to end: a job's quantile releases carry their intervals in release.json,
release.avro, report.html and the terminal; the config key is checked like every other."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from export_helpers import write_export

from beam_dp.io.outputs import read_release_avro
from beam_dp.report.formatting import format_number
from pipelines import release
from pipelines.statistics import spec_from_config
from pipelines.summary import print_summary


def _rows() -> list[dict[str, object]]:
    rng = np.random.default_rng(27)
    return [
        {"user_id": f"u{user}", "weight": round(float(rng.normal(70, 10)), 1)}
        for user in range(80)
        for _ in range(1 + user % 2)
    ]


def test_a_misspelt_interval_key_is_refused_with_the_nearest_key() -> None:
    entry = {"name": "m", "type": "median", "value": "v", "lower": 0, "upper": 1}
    with pytest.raises(ValueError, match=r"unknown key 'interval_shares'.*'interval_share'"):
        spec_from_config({**entry, "interval_shares": 0.5})
    spec_from_config({**entry, "interval_share": 0.5})  # the key itself is accepted
    spec_from_config({**entry, "interval": False})


def test_release_job_writes_and_prints_every_quantile_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = write_export(tmp_path / "export", "jsonl", _rows(), shards=2)
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = 3.0

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
interval_share = 0.25
weight = 1

[[statistics]]
name = "quartiles"
type = "quantiles"
quantiles = [0.25, 0.75]
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
weight = 1

[[statistics]]
name = "weight_cdf"
type = "cdf"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 201
quantiles = [0.5]
weight = 1
"""
    )
    out = tmp_path / "out"
    release.run(["--config", str(config), "--output", str(out)])
    document = json.loads((out / "release.json").read_text())
    assert read_release_avro(out / "release.avro") == document  # the intervals round-trip
    assert document["budget"]["epsilon_spent"] == pytest.approx(3.0)
    by_name = {r["name"]: r for r in document["releases"]}
    median = by_name["median_weight"]
    interval = median["interval"]
    assert interval["lower"] <= median["value"] <= interval["upper"]
    assert interval["share"] == 0.25 and interval["confidence"] == 0.95
    # the interval's epsilon is part of the release's, not on top of it (with the job's
    # "auto" row bound, the bound choice took its share first)
    parts = interval["epsilon"] + median["accuracy"]["epsilon_quantiles"]
    parts += median["accuracy"].get("epsilon_bound_choice", 0.0)
    assert parts == pytest.approx(median["epsilon"])
    quartiles = by_name["quartiles"]
    for value, lo, hi in zip(
        quartiles["value"], quartiles["interval"]["lower"], quartiles["interval"]["upper"],
        strict=True,
    ):  # fmt: skip
        assert lo <= value <= hi
    assert by_name["weight_cdf"]["interval"]["method"] == "ks_band"
    assert 'class="ci"' in (out / "report.html").read_text()
    # the terminal leads with "value [lower, upper] at 95%"
    shown = io.StringIO()
    print_summary(document, file=shown)
    text = shown.getvalue()
    assert text in capsys.readouterr().out  # what the job printed
    step = median["accuracy"]["cell_width"]  # printed at the grid's resolution (issue 40)
    lead = (
        f"{format_number(median['value'], step)} [{format_number(interval['lower'], step)}, "
        f"{format_number(interval['upper'], step)}] at 95%"
    )
    assert lead in text
    assert "intervals (each holds the data's quantile" in text
