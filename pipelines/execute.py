"""Running a job's pipeline: build it, run it, collect the releases, write the outputs.

The releases travel back to the job's process as small files; each transform is charged to
the budget once, and the outputs are written only when the pipeline succeeded
(:func:`run_and_write`). The job's stages are named here (:data:`JOB_STAGES`); their labels
are the only text of a running pipeline a failure may name (:mod:`pipelines.cli`).
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.pvalue import PCollection

from beam_dp import telemetry
from beam_dp.accounting import LedgerEntry, PrivacyBudget
from beam_dp.io.outputs import write_outputs
from beam_dp.release import Release, ledger_entries_to_record
from pipelines._state import LOG, STATE

__all__ = ["ALL_RELEASES", "COLLECT", "JOB_STAGES", "READ_EXPORT", "run_and_write", "wait_for"]

READ_EXPORT, ALL_RELEASES, COLLECT = "ReadExport", "AllReleases", "Collect"
JOB_STAGES = (READ_EXPORT, ALL_RELEASES, COLLECT)  # a statistic may not take these names


_DIRECT_NAMES = frozenset({"direct", "directrunner", "switchingdirectrunner"})


def _runner(options: PipelineOptions) -> Any:
    """The runner to build the pipeline with: Beam's FnApiRunner for the DirectRunner.

    Beam's DirectRunner first tries to run a batch pipeline on Prism, which downloads a
    binary on every run (and fails offline after a delay); jobs read bounded exports, so the
    DirectRunner would end on the FnApiRunner anyway. Building it directly runs the same
    pipeline without that detour, honouring ``--direct_num_workers`` and
    ``--direct_running_mode``. Any other ``--runner`` is left to Beam.
    """
    name = options.view_as(StandardOptions).runner
    if name is not None and str(name).lower() not in _DIRECT_NAMES:
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return fn_runner.FnApiRunner(provision_info=provision)


def _log_metrics(result: Any) -> None:
    """Exact counts, only when the operator asked for them (they are not private)."""
    if not telemetry.exact_counts_enabled():
        return
    try:
        counters = result.metrics().query()["counters"]
    except Exception:  # some runners do not report metrics
        return
    LOG.info("exact counts (NOT private; --log_exact_counts):")
    for counter in counters:
        if counter.key.metric.namespace == "beam_dp":
            value = counter.committed if counter.committed is not None else counter.attempted
            LOG.info("%s: %s: %s", counter.key.step, counter.key.metric.name, value)


class _Stages(PipelineVisitor):
    """The full labels of a pipeline's transforms (public: they come from the job)."""

    def __init__(self) -> None:
        self.labels: dict[str, None] = {}  # in the order the pipeline visits them

    def enter_composite_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def visit_transform(self, transform_node: AppliedPTransform) -> None:
        self.labels[transform_node.full_label] = None

    def top_level(self) -> list[str]:
        """The job's own stages (reading, each statistic, collecting), in pipeline order."""
        return [label for label in self.labels if label and "/" not in label]


class _WriteRelease(beam.DoFn):
    """Each release to its own small JSON file (works on every runner and filesystem)."""

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def process(self, release: Release) -> None:
        path = FileSystems.join(self._directory, f"{uuid.uuid4().hex}.json")
        with FileSystems.create(path) as handle:
            handle.write(json.dumps(release.to_dict()).encode("utf-8"))


def wait_for(result: Any) -> Any:
    """Wait until a pipeline's run ends; return its result.

    Whatever the outcome, the Dask runner's ``distributed.Client`` (``result.client``) is
    closed: the run is over, and an open client would hold its sockets until collected.
    """
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner's distributed.Client
        if client is not None:
            client.close()
    return result


def run_and_write(
    build: Callable[[beam.Pipeline], Sequence[PCollection]],
    *,
    budget: PrivacyBudget,
    options: PipelineOptions,
    output: str,
    ledger_record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the pipeline with ``build``, run it, record the releases, write the outputs.

    ``build`` returns PCollections of :class:`beam_dp.release.Release`. Releases travel
    back to this process as small files in a temporary directory (under ``--temp_location``
    when given, so that remote workers can write it). Each transform is charged once,
    whatever the number of keys it released (their epsilon is accounted by the transform:
    parallel composition or a split, as its ledger says). Jobs read bounded exports, so
    there is one (global) window.
    """
    STATE.phase = "prepare"
    STATE.writing_outputs = False
    temp_root = options.get_all_options().get("temp_location") or tempfile.gettempdir()
    scratch = FileSystems.join(temp_root, f"beam_dp_releases_{uuid.uuid4().hex}")
    pipeline = beam.Pipeline(runner=_runner(options), options=options)
    outputs = build(pipeline)
    _ = (
        tuple(outputs)
        | ALL_RELEASES >> beam.Flatten()
        | COLLECT >> beam.ParDo(_WriteRelease(scratch))
    )
    stages = _Stages()
    pipeline.visit(stages)
    STATE.stages = frozenset(stages.labels)
    top = stages.top_level()
    shown = ", ".join(top)
    FileSystems.mkdirs(scratch)
    STATE.phase = "run"
    started = time.monotonic()
    LOG.info("running %d stage(s): %s", len(top), shown)
    try:
        result = wait_for(pipeline.run())
        LOG.info(
            "the pipeline finished in %.1f s; %d stage(s) done: %s",
            time.monotonic() - started,
            len(top),
            shown,
        )
        STATE.phase = "write"
        _log_metrics(result)
        records: list[dict[str, Any]] = []
        for match in FileSystems.match([FileSystems.join(scratch, "*.json")])[0].metadata_list:
            with FileSystems.open(match.path) as handle:
                records.append(json.loads(handle.read().decode("utf-8")))
    finally:
        try:
            FileSystems.delete([scratch])
        except Exception:  # never hide the job's own error; name the (public) directory
            LOG.warning("could not remove the temporary directory %s", scratch)
    order = {share.name: i for i, share in enumerate(budget.shares)}
    records.sort(
        key=lambda r: (
            order.get(r["name"], len(order)),
            json.dumps(r.get("key")),
            r.get("window") or "",
        )
    )
    # Charge the budget once per transform: a .PerKey transform's releases cost as many of
    # their entries as keys a unit can reach, as the library's ledger says.
    releases = [
        Release(
            value=r["value"],
            ledger=LedgerEntry.from_dict(r),
            key=r.get("key"),
            window=r.get("window"),
        )
        for r in records
    ]
    for entry in ledger_entries_to_record(releases):
        budget.record(entry)
    document: dict[str, Any] = {"releases": records, "budget": budget.to_json()}
    if ledger_record is not None:
        document["budget"]["ledger"] = ledger_record
    STATE.writing_outputs = True
    write_outputs(document, output)
    return document
