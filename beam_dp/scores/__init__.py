"""Score functions for selection over public candidates (pure math; no Beam).

Each score computes exact integer scores (int64, one per candidate) whose real value is
``integer * unit``, and states its sensitivity and monotonicity for both neighbouring relations,
derived from its definition and the contribution bounds it stores (docs/mechanisms.md,
"Scores and their sensitivities"):

==================  ==================================  ====================  ==========
score               q(r; x)                             Δ add_remove / replace  monotone
==================  ==================================  ====================  ==========
DistinctUnitCount   #units that contributed r           1 / 1                 add_remove
Revenue             r · #{units with x ≥ r}             max(R) / max(R)       add_remove
PluralityVote       #votes for r                        1 / 1                 add_remove
VoteMargin          #r − #other (two candidates)        1 / 2                 never
QuantileScore       −dist(αn, [#(x<r), #(x≤r)])         max(α,1−α)k / k       never
MeanScore           −|x̄ − r|, n public                  — / k(M−m)/n          never
==================  ==================================  ====================  ==========
"""

from beam_dp.scores._base import Score
from beam_dp.scores.counts import DistinctUnitCount, PluralityVote, VoteMargin
from beam_dp.scores.mean import MeanScore
from beam_dp.scores.quantile import QuantileScore
from beam_dp.scores.revenue import Revenue

__all__ = [
    "DistinctUnitCount",
    "MeanScore",
    "PluralityVote",
    "QuantileScore",
    "Revenue",
    "Score",
    "VoteMargin",
]
