"""Readers from data-warehouse exports (Avro, Parquet, CSV, JSON lines) to record batches."""

from beam_dp.io.decoding import ReadLimits
from beam_dp.io.readers import FORMATS, ReadExport, SkippedFile, detect_format

__all__ = ["FORMATS", "ReadExport", "ReadLimits", "SkippedFile", "detect_format"]
