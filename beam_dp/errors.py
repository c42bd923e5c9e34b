"""The error types beam-dp raises about data, and the rule for their messages.

A message about data names the source (a file), the field and the rule that was broken, and
never a record's value or an exact data-dependent count: messages reach terminals, logs and
job consoles, which are outside the trust boundary. Errors are built from those parts only;
a library's own message (Arrow, fastavro, json) may quote a value and is never passed on or
chained (raise ... ``from None``).
"""

from __future__ import annotations

__all__ = ["BadRecordError", "BeamDPError", "data_error"]


class BeamDPError(Exception):
    """Base of the errors beam-dp raises itself (messages safe to print)."""


class BadRecordError(BeamDPError, ValueError):
    """Input that breaks a rule. The message names the source, the field and the rule only."""


def data_error(
    source: str, rule: str, *, field: str | None = None, where: str | None = None
) -> BadRecordError:
    """A :class:`BadRecordError` whose message is built from public parts only.

    Args:
        source: the file (or a name given by the caller, such as ``"input"``).
        rule: the rule that was broken, in words (no value).
        field: the field concerned, if any.
        where: a position that is not data (``"line 12"``, ``"row group 3"``), if known.
    """
    parts = [source]
    if where:
        parts.append(where)
    if field is not None:
        parts.append(f"field '{field}'")
    return BadRecordError(": ".join(parts) + f" ({rule})")
