"""Readers from data-warehouse exports (Avro, Parquet, CSV, JSON lines) to record batches."""

from beam_dp.io.readers import FORMATS, ReadExport, detect_format

__all__ = ["FORMATS", "ReadExport", "detect_format"]
