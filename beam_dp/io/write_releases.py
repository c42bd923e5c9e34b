"""``WriteReleases``: a pipeline's releases as ``release.json``, ``release.avro`` and
``report.html`` in one location, written by Beam's own file sinks.

``releases | WriteReleases("gs://bucket/out")`` gathers every release of the PCollection into
one document (as the jobs' ``release.json``) and writes the three files through Beam's
``FileSystems`` (every registered scheme: local paths, ``gs://``, ``s3://``, ...). Each file is
one sink with one shard: the sink writes a temporary file per attempt and publishes, in its
finalize step, only the attempt whose result the runner kept, so a retried or recomputed
bundle's sample never reaches the output (a DoFn that wrote files itself would publish every
attempt). The jobs write the same files from the driver after the ledger's commit
(:func:`~beam_dp.io.outputs.write_outputs`), which this transform cannot do: it has no ledger.

**Overwrite rule.** The location is checked when the transform is built, before the pipeline
runs: if any of the three files is there already, the transform is refused naming the file
unless ``overwrite=True`` (the jobs' ``--overwrite``).

**Privacy**: the files hold the released values and the public parameters only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io.avroio import WriteToAvro
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.textio import WriteToText
from apache_beam.pvalue import PCollection
from apache_beam.transforms.combiners import ToList

from beam_dp.accounting import PrivacyBudget
from beam_dp.io.outputs import OUTPUT_FILES, RELEASE_AVRO_SCHEMA, release_avro_rows
from beam_dp.release import Release, ledger_entries_to_record, release_document
from beam_dp.report import render_report

__all__ = ["WriteReleases"]


def _spent_by(releases: list[Release]) -> dict[str, Any]:
    """The ``budget`` object when no budget is given: what the releases record they spent,
    composed as their ledger entries say (basic composition; per-key and per-window releases
    of one transform count as the keys and windows one unit reaches)."""
    entries = ledger_entries_to_record(releases)
    epsilon = math.fsum(entry.epsilon for entry in entries)
    delta = math.fsum(entry.delta for entry in entries)
    shares = [
        {
            "name": entry.name,
            "mechanism": entry.mechanism,
            "epsilon_spent": entry.epsilon,
            "delta_spent": entry.delta,
        }
        for entry in entries
    ]
    return {
        "epsilon_total": epsilon,
        "epsilon_spent": epsilon,
        "delta_total": delta,
        "delta_spent": delta,
        "composition": "basic",
        "shares": shares,
    }


def _document(releases: list[Release], budget: Mapping[str, Any] | None) -> dict[str, Any]:
    ordered = sorted(releases, key=lambda r: (r.name, str(r.key), str(r.window)))
    return release_document(ordered, _spent_by(ordered) if budget is None else budget)


def _json_text(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@beam.typehints.with_input_types(Release)
class WriteReleases(beam.PTransform):
    """Write a PCollection of releases as the three output files in ``output``.

    Args:
        output: a folder path or a ``scheme://`` location any Beam filesystem serves.
        budget: the :class:`~beam_dp.accounting.PrivacyBudget` the releases' shares came
            from, recorded as it stands when the pipeline is built (default: what the releases
            record they spent, composed by their ledger entries).
        overwrite: replace the files an earlier write left (default False: refused).

    Raises:
        ValueError: ``output`` already holds one of the files and ``overwrite`` is False.
    """

    def __init__(
        self, output: str, *, budget: PrivacyBudget | None = None, overwrite: bool = False
    ) -> None:
        super().__init__()
        if not isinstance(output, str) or not output:
            raise ValueError(f"'output' must be a non-empty location; received {output!r}")
        if not isinstance(overwrite, bool):
            raise TypeError(f"'overwrite' must be True or False; received {overwrite!r}")
        self._output = output
        if budget is not None and not isinstance(budget, PrivacyBudget):
            raise TypeError(f"'budget' must be a PrivacyBudget or None; received {budget!r}")
        self._budget = budget
        self._paths = {name: FileSystems.join(output, name) for name in OUTPUT_FILES}
        if not overwrite:
            for name, path in self._paths.items():
                if FileSystems.exists(path):
                    raise ValueError(
                        f"{output} already holds {name} from an earlier write; choose another "
                        "location or pass overwrite=True"
                    )

    def expand(self, releases: PCollection) -> Any:
        budget = None if self._budget is None else self._budget.to_json()
        document = releases | "Gather" >> ToList() | "Document" >> beam.Map(_document, budget)
        one_file: dict[str, Any] = {"num_shards": 1, "shard_name_template": ""}
        json_file = (
            document
            | "JSON" >> beam.Map(_json_text)
            | "WriteJSON"
            >> WriteToText(self._paths["release.json"], append_trailing_newlines=False, **one_file)
        )
        avro_path = self._paths["release.avro"]
        avro_file = (
            document
            | "AvroRows" >> beam.FlatMap(release_avro_rows)
            | "WriteAvro" >> WriteToAvro(avro_path, schema=RELEASE_AVRO_SCHEMA, **one_file)
        )
        report_file = (
            document
            | "Report" >> beam.Map(render_report)
            | "WriteReport"
            >> WriteToText(self._paths["report.html"], append_trailing_newlines=False, **one_file)
        )
        return (json_file, avro_file, report_file) | "Written" >> beam.Flatten()

    def display_data(self) -> dict[str, Any]:
        return {"output": self._output, "files": ", ".join(OUTPUT_FILES)}
