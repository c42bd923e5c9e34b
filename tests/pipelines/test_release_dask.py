"""The main job on Beam's Dask runner against a LocalCluster of two worker processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from export_helpers import write_export

from pipelines import release

SITES = ["a.com", "b.com", "c.com"]


@pytest.mark.slow
def test_release_job_on_dask(tmp_path: Path, dask_cluster: Any) -> None:
    # a.com is every user's first visit (120 distinct users); b.com and c.com get 60 each
    rows = [
        {
            "user_id": f"u{u}",
            "website": SITES[0] if v == 0 else SITES[1 + u % 2],
            "weight": 50.0 + u % 40,
        }
        for u in range(120)
        for v in range(3)
    ]
    pattern = write_export(tmp_path / "in", "avro", rows, shards=4)
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = 6.0

[[statistics]]
name = "sites"
type = "top_candidates"
candidate = "website"
candidates = {json.dumps(SITES)}
weight = 1

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
weight = 1
"""
    )
    out = tmp_path / "out"
    document = release.run(
        [
            "--config", str(config), "--output", str(out),
            "--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
            "--dask_client_address", dask_cluster.scheduler_address,
        ]
    )  # fmt: skip
    by_name = {r["name"]: r for r in document["releases"]}
    assert by_name["sites"]["value"] == "a.com"  # 120 vs at most 60+60: P(other) < 1e-6
    assert 0.0 <= by_name["median_weight"]["value"] <= 200.0
    assert json.loads((out / "release.json").read_text()) == document


@pytest.mark.slow
def test_side_input_candidates_and_per_key_releases_survive_the_dask_runner(
    tmp_path: Path, dask_cluster: Any
) -> None:
    """Candidates from DP key selection reach the selection as a side input; .PerKey draws in
    shards. Beam's Dask runner has dropped the output of a combine with a side input before,
    silently: every release must arrive."""
    rows = [
        {"user_id": f"u{u}", "website": SITES[0] if v == 0 else SITES[1 + u % 2], "country": c}
        for u in range(300)
        for v in range(3)
        for c in (["de", "fr"][u % 2],)
    ]
    pattern = write_export(tmp_path / "in", "avro", rows, shards=4)
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = 6.0
delta = 1e-6

[[statistics]]
name = "chosen_sites"
type = "top_candidates"
candidate = "website"
key_selection_epsilon = 1.0
key_selection_delta = 1e-7
weight = 1

[[statistics]]
name = "site_by_country"
type = "top_candidates"
candidate = "website"
candidates = {json.dumps(SITES)}
key = "country"
keys = ["de", "fr", "jp"]
max_keys_per_unit = 1
weight = 1
"""
    )
    document = release.run(
        [
            "--config", str(config), "--output", str(tmp_path / "out"),
            "--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
            "--dask_client_address", dask_cluster.scheduler_address,
        ]
    )  # fmt: skip
    names = sorted((r["name"], r.get("key")) for r in document["releases"])
    assert names == [
        ("chosen_sites", None),
        ("chosen_sites_candidates", None),  # the key selection's own release
        ("site_by_country", "de"),
        ("site_by_country", "fr"),
        ("site_by_country", "jp"),
    ]
    chosen = next(r for r in document["releases"] if r["name"] == "chosen_sites")
    assert chosen["value"] == "a.com"  # 300 units vs 150 each: P(other) < 1e-6
