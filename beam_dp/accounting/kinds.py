"""The mechanisms the accountant knows and the privacy guarantee each one carries.

A mechanism's *kind* decides how a budget composes it:

- ``"bounded_range"``: ε-DP and, because its privacy loss lies in an interval of width ε
  (ε-bounded range, Durfee–Rogers 2019), also ε²/8-zCDP (Cesar–Rogers 2021). Only the
  exponential mechanism has it, per round; top-k by peeling is k such rounds (one-shot
  Gumbel top-k has the same distribution, hence the same account).
- ``"pure"``: ε-DP only; under zCDP accounting it costs ε²/2 (Bun–Steinke 2016, Prop. 1.4).
  Permute-and-flip is here: its proven guarantee is ε-DP (McKenna–Sheldon 2020), so it must
  never be given the exponential mechanism's ε²/8 rate.
- ``"gaussian"``: natively ρ-zCDP (ρ = Δ²/(2σ²)); under basic composition it is treated as
  an (ε, δ)-DP mechanism.
- ``"approximate"``: (ε, δ)-DP with δ > 0 and no zCDP bound used (thresholded partition
  selection). Composed by basic composition in every mode.
"""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType
from typing import Literal

PrivacyKind = Literal["bounded_range", "pure", "gaussian", "approximate"]

MECHANISMS: MappingProxyType[str, PrivacyKind] = MappingProxyType(
    {
        "exponential": "bounded_range",
        "exponential_top_k": "bounded_range",
        "permute_and_flip": "pure",
        "permute_and_flip_top_k": "pure",
        "laplace": "pure",
        "gaussian": "gaussian",
        "partition_selection": "approximate",
    }
)
"""Known mechanism names (iterate for the names) mapped to their privacy kind."""

# zCDP cost per round of an ε-DP round, as a multiple of ε² (exact rationals).
ZCDP_RATE: MappingProxyType[PrivacyKind, Fraction] = MappingProxyType(
    {"bounded_range": Fraction(1, 8), "pure": Fraction(1, 2)}
)


def check_mechanism(mechanism: object, name: str = "mechanism") -> str:
    """Return ``mechanism`` if it is a known mechanism name, else raise ValueError."""
    if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
        raise ValueError(f"'{name}' must be one of {list(MECHANISMS)}; received {mechanism!r}")
    return mechanism


def privacy_kind(mechanism: str) -> PrivacyKind:
    """Return the privacy kind of a known mechanism (ValueError for an unknown name)."""
    return MECHANISMS[check_mechanism(mechanism)]
