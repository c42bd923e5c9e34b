"""beam-dp: differentially private selections from Apache Beam pipelines.

The public surface is :data:`__all__`: what a pipeline author uses - the private transforms
(each a namespace with ``.Globally`` and ``.PerKey``, as Beam's own combiners), their options,
DP key selection, the budget, the release types, the export reader and release writers, and the
errors. The persistent budget ledger is the documented subpackage :mod:`beam_dp.ledger`; what
the command-line jobs use beyond that is :mod:`beam_dp.jobs`. Everything else is internal; the
layers are drawn in ``docs/architecture.md`` and the privacy rules of units, keys and windows
are in ``docs/privacy_rules.md``.

A name loads its module on first use (PEP 562), so that importing a pure layer
(``beam_dp.mechanisms``, ``beam_dp.summaries``, ...) never imports Apache Beam. ``__all__`` is
the one list of public names; the typing imports below and ``_WHERE`` are checked against it
(``tests/pipelines/test_public_surface.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_dp import telemetry as telemetry
    from beam_dp.accounting import BudgetShare as BudgetShare
    from beam_dp.accounting import LedgerEntry as LedgerEntry
    from beam_dp.accounting import PrivacyBudget as PrivacyBudget
    from beam_dp.batching import ContributionBounds as ContributionBounds
    from beam_dp.beam._transform import PerKeyOptions as PerKeyOptions
    from beam_dp.beam._transform import PrivateOptions as PrivateOptions
    from beam_dp.beam.cdf import CDFValue as CDFValue
    from beam_dp.beam.cdf import PrivateCDF as PrivateCDF
    from beam_dp.beam.key_selection import KeySelection as KeySelection
    from beam_dp.beam.key_selection import SelectCandidates as SelectCandidates
    from beam_dp.beam.mean import PrivateMean as PrivateMean
    from beam_dp.beam.quantiles import PrivateMax as PrivateMax
    from beam_dp.beam.quantiles import PrivateMedian as PrivateMedian
    from beam_dp.beam.quantiles import PrivateMin as PrivateMin
    from beam_dp.beam.quantiles import PrivateQuantiles as PrivateQuantiles
    from beam_dp.beam.selection import BestPrice as BestPrice
    from beam_dp.beam.selection import Election as Election
    from beam_dp.beam.selection import ExponentialSelect as ExponentialSelect
    from beam_dp.beam.selection import TopCandidates as TopCandidates
    from beam_dp.errors import BadRecordError as BadRecordError
    from beam_dp.errors import BeamDPError as BeamDPError
    from beam_dp.io import ReadExport as ReadExport
    from beam_dp.io import SkippedFile as SkippedFile
    from beam_dp.io.outputs import RELEASE_AVRO_SCHEMA as RELEASE_AVRO_SCHEMA
    from beam_dp.io.release_rows import ReleaseRecords as ReleaseRecords
    from beam_dp.io.release_rows import ReleaseRow as ReleaseRow
    from beam_dp.io.release_rows import ReleaseRows as ReleaseRows
    from beam_dp.io.write_releases import WriteReleases as WriteReleases
    from beam_dp.release import Release as Release
    from beam_dp.scores import Revenue as Revenue
    from beam_dp.summaries.histogram import Grid as Grid


__all__ = [
    "RELEASE_AVRO_SCHEMA",
    "BadRecordError",
    "BeamDPError",
    "BestPrice",
    "BudgetShare",
    "CDFValue",
    "ContributionBounds",
    "Election",
    "ExponentialSelect",
    "Grid",
    "KeySelection",
    "LedgerEntry",
    "PerKeyOptions",
    "PrivacyBudget",
    "PrivateCDF",
    "PrivateMax",
    "PrivateMean",
    "PrivateMedian",
    "PrivateMin",
    "PrivateOptions",
    "PrivateQuantiles",
    "ReadExport",
    "Release",
    "ReleaseRecords",
    "ReleaseRow",
    "ReleaseRows",
    "Revenue",
    "SelectCandidates",
    "SkippedFile",
    "TopCandidates",
    "WriteReleases",
    "telemetry",
]

#: Where each public name is defined (a module for ``telemetry``, the operator's switch).
_WHERE = {
    "PrivateQuantiles": "beam_dp.beam.quantiles",
    "PrivateMedian": "beam_dp.beam.quantiles",
    "PrivateMin": "beam_dp.beam.quantiles",
    "PrivateMax": "beam_dp.beam.quantiles",
    "PrivateMean": "beam_dp.beam.mean",
    "PrivateCDF": "beam_dp.beam.cdf",
    "CDFValue": "beam_dp.beam.cdf",
    "TopCandidates": "beam_dp.beam.selection",
    "BestPrice": "beam_dp.beam.selection",
    "Election": "beam_dp.beam.selection",
    "ExponentialSelect": "beam_dp.beam.selection",
    "KeySelection": "beam_dp.beam.key_selection",
    "SelectCandidates": "beam_dp.beam.key_selection",
    "PrivateOptions": "beam_dp.beam._transform",
    "PerKeyOptions": "beam_dp.beam._transform",
    "PrivacyBudget": "beam_dp.accounting",
    "BudgetShare": "beam_dp.accounting",
    "LedgerEntry": "beam_dp.accounting",
    "ContributionBounds": "beam_dp.batching",
    "Grid": "beam_dp.summaries.histogram",
    "Revenue": "beam_dp.scores",
    "Release": "beam_dp.release",
    "BeamDPError": "beam_dp.errors",
    "BadRecordError": "beam_dp.errors",
    "ReadExport": "beam_dp.io",
    "SkippedFile": "beam_dp.io",
    "RELEASE_AVRO_SCHEMA": "beam_dp.io.outputs",
    "ReleaseRows": "beam_dp.io.release_rows",
    "ReleaseRecords": "beam_dp.io.release_rows",
    "ReleaseRow": "beam_dp.io.release_rows",
    "WriteReleases": "beam_dp.io.write_releases",
    "telemetry": "beam_dp.telemetry",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'beam_dp' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where == f"beam_dp.{name}" else getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
