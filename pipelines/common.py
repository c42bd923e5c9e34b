"""What every job shares, in one import: flags, running a pipeline, the ledger, the outputs.

Jobs are thin CLIs: they parse flags into library parameters, ask a
:class:`~beam_dp.accounting.PrivacyBudget` for their shares *before* the pipeline is built
(so an over-spent budget fails before any data is read), apply beam_dp transforms, and hand
the released records to :func:`run_releases`. No DP math lives here. Each concern has its
module; this one re-exports their public names:

- :mod:`pipelines.flags`: a job's parser, the shared flags, strict Beam pipeline options.
- :mod:`pipelines.cli`: running a job from the command line; what a failure may print.
- :mod:`pipelines.job_run`: the order every job follows (checks, budget, ledger, data).
- :mod:`pipelines.outputs`: the output directory, checked before anything runs.
- :mod:`pipelines.ledger_charge`: the job's charge in a persistent ledger.
- :mod:`pipelines.execute`: running the pipeline, collecting the releases, writing them.
- :mod:`pipelines.summary`: the table printed at the end.

Everything fails closed, before any data is read:

* Flags follow Beam's underscore style. Flags a job does not know must be Beam pipeline options
  (``--runner``, ``--direct_num_workers``, ``--temp_location``, and the options of the runner
  that ``--runner`` names); any other flag is an error naming the nearest known one, and an
  extra word (a glob the shell expanded) is an error asking to quote the pattern.
* Record-level privacy is asked for explicitly (``--record_level``), never the result of a
  missing ``--privacy_unit``.
* Every transform is built (and so validated) before the budget is asked and before the input
  is listed; the input must match at least one file.

What a job reports (see :mod:`beam_dp.telemetry`): by default only public facts (the
statistics, the input pattern and its number of files, elapsed time). ``--log_exact_counts``
(an operator's choice, NOT private) logs exact data-dependent counts. When a job fails,
:func:`cli` prints one line: the message of a :class:`beam_dp.errors.BeamDPError` (built from
file, field and rule), or of a ValueError/TypeError raised while the job was parsed and built
(parameter validation); anything raised while the pipeline runs prints only the stage that
failed, unless ``--show_tracebacks_unsafe`` (NOT private) is given.
"""

from __future__ import annotations

from pipelines.cli import SKIP_HINT_CONFIG, SKIP_HINT_FLAG, cli
from pipelines.execute import run_releases, wait_for, write_document
from pipelines.flags import (
    JOB_EPILOG,
    add_common_arguments,
    add_method_argument,
    add_name_argument,
    add_operator_arguments,
    add_output_argument,
    check_pipeline_flags,
    job_parser,
    parse_args,
    read_candidates,
    statistic_parser,
)
from pipelines.job_run import run_single, run_statistic, run_statistics
from pipelines.summary import print_summary

# Re-exported: what jobs, tests and users import from here.
__all__ = [
    "JOB_EPILOG",
    "SKIP_HINT_CONFIG",
    "SKIP_HINT_FLAG",
    "add_common_arguments",
    "add_method_argument",
    "add_name_argument",
    "add_operator_arguments",
    "add_output_argument",
    "check_pipeline_flags",
    "cli",
    "job_parser",
    "parse_args",
    "print_summary",
    "read_candidates",
    "run_releases",
    "run_single",
    "run_statistic",
    "run_statistics",
    "statistic_parser",
    "wait_for",
    "write_document",
]
