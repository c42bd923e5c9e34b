"""The key properties explore fresh examples even when CI derandomizes Hypothesis."""

from __future__ import annotations

import ast
import random
from pathlib import Path

from hypothesis import settings
from property_settings import fresh_examples


def test_the_ci_profile_is_derandomized_and_the_fresh_one_is_not() -> None:
    assert settings.get_profile("ci").derandomize
    assert not settings.get_profile("fresh").derandomize
    assert settings.get_profile("fresh").database is None


def test_fresh_examples_are_random_and_bounded_whatever_the_profile() -> None:
    # Explicit settings override the loaded profile (``ci`` when CI is set: derandomized).
    chosen = fresh_examples(7)
    assert not chosen.derandomize
    assert chosen.database is None
    assert chosen.max_examples == 7
    assert chosen.print_blob


def test_no_profile_has_a_deadline() -> None:
    # A deadline is a timing assertion: on a loaded shared machine it fails without a bug.
    for name in ("ci", "fresh", "local"):
        assert settings.get_profile(name).deadline is None
    assert settings.default.deadline is None


def _global_random_calls(tree: ast.AST) -> list[int]:
    """Lines that call a function of the random module itself (its shared global state)."""
    shared = {name for name in dir(random) if callable(getattr(random, name))} - {
        "Random",
        "SystemRandom",
    }

    def uses_shared_state(node: ast.AST) -> bool:
        if isinstance(node, ast.ImportFrom):
            return node.module == "random" and any(alias.name in shared for alias in node.names)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
            and node.func.attr in shared
        )

    lines = [node.lineno for node in ast.walk(tree) if uses_shared_state(node)]
    return sorted(lines)


def test_no_test_draws_from_the_global_random_module() -> None:
    # pyproject.toml ignores Hypothesis's warning about the global random module changing
    # during a draw (threads of Beam and Dask draw from it); this keeps what the warning
    # guarded: our tests and strategies use their own random.Random(seed), or Hypothesis.
    tests = Path(__file__).parent
    offenders = {
        str(path.relative_to(tests)): lines
        for path in sorted(tests.rglob("*.py"))
        if (lines := _global_random_calls(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_global_random_check_finds_a_call_and_an_import() -> None:
    source = "import random\nfrom random import choice\nx = random.random()\nr = random.Random(1)\n"
    assert _global_random_calls(ast.parse(source)) == [2, 3]
