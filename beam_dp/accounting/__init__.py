"""Privacy accounting: budgets planned before a pipeline runs, composition, and the ledger.

Pure Python (no Apache Beam). See :mod:`beam_dp.accounting.budget` for the budget (the
planner), :mod:`beam_dp.accounting.shares` for its shares, :mod:`beam_dp.accounting.composition`
for the composition interface with one rule per kind (:mod:`~beam_dp.accounting.composition_basic`,
:mod:`~beam_dp.accounting.composition_zcdp`), :mod:`beam_dp.accounting.zcdp` for zCDP costs and
conversions, and :mod:`beam_dp.accounting.ledger` for the per-release record.
"""

from beam_dp.accounting.budget import (
    COMPOSITIONS,
    TOLERANCE,
    BudgetShare,
    Composition,
    PrivacyBudget,
)
from beam_dp.accounting.kinds import MECHANISMS, PrivacyKind, check_mechanism, privacy_kind
from beam_dp.accounting.ledger import FrozenMapping, LedgerEntry
from beam_dp.accounting.zcdp import (
    approx_dp_epsilon_for_em_rounds,
    approx_dp_to_zcdp,
    em_epsilon_per_round,
    em_rho,
    pure_rho,
    zcdp_to_approx_dp,
    zcdp_to_approx_dp_bun_steinke,
)

__all__ = [
    "COMPOSITIONS",
    "MECHANISMS",
    "TOLERANCE",
    "BudgetShare",
    "Composition",
    "FrozenMapping",
    "LedgerEntry",
    "PrivacyBudget",
    "PrivacyKind",
    "approx_dp_epsilon_for_em_rounds",
    "approx_dp_to_zcdp",
    "check_mechanism",
    "em_epsilon_per_round",
    "em_rho",
    "privacy_kind",
    "pure_rho",
    "zcdp_to_approx_dp",
    "zcdp_to_approx_dp_bun_steinke",
]
