"""A private distribution of a column: exact KS synthetic samples on a public grid (seed 004).

The mechanism, its privacy and its exact sampler are described in :mod:`.ks`; its public
names are listed once, in ``__all__`` below.
"""

from beam_dp.mechanisms.cdf.ks import (
    MAX_CELLS,
    KSMechanism,
    cumulative_counts_from_slots,
    ks_accuracy_bound,
    ks_deviation,
    ks_pmf_bruteforce,
    ks_suggested_k,
    sample_ks_synthetic,
)

__all__ = [
    "MAX_CELLS",
    "KSMechanism",
    "cumulative_counts_from_slots",
    "ks_accuracy_bound",
    "ks_deviation",
    "ks_pmf_bruteforce",
    "ks_suggested_k",
    "sample_ks_synthetic",
]
