"""A fault for tests/pipelines/test_lost_worker.py, loaded by every Python process started with
this directory on PYTHONPATH: in an SDK worker process (Beam sets ``WORKER_ID``) when
``BEAM_DP_TEST_WORKER_DIES`` names a marker file, the first worker to emit a release kills
itself with SIGKILL (the marker, created exclusively, makes it one worker)."""

from __future__ import annotations

import os

_MARKER = os.environ.get("BEAM_DP_TEST_WORKER_DIES")

if _MARKER and os.environ.get("WORKER_ID"):
    import signal

    import beam_dp.release as _release

    _original = _release.Release.to_dict

    def _to_dict_then_die(release: _release.Release) -> object:
        try:
            os.close(os.open(_MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return _original(release)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    _release.Release.to_dict = _to_dict_then_die  # type: ignore[method-assign]
