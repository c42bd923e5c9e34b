"""DP key selection: keep the labels whose noisy distinct-unit count clears a threshold.

When the candidates are not public (websites in the wild), a label read from the data may only
be released if enough privacy units hold it. This module releases the *set* of labels whose
count plus exact discrete Laplace noise reaches a threshold (the "Laplace thresholding" of
Korolova et al. 2009 and Google's/PipelineDP's ``select_partitions``), sampled exactly.

Let every privacy unit contribute to at most ``c`` distinct labels (enforced by contribution
bounding) and let ``n_l`` be the number of distinct units holding label ``l``. Each label present
in the data is kept when ``n_l + Z_l >= T``, with ``Z_l`` independent discrete Laplace noise,
``P(Z = z) ∝ exp(-|z| ε / c)``, and the threshold ``T`` the smallest integer such that a label
held by a single unit is kept with probability at most ``δ / c``.

Privacy (add/remove one unit, which holds at most ``c`` labels):

* labels present in both datasets: their count vectors differ by at most one on at most ``c``
  labels (L1 distance ``c``), and discrete Laplace noise of scale ``c / ε`` makes the noisy
  vector ε-DP; keeping the ones above ``T`` is post-processing.
* labels that only the added unit holds (at most ``c``): each is kept with probability at most
  ``δ / c``, so any of them with probability at most ``δ`` (a union bound).

Together: (ε, δ)-DP. Without δ no threshold works (a label held by one unit would appear with
positive probability in one dataset and never in its neighbour), hence the error in
:func:`check_key_selection`.

Discrete Laplace samples are exact (:func:`beam_dp.mechanisms.noise.discrete_laplace`,
Canonne, Kamath and Steinke 2020; imported here too, where it first lived), at
``scale = c / ε`` (ε as the exact rational its float denotes).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    to_fraction,
)
from beam_dp.mechanisms.noise import discrete_laplace
from beam_dp.mechanisms.randomness import RandomSource

__all__ = [
    "DEFAULT_MAX_LABELS",
    "check_key_selection",
    "discrete_laplace",
    "key_selection_threshold",
    "padded_labels",
    "release_probability",
    "select_keys",
    "sure_release_count",
]


NO_DELTA_HINT = (
    "DP key selection needs delta > 0: a label held by a single privacy unit is released with "
    "some probability when that unit is present and never when it is absent, which no pure "
    "epsilon-DP mechanism allows; delta bounds that probability. Set delta well below "
    "1 / (number of privacy units), e.g. 1e-6 or 1e-9, or pass the candidates as a public list "
    "instead (then no delta is needed)"
)


def check_key_selection(epsilon: object, delta: object, max_keys_per_unit: object) -> None:
    """Validate key-selection parameters; a missing or zero ``delta`` gets an explanation.

    Raises:
        ValueError: epsilon not > 0 and finite, delta not in (0, 1) (with the reason why it is
            needed), or ``max_keys_per_unit`` not an integer >= 1.
    """
    check_positive_finite(epsilon, "epsilon")
    is_number = isinstance(delta, (int, float, Fraction)) and not isinstance(delta, bool)
    if delta is None or (is_number and float(delta) == 0.0):  # type: ignore[arg-type]
        raise ValueError(f"'delta' is {delta!r}. {NO_DELTA_HINT}")
    check_probability_open(delta, "delta")
    check_positive_int(max_keys_per_unit, "max_keys_per_unit")


def _scale(epsilon: float | Fraction, max_keys_per_unit: int) -> Fraction:
    return Fraction(max_keys_per_unit) / to_fraction(epsilon, "epsilon")


def _tail(k: int, log_a: float) -> float:
    """``P(Z >= k) = a**k / (1 + a)`` for k >= 1, with ``a = exp(log_a)``."""
    return math.exp(k * log_a - math.log1p(math.exp(log_a)))


def key_selection_threshold(epsilon: float | Fraction, delta: float, max_keys_per_unit: int) -> int:
    """The smallest integer ``T`` such that ``P(1 + Z >= T) <= delta / max_keys_per_unit``.

    ``Z`` is the discrete Laplace noise of :func:`select_keys`. Then a label held by a single
    unit is released with probability at most ``delta / max_keys_per_unit``, and any of the
    up to ``max_keys_per_unit`` labels a unit alone holds with probability at most ``delta``.
    """
    check_key_selection(epsilon, delta, max_keys_per_unit)
    log_a = -float(to_fraction(epsilon, "epsilon")) / max_keys_per_unit
    target = float(delta) / max_keys_per_unit
    # P(Z >= k) = a^k / (1 + a) <= target  <=>  k >= (ln target + ln(1 + a)) / ln a.
    k = max(1, math.ceil((math.log(target) + math.log1p(math.exp(log_a))) / log_a))
    # Guard the float arithmetic at the boundary: move to the exact smallest k.
    while k > 1 and _tail(k - 1, log_a) <= target * (1 - 1e-12):
        k -= 1
    while _tail(k, log_a) > target * (1 - 1e-12):
        k += 1
    return 1 + k


def release_probability(
    count: int, epsilon: float | Fraction, delta: float, max_keys_per_unit: int
) -> float:
    """``P(count + Z >= T)``: the probability that a label with this count is released."""
    threshold = key_selection_threshold(epsilon, delta, max_keys_per_unit)
    log_a = -float(to_fraction(epsilon, "epsilon")) / max_keys_per_unit
    gap = threshold - int(count)
    if gap >= 1:
        return _tail(gap, log_a)
    # P(Z >= gap) = 1 - P(Z <= gap - 1) = 1 - P(Z >= 1 - gap) by symmetry.
    return 1.0 - _tail(1 - gap, log_a)


def sure_release_count(
    epsilon: float | Fraction, delta: float, max_keys_per_unit: int, confidence: float
) -> int:
    """The smallest count whose label is released with probability at least ``confidence``."""
    check_probability_open(confidence, "confidence")
    threshold = key_selection_threshold(epsilon, delta, max_keys_per_unit)
    count = threshold
    while release_probability(count, epsilon, delta, max_keys_per_unit) < confidence:
        count += 1
    return count


#: The public number of labels whose noise :func:`select_keys` always draws (its padding).
DEFAULT_MAX_LABELS = 1 << 16


def padded_labels(labels: int, max_labels: int) -> int:
    """The number of noise draws for ``labels`` labels: whole blocks of ``max_labels``, >= 1.

    ``max_labels`` when ``labels <= max_labels`` (a public number, whatever the data hold);
    beyond it, the next multiple of ``max_labels`` (the rule of :func:`select_keys`).
    """
    return max_labels * max(1, -(-labels // max_labels))


def select_keys(
    counts: npt.ArrayLike,
    *,
    epsilon: float | Fraction,
    delta: float,
    max_keys_per_unit: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    rng: RandomSource | np.random.Generator | None = None,
) -> npt.NDArray[np.bool_]:
    """Decide, for each label present in the data, whether it is released.

    Args:
        counts: the number of distinct privacy units holding each label (every entry >= 1:
            only labels present in the data are passed; absent labels are never released).
        epsilon: > 0 and finite.
        delta: in (0, 1): bounds the probability that labels held by one unit appear.
        max_keys_per_unit: the bound on distinct labels per unit that the pipeline enforced.
        max_labels: the public number of labels the work is padded to (default
            :data:`DEFAULT_MAX_LABELS`, 65 536); set it above the distinct labels expected.
            It changes no release, only the work (see Timing).
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests.

    Returns:
        A boolean mask over ``counts``: True for the released labels.

    Privacy:
        (epsilon, delta)-DP under add/remove of one privacy unit (see the module docstring).
        Only the set of released labels may be published, never the noisy counts.

    Timing (``docs/timing.md``):
        The number of labels present, ``L``, is private (one unit adds up to
        ``max_keys_per_unit`` of them), so the work must not follow it. The noise is drawn
        for ``padded_labels(L, max_labels)`` lanes, ``max_labels`` whenever
        ``L <= max_labels``: label ``i`` is decided by lane ``i``, the other lanes are drawn
        and compared like the rest (against a count of 1) and discarded. The lanes are
        independent with one law (every loop of :func:`discrete_laplace` redraws lanes
        independently of the others' values), so the first ``L`` of them have the law of
        ``L`` independent draws: each label is released with probability
        ``P(n_l + Z >= T)``, independently, exactly as without padding. Every request for
        random bits, and every pass of every loop, is then a function of ``max_labels``,
        ``epsilon`` and ``max_keys_per_unit`` and of bits already drawn (not of the counts,
        which are read only by the final comparison).

        Past the bound the rule is: whole further blocks of ``max_labels`` lanes, never a
        truncation. Which labels to drop past a bound would depend on the others present
        (a unit's new labels could push out a label that many units hold, and the release
        would lose it with certainty: no (ε, δ) covers that), and failing would publish
        ``L > max_labels`` as surely; a further block keeps the release law and makes the
        work reveal ``ceil(L / max_labels)`` alone, which a unit can move only where ``L``
        lies within ``max_keys_per_unit`` of a multiple of ``max_labels``.
    """
    check_key_selection(epsilon, delta, max_keys_per_unit)
    check_positive_int(max_labels, "max_labels")
    values = np.asarray(counts, dtype=np.int64).ravel()
    if values.size and int(values.min()) < 1:
        raise ValueError("'counts' must be >= 1: only labels present in the data are passed")
    threshold = key_selection_threshold(epsilon, delta, max_keys_per_unit)
    lanes = padded_labels(values.size, max_labels)
    padded = np.ones(lanes, dtype=np.int64)  # the padding lanes: a count of 1, discarded
    padded[: values.size] = values
    noise = discrete_laplace(_scale(epsilon, max_keys_per_unit), lanes, rng)
    decided: npt.NDArray[np.bool_] = (padded + noise) >= threshold
    released: npt.NDArray[np.bool_] = decided[: values.size]
    return released
