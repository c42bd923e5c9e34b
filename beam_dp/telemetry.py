"""What a pipeline may report about its data outside a release: public facts by default.

Logs and metrics leave the trust boundary on every managed runner (Dataflow's console, Flink's
web UI, a Dask dashboard). By default beam-dp reports only public facts there: stage names,
files opened, elapsed time, progress in files or bytes. Exact data-dependent counts (rows
read, rows dropped by contribution bounding, bad records skipped, records with an unknown
candidate or key) are **not private**: ``rows_dropped_by_bounding > 0`` alone tells whether
anyone exceeded a bound. They are reported only when an operator switches them on, in the
driver, before the pipeline is built::

    from beam_dp import telemetry
    telemetry.enable_exact_counts()   # NOT PRIVATE: exact counts go to metrics and logs

DoFns read the switch when they are constructed (in the driver) and carry it to the workers
with their pickled state, so the setting holds on every runner.
"""

from __future__ import annotations

__all__ = ["disable_exact_counts", "enable_exact_counts", "exact_counts_enabled"]

_EXACT_COUNTS = False


def enable_exact_counts() -> None:
    """Report exact data-dependent counts as metrics and log lines (not private)."""
    global _EXACT_COUNTS
    _EXACT_COUNTS = True


def disable_exact_counts() -> None:
    """Back to the default: only public facts are reported."""
    global _EXACT_COUNTS
    _EXACT_COUNTS = False


def exact_counts_enabled() -> bool:
    """Whether DoFns constructed now report exact counts."""
    return _EXACT_COUNTS
