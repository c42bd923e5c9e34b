"""Column batches: the unit of data that flows through beam-dp's Beam transforms.

A *column batch* is a ``dict[str, numpy.ndarray]`` of equal-length columns with standard
names (see :mod:`.columns`). Readers produce pyarrow RecordBatches; :func:`encode_batch` turns
one into a column batch (privacy units hashed with a stable 64-bit hash, candidates and keys
mapped to their public index); :func:`bound_rows` enforces per-unit contribution bounds on a
batch that holds every row of the units it contains. Pure numpy/pyarrow: no Beam here.
"""

from beam_dp.batching.bounding import ContributionBounds, bound_rows
from beam_dp.batching.columns import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ColumnBatch,
    PublicIndex,
    concat_batches,
    encode_batch,
    num_rows,
    take,
)
from beam_dp.batching.hashing import stable_hash64

__all__ = [
    "CANDIDATE",
    "KEY",
    "UNIT",
    "VALUE",
    "ColumnBatch",
    "ContributionBounds",
    "PublicIndex",
    "bound_rows",
    "concat_batches",
    "encode_batch",
    "num_rows",
    "stable_hash64",
    "take",
]
