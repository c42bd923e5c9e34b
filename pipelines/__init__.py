"""The command-line jobs of beam-dp (``python -m pipelines.<job>``); see ``pipelines.common``.

When Python is locating a ``python -m pipelines.<job>`` module (``sys.argv[0]`` is ``"-m"``
then, as documented for ``-m``), or in a process spawned by such a job (a runner's worker; the
job sets ``BEAM_DP_QUIET_CLI``), known third-party noise is filtered before Apache Beam is
imported (:func:`pipelines._terminal.quiet_third_party`). Importing the package otherwise
changes nothing.
"""

import os as _os
import sys as _sys

from pipelines import _terminal

if _sys.argv[:1] == ["-m"] or _os.environ.get(_terminal.QUIET_ENV) == "1":
    _terminal.quiet_third_party()
