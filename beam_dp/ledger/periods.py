"""Renewal rules: a dataset's allowance is granted afresh each calendar period (UTC).

A rule is one of :data:`RENEWALS`:

- ``"none"``: one allowance for the dataset's whole life.
- ``"daily"``, ``"weekly"`` (ISO weeks, from Monday), ``"monthly"``, ``"yearly"``: each
  calendar period in UTC has the dataset's allowance; runs are charged to the period in which
  they reserved. "1.0 per calendar month" is a dataset of ε = 1.0 with ``renewal="monthly"``.

The first period runs from the dataset's creation to the end of the calendar period it was
created in (a partial period with a full allowance). Renewal never refunds: a period's charges
stay with it, and a change of rule or allowance takes effect from the next period on.

Privacy:
    Renewal is an owner's policy, not a theorem: privacy loss composes across periods. A
    person present in twelve monthly exports at ε = 1.0 each is protected at ε = 12 over the
    year. ``show`` reports the committed spend of all periods next to the current one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

__all__ = ["RENEWALS", "Renewal", "check_renewal", "period_containing", "renewal_phrase"]

Renewal = Literal["none", "daily", "weekly", "monthly", "yearly"]
RENEWALS: tuple[Renewal, ...] = ("none", "daily", "weekly", "monthly", "yearly")
_PHRASES = {
    "none": "once (no renewal)",
    "daily": "per calendar day (UTC)",
    "weekly": "per ISO week (UTC, from Monday)",
    "monthly": "per calendar month (UTC)",
    "yearly": "per calendar year (UTC)",
}


def check_renewal(value: object, name: str = "renewal") -> Renewal:
    """Return ``value`` if it is a renewal rule from :data:`RENEWALS`, else raise ValueError."""
    for rule in RENEWALS:
        if value == rule:
            return rule
    raise ValueError(f"'{name}' must be one of {list(RENEWALS)}; received {value!r}")


def renewal_phrase(rule: Renewal) -> str:
    """Words for a rule, e.g. ``"per calendar month (UTC)"``."""
    return _PHRASES[rule]


def period_containing(rule: Renewal, at: datetime) -> tuple[datetime, datetime | None]:
    """The calendar period of ``rule`` that contains ``at``: ``[start, end)`` in UTC.

    For ``"none"`` the period is open-ended: ``(at, None)``.
    """
    at = at.astimezone(UTC)
    midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if rule == "none":
        return at, None
    if rule == "daily":
        return midnight, midnight + timedelta(days=1)
    if rule == "weekly":
        start = midnight - timedelta(days=midnight.weekday())
        return start, start + timedelta(days=7)
    if rule == "monthly":
        start = midnight.replace(day=1)
        if start.month == 12:
            return start, start.replace(year=start.year + 1, month=1)
        return start, start.replace(month=start.month + 1)
    start = midnight.replace(month=1, day=1)
    return start, start.replace(year=start.year + 1)
