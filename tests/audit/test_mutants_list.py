"""The privacy mutant list (``tools/mutants.toml``) stays anchored, and its harness says so.

``make mutants`` runs every mutant against its tests (minutes); this module checks in
seconds what can go wrong between runs: a snippet that no longer occurs exactly once in its
file (the code it guards moved: update the list with the change), and the harness's own
verdicts on a small tree.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("beam_dp_mutants", ROOT / "tools/mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


mutants = _harness()
LISTED = mutants.load()


@pytest.mark.parametrize("mutant", LISTED, ids=[m.id for m in LISTED])
def test_every_listed_mutant_is_anchored_once_and_changes_valid_code(mutant: Any) -> None:
    path = ROOT / mutant.file
    text = path.read_text(encoding="utf-8")
    found = text.count(mutant.find)
    assert found == 1, (
        f"{mutant.id}: its snippet occurs {found} times in {mutant.file}; "
        "update tools/mutants.toml with the code it guards"
    )
    mutated = text.replace(mutant.find, mutant.replace)
    assert mutated != text
    compile(mutated, str(path), "exec")


def test_the_list_covers_every_kind_of_privacy_critical_line() -> None:
    files = {m.file for m in LISTED}
    for needed in (
        "beam_dp/summaries/quantiles/recursive.py",  # the pair node and the recursive levels
        "beam_dp/summaries/contribution_bounds.py",  # the auto choices
        "beam_dp/batching/bounding.py",  # contribution bounds
        "beam_dp/beam/_transform.py",  # budget splits over keys and windows
        "beam_dp/ledger/_runs.py",  # the ledger's state checks
        "beam_dp/batching/hashing.py",  # the identity of a person
    ):
        assert needed in files, needed
    assert any(m.id == "pair-node-rate" for m in LISTED)


def test_the_docs_table_names_every_listed_mutant() -> None:
    readme = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    table = readme[readme.index("The list, by what each mutant breaks:") :]
    table = table[: table.index("Why its own harness")]
    missing = [m.id for m in LISTED if f"`{m.id}`" not in table]
    assert not missing, f"add these mutants to docs/testing.md's table: {missing}"


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "rate.py").write_text("RATE = 1 / (2 * 3)\nOTHER = 2 * 3\n")
    return tmp_path


@pytest.mark.parametrize(
    ("find", "replace", "status"),
    [
        ("RATE = 1 / (2 * 3)", "RATE = 1 / 3", None),  # applied
        ("RATE = 1 / (4 * 3)", "RATE = 1 / 3", "stale"),  # the code moved on
        ("2 * 3", "3", "ambiguous"),  # occurs twice
        ("RATE = 1 / (2 * 3)", "RATE = 1 / (2 * 3", "invalid"),  # does not compile
        ("RATE = 1 / (2 * 3)", "RATE = 1 / (2 * 3)", "invalid"),  # changes nothing
    ],
)
def test_the_harness_applies_a_mutant_only_where_its_snippet_is_unique(
    tmp_path: Path, find: str, replace: str, status: str | None
) -> None:
    tree = _tree(tmp_path)
    before = (tree / "pkg" / "rate.py").read_text()
    mutant = mutants.Mutant("m", "pkg/rate.py", find, replace, ("tests",), "why")
    applied = mutants._apply(tree, mutant)
    after = (tree / "pkg" / "rate.py").read_text()
    if status is None:
        assert applied == (before, str(tree / "pkg" / "rate.py"))
        assert after == before.replace(find, replace)
    else:
        assert applied == status
        assert after == before  # nothing written


def test_a_summary_counts_only_killed_mutants() -> None:
    def outcome(status: str) -> Any:
        return mutants.Outcome(mutants.Mutant(status, "f", "a", "b", ("t",), "w"), status, 1.0)

    text = mutants.summary([outcome("killed"), outcome("survived"), outcome("stale")])
    assert text.startswith("killed 1 of 3 mutants (33%)")
    assert "survived (survived)" in text and "stale (stale)" in text
