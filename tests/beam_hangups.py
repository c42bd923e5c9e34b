"""Which exceptions of a finished job's threads are Beam's teardown, not a failure."""

from __future__ import annotations

import os
import threading
import traceback


def is_beam_harness_hang_up(args: threading.ExceptHookArgs) -> bool:
    """Whether a thread's exception is a Beam SDK harness thread losing its runner's channel.

    Beam's portable runners (Flink, Spark: LOOPBACK harness in this process) and the
    FnApiRunner's gRPC modes close a finished job's control, data and state channels under the
    harness's reading threads, which then end on gRPC's UNAVAILABLE or CANCELLED. This happens
    after the job, at a time the test does not control, so pytest would report it in whatever
    test runs next on the same worker (seen: a test that runs no pipeline at all). A channel
    lost during a job fails that job, and every test checks its job's outcome, so only this
    shape is dropped: a gRPC error with one of those two codes, raised in a thread whose
    traceback runs through Beam's worker package. Everything else still fails the test.
    """
    import grpc

    error = args.exc_value
    if not isinstance(error, grpc.RpcError) or not hasattr(error, "code"):
        return False
    if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return False
    frames = traceback.extract_tb(args.exc_traceback)
    return any(f"apache_beam{os.sep}runners{os.sep}worker{os.sep}" in f.filename for f in frames)
