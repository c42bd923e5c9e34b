"""The stream job ends its Flink job on a cluster through Flink's REST API (issue 37).

Beam's ``PipelineResult.cancel`` through the portable job server leaves a cluster's Flink job
running (it holds its slots; the restart found none). ``FlinkJobs.end`` cancels the jobs of the
names given and returns only once the cluster says each ended; past ``--cancel_timeout`` it
fails naming the Flink job. A fake Flink REST API stands in for the cluster here (the real one:
``tests/engines/test_flink_stream_restart.py``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import stream


class FakeFlink:
    """Flink's ``/jobs/overview`` and ``PATCH /jobs/<id>?mode=cancel``; a cancelled job ends
    after ``cancels_to_end`` further overview requests (None: never)."""

    def __init__(self, jobs: dict[str, tuple[str, str]], cancels_to_end: int | None) -> None:
        self.jobs = dict(jobs)  # jid -> (name, state)
        self.cancels_to_end = cancels_to_end
        self.cancelled: list[str] = []
        self._countdown: dict[str, int] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200 if body is not None else 202)
                self.send_header("Content-Length", str(len(data) if body is not None else 0))
                self.end_headers()
                if body is not None:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                assert self.path == "/jobs/overview"
                for jid, left in list(fake._countdown.items()):
                    if left <= 0:
                        fake.jobs[jid] = (fake.jobs[jid][0], "CANCELED")
                        del fake._countdown[jid]
                    else:
                        fake._countdown[jid] = left - 1
                self._send(
                    {
                        "jobs": [
                            {"jid": jid, "name": name, "state": state}
                            for jid, (name, state) in fake.jobs.items()
                        ]
                    }
                )

            def do_PATCH(self) -> None:
                jid = self.path.split("/")[2].split("?")[0]
                assert self.path.endswith("?mode=cancel")
                fake.cancelled.append(jid)
                if fake.cancels_to_end is not None:
                    fake._countdown[jid] = fake.cancels_to_end
                fake.jobs[jid] = (fake.jobs[jid][0], "CANCELLING")
                self._send(None)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flink() -> Iterator[FakeFlink]:
    fake = FakeFlink(
        {
            "a1": ("beam-dp-stream-x-run-1", "RUNNING"),
            "b2": ("someone-else", "RUNNING"),
            "c3": ("beam-dp-stream-x-run-1", "FINISHED"),
        },
        cancels_to_end=2,
    )
    yield fake
    fake.close()


def test_a_stop_cancels_its_flink_job_and_returns_once_it_ended(flink: FakeFlink) -> None:
    stream.FlinkJobs(flink.address, timeout=30).end({"beam-dp-stream-x-run-1"}, "the pipeline")
    assert flink.cancelled == ["a1"]  # only its own job, once, and not an ended one
    assert flink.jobs["a1"][1] == "CANCELED"
    assert flink.jobs["b2"][1] == "RUNNING"


def test_a_flink_job_still_running_after_the_timeout_fails_closed_naming_it() -> None:
    fake = FakeFlink({"d4": ("beam-dp-stream-x-run-2", "RUNNING")}, cancels_to_end=None)
    try:
        with pytest.raises(stream.StreamError, match=r"Flink job d4.*before starting the job"):
            stream.FlinkJobs(fake.address, timeout=1.5).end(
                {"beam-dp-stream-x-run-2"}, "the pipeline"
            )
    finally:
        fake.close()
    assert fake.cancelled == ["d4"]


def test_a_cluster_that_cannot_be_asked_fails_closed() -> None:
    fake = FakeFlink({}, cancels_to_end=None)
    address = fake.address
    fake.close()
    with pytest.raises(stream.StreamError, match="could not ask the Flink cluster"):
        stream.FlinkJobs(address, timeout=1).end({"x"}, "the pipeline")


@pytest.mark.parametrize(
    ("flags", "address"),
    [
        (["--runner", "FlinkRunner", "--flink_master", "localhost:8081"], "http://localhost:8081"),
        (["--runner", "FlinkRunner", "--flink_master", "https://f:1/"], "https://f:1"),
        (["--runner", "FlinkRunner"], None),  # [auto]: Beam's own job server, embedded
        (["--runner", "FlinkRunner", "--flink_master", "[local]"], None),
        (["--runner", "DirectRunner", "--flink_master", "localhost:8081"], None),
    ],
)
def test_the_cluster_is_the_flink_master_of_a_flink_runner(
    flags: list[str], address: str | None
) -> None:
    assert stream.flink_cluster_address(PipelineOptions(flags)) == address


def test_the_cancel_timeout_is_checked_by_name() -> None:
    with pytest.raises(ValueError, match="--cancel_timeout"):
        stream.FlinkJobs("http://127.0.0.1:1", timeout=0)


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        (["--runner", "FlinkRunner", "--job_endpoint", "localhost:8099"], True),
        (["--runner", "FlinkRunner"], False),  # Beam's own job server: it ends with the job
        (["--runner", "DirectRunner", "--job_endpoint", "localhost:8099"], False),
    ],
)
def test_a_flink_job_server_the_job_did_not_start_is_named_as_unchecked(
    flags: list[str], warned: bool
) -> None:
    assert stream._flink_elsewhere(PipelineOptions(flags)) is warned
