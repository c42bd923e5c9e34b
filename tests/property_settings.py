"""Hypothesis settings for the key properties: fresh random examples on every run.

CI loads the ``ci`` profile (tests/conftest.py), which derandomizes Hypothesis so that a
failure there is reproducible. A derandomized property sees the same examples forever, so a
counterexample outside them can hide for good (the zCDP planner property did: it failed only
with a random seed). The key properties are therefore decorated with :func:`fresh_examples`:
whatever the profile, they draw new examples on every run (a bounded number, so the suite
stays fast), keep no example database, and print the blob that reproduces a failure
(``@reproduce_failure``). ``HYPOTHESIS_PROFILE=fresh`` runs every property that way.
"""

from __future__ import annotations

from hypothesis import settings


def fresh_examples(max_examples: int) -> settings:
    """Settings for a key property: ``max_examples`` new random examples on every run."""
    return settings(
        max_examples=max_examples,
        derandomize=False,
        database=None,
        deadline=None,
        print_blob=True,
    )
