"""Generate the bundled sample export (a small synthetic Avro export), reproducibly.

`python -m pipelines.make_sample_data` writes ``sample_data/survey/export-0000{0,1,2}.avro``:
one row per (respondent, website visit), with the respondent's country, willingness to pay for
an app, vote and body weight repeated on each of their rows, as a warehouse export of a joined
table would. Respondents are spread across the three shards, so contribution bounding has to
bring each respondent's rows together. Also writes the seed 003 weights table
(``sample_data/weights/export-00000.avro``: Alice 40, Bob 60, Charles 80, Dee 60).

Synthetic data only: fixed seed, no real person.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import fastavro
import numpy as np

WEBSITES = [f"site{i:02d}.example" for i in range(40)]
COUNTRIES = ["de", "fr", "jp", "us"]
_SYNC = b"beam-dp-sample!!"  # a fixed Avro sync marker: the files are byte-reproducible
PARTIES = ["Gyudon Party", "Melon-pan Party", "Natto Party"]

_SURVEY_SCHEMA = {
    "type": "record",
    "name": "SurveyVisit",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "website", "type": "string"},
        {"name": "willingness_to_pay", "type": ["null", "double"]},
        {"name": "vote", "type": "string"},
        {"name": "weight_kg", "type": "double"},
    ],
}
_WEIGHTS_SCHEMA = {
    "type": "record",
    "name": "Person",
    "fields": [{"name": "name", "type": "string"}, {"name": "weight", "type": "double"}],
}


def survey_rows(num_users: int, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, len(WEBSITES) + 1) ** 1.1  # a Zipf-like heavy hitter
    popularity /= popularity.sum()
    rows: list[dict[str, object]] = []
    for user in range(num_users):
        country = COUNTRIES[int(rng.integers(len(COUNTRIES)))]
        pay = float(np.round(np.clip(rng.lognormal(-0.6, 0.5), 0.0, 3.0), 2))
        vote = PARTIES[int(rng.choice(3, p=[0.3, 0.5, 0.2]))]
        weight = float(np.round(rng.normal(70.0, 12.0), 1))
        for _ in range(int(rng.integers(1, 6))):
            rows.append(
                {
                    "user_id": f"user-{user:05d}",
                    "country": country,
                    "website": WEBSITES[int(rng.choice(len(WEBSITES), p=popularity))],
                    "willingness_to_pay": pay,
                    "vote": vote,
                    "weight_kg": weight,
                }
            )
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def write(directory: Path, num_users: int = 3000, seed: int = 2026) -> None:
    survey = directory / "survey"
    survey.mkdir(parents=True, exist_ok=True)
    rows = survey_rows(num_users, seed)
    for shard in range(3):
        with (survey / f"export-{shard:05d}.avro").open("wb") as handle:
            fastavro.writer(
                handle, _SURVEY_SCHEMA, rows[shard::3], codec="deflate", sync_marker=_SYNC
            )
    weights = directory / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    people = [("Alice", 40.0), ("Bob", 60.0), ("Charles", 80.0), ("Dee", 60.0)]
    with (weights / "export-00000.avro").open("wb") as handle:
        fastavro.writer(
            handle,
            _WEIGHTS_SCHEMA,
            [{"name": n, "weight": w} for n, w in people],
            sync_marker=_SYNC,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="sample_data", help="directory to write into")
    parser.add_argument("--num_users", type=int, default=3000)
    args = parser.parse_args()
    write(Path(args.output), args.num_users)


if __name__ == "__main__":
    main()
