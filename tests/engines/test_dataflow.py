"""Dataflow, offline: every job's pipelines validated by Beam's DataflowRunner with
``--dry_run=True`` (the options checked, the pipeline translated to Dataflow's job proto with
``--setup_file ./setup.py`` packaged, nothing submitted), and the ``--setup_file`` package
installed into a clean venv and run there, as a Dataflow worker does.

Nothing here reaches Google: a fence refuses every connection and name lookup that is not
loopback (a test that tried would fail, not send), and the bucket of ``--temp_location`` is a
directory of the test (Beam's GCS file system, redirected), since the job writes its token
there before any pipeline runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_beam.io.localfilesystem import LocalFileSystem
from engine_jobs import COMMON, PARTIES, SITES, release_config, write_survey
from engines_env import REPO, unavailable

from pipelines import best_price, election, quantiles, release, top_candidates
from pipelines.execute import ReleaseCheckError

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("dataflow")

BUCKET = "gs://beam-dp-dry-run"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection and name lookup that is not loopback (and say so)."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in LOOPBACK and self.family != socket.AF_UNIX:
            raise AssertionError(f"the dry run tried to reach {host}")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOOPBACK and host is not None:
            raise AssertionError(f"the dry run tried to look up {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: no metadata server probe


@pytest.fixture
def gcp() -> Any:
    """Beam's GCP modules (``apache-beam[gcp]``, in the test extra): (gcsfilesystem,
    dataflow_runner)."""
    try:
        from apache_beam.io.gcp import gcsfilesystem
        from apache_beam.runners.dataflow import dataflow_runner
    except ImportError as error:
        unavailable(f"apache-beam[gcp] is not installed ({error})")
    return gcsfilesystem, dataflow_runner


@pytest.fixture
def local_bucket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gcp: Any) -> Path:
    """``gs://beam-dp-dry-run/...`` served from a directory (Beam's GCS file system's methods
    redirected to its local one): the job's token and scratch files land there."""
    root = tmp_path / "bucket"
    root.mkdir()
    local = LocalFileSystem(None)

    def to_local(path: str) -> str:
        assert path.startswith(BUCKET + "/"), path
        return str(root / path[len(BUCKET) + 1 :])

    def to_gcs(path: str) -> str:
        return BUCKET + "/" + os.path.relpath(path, root)

    def match(self: Any, patterns: list[str], limits: Any = None) -> Any:
        results = local.match([to_local(p) for p in patterns], limits)
        for result in results:
            result.pattern = to_gcs(result.pattern)
            for metadata in result.metadata_list:
                metadata.path = to_gcs(metadata.path)
        return results

    cls = gcp[0].GCSFileSystem
    monkeypatch.setattr(cls, "mkdirs", lambda self, path: local.mkdirs(to_local(path)))
    monkeypatch.setattr(cls, "create", lambda self, path, *a, **k: local.create(to_local(path)))
    monkeypatch.setattr(cls, "open", lambda self, path, *a, **k: local.open(to_local(path)))
    monkeypatch.setattr(cls, "exists", lambda self, path: local.exists(to_local(path)))
    monkeypatch.setattr(
        cls, "delete", lambda self, paths: local.delete([to_local(p) for p in paths])
    )
    monkeypatch.setattr(
        cls,
        "rename",
        lambda self, sources, targets: local.rename(
            [to_local(s) for s in sources], [to_local(t) for t in targets]
        ),
    )
    monkeypatch.setattr(cls, "match", match)
    return root


@pytest.fixture
def dataflow_jobs(monkeypatch: pytest.MonkeyPatch, gcp: Any) -> Iterator[list[Any]]:
    """The Dataflow job protos the dry runs built (one per pipeline run)."""
    dataflow_runner = gcp[1]
    built: list[Any] = []
    real_run = dataflow_runner.DataflowRunner.run_pipeline

    def run_pipeline(self: Any, pipeline: Any, options: Any, pipeline_proto: Any = None) -> Any:
        result = real_run(self, pipeline, options, pipeline_proto)
        built.append(result.job)
        return result

    monkeypatch.setattr(dataflow_runner.DataflowRunner, "run_pipeline", run_pipeline)
    yield built


DATAFLOW = [
    "--runner", "DataflowRunner", "--dry_run=True", "--project", "beam-dp-dry-run",
    "--region", "europe-west1", "--temp_location", f"{BUCKET}/tmp",
    "--setup_file", str(REPO / "setup.py"),
]  # fmt: skip


def _jobs(pattern: str, out: Path, config: Path) -> dict[str, Any]:
    return {
        "top_candidates": lambda: top_candidates.run(
            ["--input", pattern, *COMMON, "--candidate", "website",
             "--candidates", ",".join(SITES), "--k", "2", "--output", str(out), *DATAFLOW]
        ),
        "best_price": lambda: best_price.run(
            ["--input", pattern, *COMMON, "--value", "price", "--prices", "0.05:2.00:0.05",
             "--output", str(out), *DATAFLOW]
        ),
        "election": lambda: election.run(
            ["--input", pattern, *COMMON, "--candidate", "vote",
             "--candidates", ",".join(PARTIES), "--output", str(out), *DATAFLOW]
        ),
        "quantiles": lambda: quantiles.run(
            ["--input", pattern, *COMMON, "--value", "weight", "--quantiles", "0.25,0.75",
             "--lower", "0", "--upper", "200", "--num_points", "2001", "--output", str(out),
             *DATAFLOW]
        ),
        "release": lambda: release.run(["--config", str(config), "--output", str(out), *DATAFLOW]),
    }  # fmt: skip


@pytest.mark.parametrize(
    "job", ["top_candidates", "best_price", "election", "quantiles", "release"]
)
def test_every_job_validates_on_dataflow_dry_run(
    job: str,
    tmp_path: Path,
    no_network: None,
    local_bucket: Path,
    dataflow_jobs: list[Any],
) -> None:
    pattern = write_survey(tmp_path / "in")
    out = tmp_path / "out"
    run = _jobs(pattern, out, release_config(tmp_path, pattern))[job]
    # A dry run runs nothing, so nothing is committed: the job must then fail closed, after
    # Dataflow accepted both of its pipelines (the temp-location probe and the job).
    with pytest.raises(ReleaseCheckError, match="committed its releases nowhere"):
        run()
    assert not out.exists()
    assert len(dataflow_jobs) == 2
    probe, main = (
        {t.unique_name for t in built.proto_pipeline.components.transforms.values()}
        for built in dataflow_jobs
    )
    assert "ProbeTempLocation" in probe
    for stage in ("ReadExport", job if job != "release" else "sites", "Collect", "Commit"):
        assert stage in main, stage
    staged = {
        dependency.role_payload
        for environment in dataflow_jobs[1].proto_pipeline.components.environments.values()
        for dependency in environment.dependencies
    }
    assert any(b"workflow.tar.gz" in payload for payload in staged)  # --setup_file's sdist
    assert list(local_bucket.iterdir()) == [local_bucket / "tmp"]  # the token, then removed
    assert list((local_bucket / "tmp").iterdir()) == []


def test_the_setup_file_package_installs_and_runs_in_a_clean_venv(tmp_path: Path) -> None:
    """What a Dataflow worker does with ``--setup_file ./setup.py``: the sdist Beam's stager
    builds (``workflow.tar.gz``), pip-installed with its dependencies into a fresh venv, then
    a job run there from another directory (so the installed package is what runs, not this
    checkout): a missing dependency or data file fails here."""
    from apache_beam.runners.portability.stager import Stager

    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = Stager._build_setup_package(str(REPO / "setup.py"), str(dist))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    python = str(venv / "bin" / "python")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    # --no-compile: pip's byte-compiling of Beam and the other dependencies was a third of the
    # install's CPU (39 s against 27.5 s measured); a compile failure there is only a warning of
    # pip's, so it checked nothing: the job below imports and runs what it needs.
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-compile", sdist],
        capture_output=True, text=True, timeout=1800, env=env, cwd=str(tmp_path),
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run(
        [python, "-c", "import beam_dp, pipelines; print(beam_dp.__file__, pipelines.__file__)"],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path), check=True,
    ).stdout.split()  # fmt: skip
    assert all(path.startswith(str(venv)) for path in where), where
    pattern = write_survey(tmp_path / "in")
    out = tmp_path / "out"
    job = subprocess.run(
        [python, "-m", "pipelines.election", "--input", pattern, *COMMON,
         "--candidate", "vote", "--candidates", ",".join(PARTIES), "--output", str(out)],
        capture_output=True, text=True, timeout=1800, env=env, cwd=str(tmp_path),
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-3000:]
    assert (out / "release.json").is_file() and (out / "report.html").is_file()
