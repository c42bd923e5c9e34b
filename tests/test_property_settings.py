"""The key properties explore fresh examples even when CI derandomizes Hypothesis."""

from __future__ import annotations

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
