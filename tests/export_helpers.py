"""Writing small sharded exports in the four formats, for tests."""

from __future__ import annotations

import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq


def write_export(directory: Path, fmt: str, rows: list[dict[str, object]], shards: int = 2) -> str:
    """Write ``rows`` as a sharded export; return its glob pattern."""
    directory.mkdir(parents=True, exist_ok=True)
    suffix = {"avro": "avro", "parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}[fmt]
    parts = [rows[i::shards] for i in range(shards)]
    for i, part in enumerate(parts):
        path = directory / f"export-{i:05d}.{suffix}"
        if fmt == "avro":
            fields = [
                {"name": k, "type": ["null", "string" if isinstance(v, str) else "double"]}
                for k, v in rows[0].items()
            ]
            schema = {"type": "record", "name": "Row", "fields": fields}
            with path.open("wb") as handle:
                fastavro.writer(handle, schema, part)
        elif fmt == "parquet":
            table = (
                pa.Table.from_pylist(part)
                if part
                else pa.Table.from_pylist(rows[:0], schema=pa.Table.from_pylist(rows).schema)
            )
            pq.write_table(table, path)
        elif fmt == "csv":
            header = ",".join(rows[0])
            lines = [",".join(str(r[k]) for k in rows[0]) for r in part]
            path.write_text("\n".join([header, *lines]) + "\n")
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in part))
    return str(directory / f"export-*.{suffix}")
