"""Private quantiles and means from grid summaries (pure: numpy and the exact samplers; no Beam).

Everything here runs on a merged :class:`~beam_dp.summaries.histogram.GridHistogram` (or an
:class:`~beam_dp.summaries.histogram.ExactSum` for the mean) and the public grid. Selections
use the exact samplers of :mod:`beam_dp.mechanisms` on the exact integer scores of
:class:`~beam_dp.scores.QuantileScore` (and :class:`~beam_dp.scores.MeanScore`); no float score
is ever sampled from. One module per concern, each with the privacy argument of its code:

- :mod:`.parameters`: the quantiles as exact decimals, the checks every plan makes, the one
  call to the samplers.
- :mod:`.utility`: the single-quantile utility, its sensitivity and how its score loss bounds
  the rank error.
- :mod:`.recursive`: the recursive split (ties halved between branches, branch weights,
  parallel composition over a level, the halving under ``replace``) and independent
  selections; :func:`select_quantiles`.
- :mod:`.planning`: :func:`plan_quantiles`, every selection's epsilon, sensitivity and bound
  fixed before any data is read.
- :mod:`.coarse_to_fine`: a private coarse cell, then a fine grid inside it.
- :mod:`.mean`: the private mean, including the add/remove utility ``-|sum(x) - N r|``.

Every public name is importable from here (``from beam_dp.summaries.quantiles import ...``).
"""

from beam_dp.summaries.quantiles.coarse_to_fine import (
    DEFAULT_REFINE_FRACTION,
    CellPlan,
    CellSelection,
    cell_scores,
    combine_passes,
    plan_cells,
    refine_grid,
    select_cells,
)
from beam_dp.summaries.quantiles.mean import (
    MEAN_RESOLUTION,
    MeanPlan,
    MeanSelection,
    plan_mean,
    select_mean,
)
from beam_dp.summaries.quantiles.parameters import (
    DEFAULT_SPLIT,
    MAX_QUANTILE_DENOMINATOR,
    SPLITS,
    Split,
    parse_quantiles,
)
from beam_dp.summaries.quantiles.planning import (
    QuantileNode,
    QuantilePlan,
    plan_quantiles,
    quantile_rounds,
    rank_errors,
)
from beam_dp.summaries.quantiles.recursive import select_quantiles
from beam_dp.summaries.quantiles.utility import QuantileSelection

__all__ = [
    "DEFAULT_REFINE_FRACTION",
    "DEFAULT_SPLIT",
    "MAX_QUANTILE_DENOMINATOR",
    "MEAN_RESOLUTION",
    "SPLITS",
    "CellPlan",
    "CellSelection",
    "MeanPlan",
    "MeanSelection",
    "QuantileNode",
    "QuantilePlan",
    "QuantileSelection",
    "Split",
    "cell_scores",
    "combine_passes",
    "parse_quantiles",
    "plan_cells",
    "plan_mean",
    "plan_quantiles",
    "quantile_rounds",
    "rank_errors",
    "refine_grid",
    "select_cells",
    "select_mean",
    "select_quantiles",
]
