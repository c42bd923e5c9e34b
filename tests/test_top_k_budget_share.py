"""A budget share named for a mechanism pays for its top-k form (issue 40, item 6).

The README's library example requests ``mechanism="permute_and_flip"`` for ``TopCandidates``;
with ``k=3`` the transform runs ``permute_and_flip_top_k``. A ``k`` above 1 picks the top-k
form of the mechanism the share names (same privacy kind: the share's rate is the one the
release is accounted at), and the budget records the release against that share. A share
for another mechanism is still refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from beam_dp import PrivacyBudget, TopCandidates
from beam_dp.release import Release

REPO = Path(__file__).resolve().parents[1]
SITES = ["a.com", "b.com", "c.com", "d.com"]
ROWS = [{"user_id": f"u{i}", "site": SITES[i % 4], "age": 20 + i % 50} for i in range(400)]


def _run_and_check(share: Any, check: Any, **options: Any) -> None:
    """Run TopCandidates in process; ``check`` receives the list of releases (in the runner)."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        releases = (
            p
            | beam.Create(ROWS)
            | TopCandidates.Globally(
                candidate_column="site", candidates=SITES, unit_column="user_id", epsilon=share,
                **options,
            )
        )  # fmt: skip
        assert_that(releases, check)


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_a_share_for_a_mechanism_pays_for_its_top_k_form(method: str) -> None:
    budget = PrivacyBudget(epsilon=2.0)
    sites = budget.request("top_sites", mechanism=method, rounds=3)
    budget.finalize()

    def check(releases: list[Release]) -> None:
        (release,) = releases
        assert len(release.value) == 3 and set(release.value) <= set(SITES)
        assert release.ledger.mechanism == f"{method}_top_k"
        budget.record(release.ledger)  # the share pays for it (a copy of the budget, here)
        assert budget.to_json()["epsilon_spent"] == pytest.approx(2.0)

    _run_and_check(sites, check, k=3, method=method)


def test_a_share_for_another_mechanism_is_still_refused() -> None:
    budget = PrivacyBudget(epsilon=2.0)
    sites = budget.request("top_sites", mechanism="permute_and_flip", rounds=3)
    budget.finalize()
    with pytest.raises(ValueError, match="requested for mechanism 'permute_and_flip'"):
        TopCandidates.Globally(
            candidate_column="site", candidates=SITES, unit_column="user_id", epsilon=sites,
            k=3, method="exponential",
        )  # fmt: skip
    one_round = PrivacyBudget(2.0)
    share = one_round.request("s", mechanism="permute_and_flip")
    one_round.finalize()
    with pytest.raises(ValueError, match="request it with rounds=3"):  # k rounds, as before
        TopCandidates.Globally(
            candidate_column="site", candidates=SITES, unit_column="user_id", epsilon=share, k=3,
        )  # fmt: skip


def _library_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Library\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


def test_the_readme_library_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = _library_block()
    assert 'mechanism="permute_and_flip"' in block and "TopCandidates.Globally(" in block
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "export-00000.parquet")
    original = beam.Pipeline.__init__

    def in_process(self: beam.Pipeline, runner: Any = None, *args: Any, **kwargs: Any) -> None:
        original(self, FnApiRunner() if runner is None else runner, *args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "__init__", in_process)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
