"""What the command-line jobs (``pipelines/``) use from beam-dp beyond the library's surface.

A pipeline author needs :data:`beam_dp.__all__` (the private transforms, options, budget,
release types, IO transforms and errors) and :mod:`beam_dp.ledger`. The jobs need more: the
checks they run on a config before any budget is charged, the columns' declared types, the
release files they write, the numbers of their summary table and the streaming job's window
and runner plumbing. Those names live here, so that the library's surface is not shaped by the
CLI, and the jobs still import from documented modules only
(``tests/pipelines/test_public_surface.py``).

This module is for the jobs and for tools built like them; a name here may change with the
jobs. Importing it loads Apache Beam.
"""

from __future__ import annotations

from beam_dp._validation import check_relation
from beam_dp.batching import canonical_hash64
from beam_dp.beam._contributions import WindowAdmissions
from beam_dp.beam._transform import PrivateTransform, read_labels
from beam_dp.errors import data_error
from beam_dp.io import FORMATS
from beam_dp.io.outputs import write_outputs
from beam_dp.io.schema import (
    ColumnResolution,
    NamedColumn,
    check_export_columns,
    column_resolution,
    combine_resolutions,
)
from beam_dp.io.watch import stream_runner
from beam_dp.release import ledger_entries_to_record
from beam_dp.report.formatting import chosen_bound, format_number, format_share, grid_step

__all__ = [
    "FORMATS",
    "ColumnResolution",
    "NamedColumn",
    "PrivateTransform",
    "WindowAdmissions",
    "canonical_hash64",
    "check_export_columns",
    "check_relation",
    "chosen_bound",
    "column_resolution",
    "combine_resolutions",
    "data_error",
    "format_number",
    "format_share",
    "grid_step",
    "ledger_entries_to_record",
    "read_labels",
    "stream_runner",
    "write_outputs",
]
