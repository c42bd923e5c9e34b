"""The output directory, checked before anything runs: writable, and not holding a release.

Both checks fail closed with one line naming the directory and the rule, before the budget
is asked and before any data is read; the outputs themselves are written only when the job
succeeds (:func:`pipelines.execute.write_document`).
"""

from __future__ import annotations

import os
import uuid

from apache_beam.io.filesystems import FileSystems

__all__ = ["check_output", "check_writable"]


#: What a release leaves in its directory (beam_dp.io.outputs: the files and the manifest
#: written last); either one there means a release, whole or interrupted.
_RELEASE_MARKS = ("release.json", "release.manifest.json")


def check_output(output: str, overwrite: bool) -> None:
    """An output directory that holds a release (or the part of one that an interrupted run
    left) is replaced only with --overwrite."""
    if not overwrite and any(
        FileSystems.exists(FileSystems.join(output, name)) for name in _RELEASE_MARKS
    ):
        raise ValueError(
            f"--output {output} already holds a release; give --overwrite to replace it (the "
            "ledger records the overwrite, and the earlier run's spend stays spent)"
        )


def check_writable(output: str) -> None:
    """Refuse an output directory this job could not write, before anything runs.

    A probe file is created and deleted again in the output directory, or, while it does not
    exist yet, in its nearest existing ancestor (where the job will create it): nothing is
    left behind, and jobs writing next to each other (``out/1``, ``out/2``) cannot trip over
    one another's directories. Remote filesystems (``gs://``, ...) are probed through Beam's
    ``FileSystems`` (their directories are prefixes: nothing to create).

    Raises:
        ValueError: naming the directory and the reason, never a library's message.
    """
    probe_name = f".beam_dp_write_probe_{uuid.uuid4().hex}"
    if "://" in output:
        try:
            probe = FileSystems.join(output, probe_name)
            with FileSystems.create(probe) as handle:
                handle.write(b"")
            FileSystems.delete([probe])
        except Exception:
            raise ValueError(
                f"--output {output} is not writable (check the path, its filesystem and "
                "access to it)"
            ) from None
        return
    existing = os.path.abspath(output)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise NotADirectoryError(0, f"{existing} is a file, not a directory")
        probe = os.path.join(existing, probe_name)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or "it cannot be created or written"
        raise ValueError(f"--output {output} is not writable: {reason}") from None
