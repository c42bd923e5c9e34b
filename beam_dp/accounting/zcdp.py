"""Zero-concentrated DP (zCDP): per-mechanism costs and conversion to (ε, δ)-DP.

A mechanism is ρ-zCDP when the Rényi divergence of every order α > 1 between its outputs on
neighbouring datasets is at most ρα (Bun–Steinke 2016). Costs add under composition.

- The exponential mechanism at ε is ε²/8-zCDP (bounded range; Cesar–Rogers 2021):
  :func:`em_rho`.
- Any ε-DP mechanism is ε²/2-zCDP (Bun–Steinke 2016, Prop. 1.4): :func:`pure_rho`.
- ρ-zCDP implies (ε, δ)-DP for every δ in (0, 1). :func:`zcdp_to_approx_dp` uses the
  Rényi-to-(ε, δ) conversion of Canonne–Kamath–Steinke 2020 at every order α, where the
  Rényi divergence is at most αρ, and takes the best order::

      ε(ρ, δ) = inf over α > 1 of  αρ + (log(1/δ) + (α−1)·log(1 − 1/α) − log α) / (α − 1)

  and :func:`zcdp_to_approx_dp_bun_steinke` the simpler ρ + 2√(ρ·log(1/δ)) (Bun–Steinke 2016,
  Prop. 1.3), which is never smaller.

Numerics of the tight conversion. Write u = α − 1 and L = log(1/δ). The objective is
``f(u) = (1 + u)ρ − log(1 + 1/u) + (L − log(1 + u))/u`` and its derivative is
``ρ − (L − log(1 + u))/u²``, so f decreases then increases: the minimiser is the unique root
of ``ρu² + log(1 + u) = L``, which lies in ``(0, min(√(L/ρ), 1/δ − 1)]``. We bisect that root
in log-space to adjacent floats. Whatever u comes out, f(u) is itself a valid ε (the
conversion holds for every α), so an inexact minimiser can only make the answer larger, never
smaller; the returned value is ``f(u)`` at the best of the bracket ends and the Bun–Steinke
point, plus a margin of 8 machine epsilons times the magnitudes of the terms of f, which
covers floating-point rounding in evaluating f. Since f is flat at its minimiser, the
excess over the infimum is essentially that margin, about 1e-15 times the size of the terms
of f (tests compare with a brute-force grid to 1e-9 absolute).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

from beam_dp._rational import float_at_least, float_at_most
from beam_dp._validation import (
    check_non_negative_finite,
    check_positive_finite,
    check_positive_int,
)
from beam_dp.accounting._checks import check_delta
from beam_dp.accounting.kinds import ZCDP_RATE

ZCDP_DELTA_HINT = "zCDP accounting converts to (ε, δ); set delta > 0 or use composition='basic'"
# Margin added to every evaluated bound, in units of the magnitudes of its terms.
_ROUNDING_MARGIN = 8 * sys.float_info.epsilon
# Relative width at which the inverse conversion stops bisecting.
_INVERSE_TOLERANCE = 2.0**-40
_EM_RATE = ZCDP_RATE["bounded_range"]


#: The largest float <= a rational (a budget left over is never overstated). The one rounding
#: rule of the package, :func:`beam_dp._rational.float_at_most`, under the accountant's name.
floor_float = float_at_most
#: The smallest float >= a rational (a cost is never understated):
#: :func:`beam_dp._rational.float_at_least`.
ceil_float = float_at_least


def rho_for_epsilon(epsilon: float, rate: Fraction, rounds: int = 1) -> float:
    """zCDP cost of ``rounds`` rounds at ``epsilon / rounds`` each, rounded up.

    Args:
        epsilon: Total ε over the rounds.
        rate: ρ per ε² of one round (1/8 for the exponential mechanism, 1/2 for pure ε-DP).
        rounds: Number of equal rounds the total is split into.

    Returns:
        The smallest float >= ``rate · epsilon² / rounds``.
    """
    return ceil_float(rate * Fraction(epsilon) ** 2 / rounds)


def epsilon_per_round_for_rho(rho: float, rate: Fraction, rounds: int = 1) -> float:
    """Largest per-round ε whose ``rounds`` rounds cost at most ``rho`` (exactly checked).

    Inverse of :func:`rho_for_epsilon`: returns the largest float ε with
    ``rounds · rate · ε² <= rho`` as rationals, so a caller that recomputes ρ from this ε
    never exceeds ``rho``.
    """
    budget = Fraction(rho)
    epsilon = math.sqrt(float(budget / (rate * rounds)))
    while rounds * rate * Fraction(epsilon) ** 2 > budget:
        epsilon = math.nextafter(epsilon, 0.0)
    for _ in range(4):  # sqrt is correctly rounded: at most a step or two is left
        larger = math.nextafter(epsilon, math.inf)
        if rounds * rate * Fraction(larger) ** 2 > budget:
            break
        epsilon = larger
    return epsilon


def em_rho(epsilon: float) -> float:
    """zCDP cost ε²/8 of one exponential-mechanism selection at ``epsilon``.

    Privacy:
        The exponential mechanism at ε (``exp(ε q / 2Δ)``, or ``exp(ε q / Δ)`` for monotone
        scores) has privacy loss in an interval of width ε (ε-bounded range), hence is
        ε²/8-zCDP (Cesar–Rogers 2021). Permute-and-flip does not get this rate: use
        :func:`pure_rho`.
    """
    check_positive_finite(epsilon, "epsilon")
    return float(epsilon) ** 2 / 8


def pure_rho(epsilon: float) -> float:
    """zCDP cost ε²/2 of any ε-DP mechanism (Bun–Steinke 2016, Prop. 1.4)."""
    check_positive_finite(epsilon, "epsilon")
    return float(epsilon) ** 2 / 2


def _check_conversion_delta(delta: float) -> float:
    as_float = check_delta(delta)
    if as_float == 0.0:
        raise ValueError(f"'delta' must be > 0; received {delta!r}: {ZCDP_DELTA_HINT}")
    return as_float


def _cks_bound(u: float, rho: float, log_inv_delta: float) -> float:
    """CKS bound at α = 1 + u, plus a margin covering rounding in its evaluation."""
    linear = (1.0 + u) * rho
    log_term = math.log1p(1.0 / u)  # = −log(1 − 1/α) ≥ 0
    log1p_u = math.log1p(u)
    ratio = (log_inv_delta - log1p_u) / u
    margin = _ROUNDING_MARGIN * (linear + log_term + (log_inv_delta + log1p_u) / u)
    return linear - log_term + ratio + margin


def zcdp_to_approx_dp(rho: float, delta: float) -> float:
    """An ε such that every ρ-zCDP mechanism is (ε, δ)-DP: the CKS 2020 conversion.

    The infimum over orders α of the Canonne–Kamath–Steinke 2020 bound (see the module
    docstring for the formula and the numerics). The answer is conservative: it is never
    below that infimum, and exceeds it by about 1e-15 times the size of its terms. It is not the
    exact privacy profile of any particular mechanism (the Gaussian mechanism, for one, is
    (ε', δ)-DP at a somewhat smaller ε').

    Args:
        rho: zCDP parameter, >= 0 and finite.
        delta: Target δ, strictly between 0 and 1.

    Returns:
        ε >= 0. A bound that comes out negative (tiny ρ, large δ) is clamped to 0, since
        (0, δ)-DP then holds.

    Raises:
        ValueError: if ``rho`` is negative or not finite, or ``delta`` is not in (0, 1).

    Privacy:
        Valid for any ρ-zCDP mechanism under the relation its ρ was computed for.
    """
    check_non_negative_finite(rho, "rho")
    delta_f = _check_conversion_delta(delta)
    rho_f = float(rho)
    if rho_f == 0.0:
        return 0.0
    log_inv_delta = -math.log(delta_f)
    bun_steinke_u = math.sqrt(log_inv_delta / rho_f)
    hi = bun_steinke_u
    if log_inv_delta < 700.0:  # 1/δ − 1 is finite
        hi = min(hi, math.expm1(log_inv_delta))
    if not math.isfinite(hi):
        hi = sys.float_info.max
    # ρu² + log(1+u) − L is increasing in u, >= 0 at hi and < 0 at lo.
    lo = min(hi, log_inv_delta) / 2.0
    while True:
        mid = math.sqrt(lo) * math.sqrt(hi)
        if not lo < mid < hi:
            break
        if rho_f * mid * mid + math.log1p(mid) < log_inv_delta:
            lo = mid
        else:
            hi = mid
    candidates = [lo, hi]
    if math.isfinite(bun_steinke_u):
        candidates.append(bun_steinke_u)
    best = min(_cks_bound(u, rho_f, log_inv_delta) for u in candidates)
    return max(0.0, best)


def zcdp_to_approx_dp_bun_steinke(rho: float, delta: float) -> float:
    """The simple conversion ε = ρ + 2√(ρ·log(1/δ)) (Bun–Steinke 2016, Prop. 1.3).

    Never smaller than :func:`zcdp_to_approx_dp`; kept for comparison and tests.
    """
    check_non_negative_finite(rho, "rho")
    delta_f = _check_conversion_delta(delta)
    rho_f = float(rho)
    return rho_f + 2.0 * math.sqrt(rho_f * -math.log(delta_f))


def approx_dp_to_zcdp(epsilon: float, delta: float) -> float:
    """Largest ρ whose conversion :func:`zcdp_to_approx_dp` at ``delta`` is <= ``epsilon``.

    Bisection on ρ (the conversion is increasing in ρ). The returned ρ always satisfies
    ``zcdp_to_approx_dp(ρ, delta) <= epsilon`` as evaluated, and is within a relative
    2^-40 (about 1e-12) below the largest such ρ.

    Args:
        epsilon: Total ε, > 0 and finite.
        delta: Total δ for the conversion, strictly between 0 and 1.

    Returns:
        The ρ budget that a zCDP accountant may spend to stay within (ε, δ)-DP.
    """
    check_positive_finite(epsilon, "epsilon")
    delta_f = _check_conversion_delta(delta)
    epsilon_f = float(epsilon)
    lo, hi = 0.0, epsilon_f
    while zcdp_to_approx_dp(hi, delta_f) <= epsilon_f:
        lo, hi = hi, 2.0 * hi
    while hi - lo > _INVERSE_TOLERANCE * hi:
        mid = (lo + hi) / 2.0
        if zcdp_to_approx_dp(mid, delta_f) <= epsilon_f:
            lo = mid
        else:
            hi = mid
    return lo


def approx_dp_epsilon_for_em_rounds(epsilon_per_round: float, rounds: int, delta: float) -> float:
    """(ε, δ)-DP of ``rounds`` exponential-mechanism selections at ``epsilon_per_round``.

    Composes ``rounds · ε²/8`` by zCDP and converts with :func:`zcdp_to_approx_dp`. Compare
    with basic composition, ``rounds · epsilon_per_round``; take the smaller if you only
    need a bound.
    """
    check_positive_finite(epsilon_per_round, "epsilon_per_round")
    check_positive_int(rounds, "rounds")
    rho = ceil_float(int(rounds) * _EM_RATE * Fraction(epsilon_per_round) ** 2)
    return zcdp_to_approx_dp(rho, delta)


def em_epsilon_per_round(epsilon: float, delta: float, rounds: int) -> float:
    """Largest ε per exponential-mechanism selection so ``rounds`` of them fit (ε, δ).

    The zCDP counterpart of ``epsilon / rounds``: ``√(8ρ/rounds)`` with
    ``ρ = approx_dp_to_zcdp(epsilon, delta)``, rounded down.

    Privacy:
        Only for the exponential mechanism (bounded range). For permute-and-flip or any
        other pure ε-DP mechanism, the zCDP rate is ε²/2 and basic composition is usually
        better for few rounds.
    """
    check_positive_int(rounds, "rounds")
    rho = approx_dp_to_zcdp(epsilon, delta)
    return epsilon_per_round_for_rho(rho, _EM_RATE, int(rounds))
