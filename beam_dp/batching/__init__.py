"""Column batches: the unit of data that flows through beam-dp's Beam transforms.

A *column batch* is a ``dict[str, numpy.ndarray]`` of equal-length columns with standard
names (see :mod:`.columns`). Readers produce pyarrow RecordBatches; :func:`encode_batch` turns
one into a column batch (privacy units put in one canonical identity and hashed with a stable
64-bit hash, see :mod:`.hashing`; candidates and keys mapped to their public index);
:func:`bound_rows` keeps a uniform sample of each unit's rows within its contribution bounds,
on a batch that holds every row of the units it contains. Pure numpy/pyarrow: no Beam here.
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
from beam_dp.batching.hashing import canonical_hash64, canonical_id_text, stable_hash64

__all__ = [
    "CANDIDATE",
    "KEY",
    "UNIT",
    "VALUE",
    "ColumnBatch",
    "ContributionBounds",
    "PublicIndex",
    "bound_rows",
    "canonical_hash64",
    "canonical_id_text",
    "concat_batches",
    "encode_batch",
    "num_rows",
    "stable_hash64",
    "take",
]
