"""Beam's SDK worker pool bound to 127.0.0.1 (``python -m benchmarks.loopback_worker_pool PORT``).

Beam's own ``python -m apache_beam.runners.worker.worker_pool_main --service_port PORT`` binds
every interface and has no option for the address; this serves the same servicer (each SDK
worker a separate ``python`` process) on the loopback interface only.
"""

from __future__ import annotations

import sys
import time

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer
from apache_beam.utils import thread_pool_executor


def main(port: int) -> None:
    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    if server.add_insecure_port(f"127.0.0.1:{port}") != port:
        raise SystemExit(f"cannot bind 127.0.0.1:{port}")
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
        BeamFnExternalWorkerPoolServicer(use_process=True, data_buffer_time_limit_ms=-1), server
    )
    server.start()
    print(f"worker pool on 127.0.0.1:{port}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(int(sys.argv[1]))
