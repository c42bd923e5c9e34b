"""Ledger URLs: which backend, where, and a redacted form that is safe to show.

- ``sqlite:///absolute/path/budget.db`` or ``sqlite:relative/path/budget.db``: a SQLite file
  (standard library). A URL with a host (``sqlite://host/...``) or query is refused.
- ``postgresql://user:password@host:5432/dbname`` (also ``postgres://``), with libpq
  query parameters such as ``?sslmode=require``: a PostgreSQL database (psycopg 3).

:func:`redact_url` replaces the password (in the authority part and in a ``password=``
query parameter) with ``***``. Every message, log line and record the ledger writes uses the
redacted form; the password itself is only ever handed to the database driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from beam_dp.ledger.errors import LedgerError

__all__ = ["LedgerURL", "parse_ledger_url", "redact_url"]

Backend = Literal["sqlite", "postgresql"]
_REDACTED = "***"
_SECRET_PARAMS = frozenset({"password", "sslpassword"})


@dataclass(frozen=True)
class LedgerURL:
    """A parsed ledger URL.

    Attributes:
        backend: ``"sqlite"`` or ``"postgresql"``.
        redacted: The URL with any password replaced by ``***`` (safe to print and store).
        path: The SQLite file (``None`` for PostgreSQL).
        secret: The URL as given, for the driver only (not shown by ``repr``).
    """

    backend: Backend
    redacted: str
    path: Path | None = None
    secret: str = field(default="", repr=False)

    def __str__(self) -> str:
        return self.redacted


def redact_url(url: str) -> str:
    """``url`` with the password (``user:password@`` or ``?password=``) replaced by ``***``.

    Text that does not parse as a URL is replaced whole by ``<unparsable URL>`` (it might
    hold a password in a form this function does not know).
    """
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a malformed port
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    changed = False
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{_REDACTED}@{hostinfo}"
            changed = True
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key in _SECRET_PARAMS for key, _value in pairs):
            redacted_pairs = [
                (key, _REDACTED if key in _SECRET_PARAMS else value) for key, value in pairs
            ]
            query = urlencode(redacted_pairs, safe="*")
            changed = True
    if not changed:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def parse_ledger_url(url: object) -> LedgerURL:
    """Check a ledger URL and tell its backend.

    Raises:
        LedgerError: for anything but a ``sqlite:`` or ``postgresql://`` URL of the forms in
            the module docstring (the message shows the URL redacted).
    """
    if not isinstance(url, str) or not url:
        raise LedgerError(
            "'ledger' must be a URL such as sqlite:///var/lib/beam-dp/budget.db or "
            "postgresql://user@host/dbname"
        )
    shown = redact_url(url)
    if any(ord(char) < 32 or ord(char) == 127 for char in unquote(url)):
        raise LedgerError(
            f"ledger URL {shown!r} holds a control character (such as NUL or a newline, "
            "also when percent-encoded as %00); give a plain path or URL"
        )
    parts = urlsplit(url) if shown != "<unparsable URL>" else None
    if parts is None:
        raise LedgerError(f"ledger URL {shown} is not a valid URL")
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        if parts.netloc or parts.query or parts.fragment:
            raise LedgerError(
                f"ledger URL {shown}: a SQLite URL is sqlite:///absolute/path.db or "
                "sqlite:relative/path.db, with no host and no query"
            )
        path_text = unquote(parts.path)
        if not path_text or path_text.endswith("/"):
            raise LedgerError(f"ledger URL {shown} names no file")
        return LedgerURL("sqlite", shown, Path(path_text), url)
    if scheme in ("postgresql", "postgres"):
        if not parts.hostname and "host=" not in parts.query:
            raise LedgerError(
                f"ledger URL {shown}: a PostgreSQL URL needs a host, as in "
                "postgresql://user@host:5432/dbname"
            )
        return LedgerURL("postgresql", shown, None, url)
    raise LedgerError(
        f"ledger URL {shown}: unknown scheme {parts.scheme!r}; use sqlite:///path/budget.db "
        "or postgresql://user@host/dbname"
    )


def sqlite_uri(path: Path, *, mode: str) -> str:
    """The ``file:`` URI that opens ``path`` with SQLite's ``mode`` (``rw`` never creates)."""
    return f"file:{quote(str(path.resolve()))}?mode={mode}"
