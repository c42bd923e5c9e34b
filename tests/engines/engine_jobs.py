"""The five jobs on a runner, on an export whose answers are certain up to 1e-6.

Each job runs as a user runs it (its ``run(argv)``, the runner given by flags) and its outputs
are checked: the released values, not just their presence. The export is built so that every
released value lies in a known range except with probability below 1e-6 (the exponential
mechanism puts mass at most ``|C| exp(-ε gap / (2 Δ))`` on candidates ``gap`` below the best),
so a runner that loses, duplicates or mis-merges rows or accumulators fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from export_helpers import write_export

from beam_dp.io.outputs import read_release_avro
from pipelines import best_price, election, quantiles, release, top_candidates

SITES = ["a.com", "b.com", "c.com"]
PARTIES = ["Gyudon Party", "Melon-pan Party", "Natto Party"]
COUNTRIES = ["de", "fr", "jp"]
USERS = 600


def survey_rows(users: int = USERS) -> list[dict[str, Any]]:
    """600 users (by default), 3 rows each. Distinct users who visited: a.com 600, b.com 300,
    c.com 100. Votes: Melon-pan 450, Gyudon 150, Natto 0. Willingness to pay: 1.00 for
    everyone (revenue p * 600 up to p = 1.00, then 0). Weights in [60, 80). Country: user % 3.
    More users keep every proportion (and so every answer)."""
    rows = []
    for user in range(users):
        sites = ["a.com", "b.com" if user % 2 else "a.com", "c.com" if user % 6 == 1 else "a.com"]
        for visit, site in enumerate(sites):
            rows.append(
                {
                    "user_id": f"u{user}",
                    "website": site,
                    "vote": PARTIES[0] if user % 4 == 0 else PARTIES[1],
                    "price": 1.0,
                    "weight": 60.0 + (user * 7 + visit) % 20,
                    "country": COUNTRIES[user % 3],
                }
            )
    return rows


def write_survey(directory: Path, fmt: str = "parquet", users: int = USERS) -> str:
    return write_export(directory, fmt, survey_rows(users), shards=3)


COMMON = ["--privacy_unit", "user_id", "--epsilon", "2.0"]


def check_document(out: Path, names: set[str]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((out / "release.json").read_text())
    identities = [
        (r["name"], json.dumps(r.get("key")), r.get("window")) for r in document["releases"]
    ]
    assert len(identities) == len(set(identities)), "a release was published twice"
    assert {r["name"] for r in document["releases"]} == names
    assert read_release_avro(out / "release.avro") == document
    assert (out / "report.html").is_file()
    budget = document["budget"]
    assert budget["epsilon_spent"] <= budget["epsilon_total"] * (1 + 1e-12)
    return document


def job_top_candidates(pattern: str, out: Path, flags: Sequence[str]) -> None:
    top_candidates.run(
        ["--input", pattern, *COMMON, "--candidate", "website", "--candidates", ",".join(SITES),
         "--k", "2", "--output", str(out), *flags]
    )  # fmt: skip
    (found,) = check_document(out, {"top_candidates"})["releases"]
    # 600 / 300 / 100 users: c.com in the top 2 has probability < 3 exp(-200 ε/4) per round
    assert found["value"] == ["a.com", "b.com"]


def job_best_price(pattern: str, out: Path, flags: Sequence[str]) -> None:
    best_price.run(
        ["--input", pattern, *COMMON, "--value", "price", "--prices", "0.05:2.00:0.05",
         "--output", str(out), *flags]
    )  # fmt: skip
    (found,) = check_document(out, {"best_price"})["releases"]
    # revenue 600 at 1.00; below 0.90 it is at least 60 lower (sensitivity 2): < 40 exp(-15)
    assert 0.90 <= found["value"] <= 1.00


def job_election(pattern: str, out: Path, flags: Sequence[str]) -> None:
    election.run(
        ["--input", pattern, *COMMON, "--candidate", "vote", "--candidates", ",".join(PARTIES),
         "--output", str(out), *flags]
    )  # fmt: skip
    (found,) = check_document(out, {"election"})["releases"]
    assert found["value"] == PARTIES[1]  # 450 votes to 150 and 0


def job_quantiles(pattern: str, out: Path, flags: Sequence[str]) -> None:
    quantiles.run(
        ["--input", pattern, *COMMON, "--value", "weight", "--quantiles", "0.25,0.75",
         "--lower", "0", "--upper", "200", "--num_points", "2001", "--output", str(out), *flags]
    )  # fmt: skip
    (found,) = check_document(out, {"quantiles"})["releases"]
    low, high = found["value"]
    # every row lies in [60, 80); a point outside is >= 150 ranks from either target
    assert 60.0 <= low <= high <= 80.0


RELEASE_CONFIG = """
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = 6.0

[[statistics]]
name = "sites"
type = "top_candidates"
candidate = "website"
candidates = ["a.com", "b.com", "c.com"]
k = 1
weight = 1

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
weight = 1

[[statistics]]
name = "vote_by_country"
type = "election"
candidate = "vote"
candidates = ["Gyudon Party", "Melon-pan Party", "Natto Party"]
key = "country"
keys = ["de", "fr", "jp"]
max_keys_per_unit = 1
weight = 1
"""

# (name, key) of every release the release job plans
RELEASE_PLAN = {("sites", None), ("median_weight", None)} | {
    ("vote_by_country", country) for country in COUNTRIES
}


def release_config(directory: Path, pattern: str) -> Path:
    config = directory / "job.toml"
    config.write_text(RELEASE_CONFIG.format(pattern=pattern))
    return config


def check_release(out: Path) -> None:
    document = check_document(out, {name for name, _ in RELEASE_PLAN})
    assert {(r["name"], r.get("key")) for r in document["releases"]} == RELEASE_PLAN
    by_name: dict[str, list[dict[str, Any]]] = {}
    for record in document["releases"]:
        by_name.setdefault(record["name"], []).append(record)
    assert by_name["sites"][0]["value"] == "a.com"  # 600 users to 300 and 100
    assert 60.0 <= by_name["median_weight"][0]["value"] <= 80.0
    for record in by_name["vote_by_country"]:
        assert record["value"] == PARTIES[1]  # 150 to 50 in each country


def job_release(pattern: str, out: Path, flags: Sequence[str]) -> None:
    config = release_config(out.parent, pattern)
    release.run(["--config", str(config), "--output", str(out), *flags])
    check_release(out)


JOBS: dict[str, Callable[[str, Path, Sequence[str]], None]] = {
    "top_candidates": job_top_candidates,
    "best_price": job_best_price,
    "election": job_election,
    "quantiles": job_quantiles,
    "release": job_release,
}
