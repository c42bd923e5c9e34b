"""A private distribution of a column: exact KS synthetic samples on a public grid.

The mechanism: Wasserman and Zhou (2010), exactly sampled.

Modules, by concern: :mod:`.ks` (the mechanism, its privacy and its exact sampler),
:mod:`.params` (validated parameters), :mod:`.bands` (counting and drawing lattice paths),
:mod:`.plan` (how the sampler's blocks are chosen: cost only), :mod:`.exact_reals` (exact
draws mixing big integers and exponentials), :mod:`.accuracy` (public error bounds) and
:mod:`.release` (the frozen release a pipeline returns). The public names are listed once, in
``__all__`` below.
"""

from beam_dp.mechanisms.cdf.accuracy import count_error_bound, ks_accuracy_bound, ks_suggested_k
from beam_dp.mechanisms.cdf.ks import (
    cumulative_counts_from_slots,
    ks_deviation,
    ks_pmf_bruteforce,
    sample_ks_synthetic,
)
from beam_dp.mechanisms.cdf.params import MAX_CELLS, KSMechanism, KSParameters
from beam_dp.mechanisms.cdf.release import (
    DEFAULT_COUNT_SHARE,
    KSRelease,
    release_count,
    release_ks_cdf,
)

__all__ = [
    "DEFAULT_COUNT_SHARE",
    "MAX_CELLS",
    "KSMechanism",
    "KSParameters",
    "KSRelease",
    "count_error_bound",
    "cumulative_counts_from_slots",
    "ks_accuracy_bound",
    "ks_deviation",
    "ks_pmf_bruteforce",
    "ks_suggested_k",
    "release_count",
    "release_ks_cdf",
    "sample_ks_synthetic",
]
