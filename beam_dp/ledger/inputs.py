"""One export, one budget: the input locations a dataset protects, and the rule a job meets.

A dataset registers the locations of the export whose people it protects (``inputs`` at
creation: ``/data/people/``, ``gs://bucket/people/*.parquet``). Every file a job reads must lie
inside its own dataset's registration and inside no other dataset's, checked in the
reservation's transaction: so the same file cannot be charged to two budgets by creating a
second dataset for it (``people`` refused a job, ``people_v2`` is created, the same job runs
again). Two registrations that may overlap are refused at creation.

A location is either a *prefix* (no glob character: the file itself, or every file under that
directory) or a *glob* (``*``, ``?``, ``[``; matched with :func:`fnmatch.fnmatchcase`, where
``*`` also crosses ``/``). Local paths are made absolute and resolved (symbolic links, ``..``),
so a link or a relative path cannot lead around a registration; remote locations
(``scheme://``) are compared as written, with the scheme in lower case.

Limits (the operator's responsibility, as with any budget system that sees only what it is
shown): a copy of the data at another location, under another name or in another format is
another input to the ledger; a file's content is never compared. The ledger also cannot see
data that reaches a pipeline other than through the job's ``--input`` (a library user who
reserves by hand passes the files his pipeline reads).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence

from beam_dp.ledger.errors import LedgerError

__all__ = ["check_inputs", "covers", "normalise_location", "overlap", "owners"]

_GLOB = frozenset("*?[")


def _is_remote(location: str) -> bool:
    return "://" in location


def normalise_location(location: object) -> str:
    """A registration or an input file in the one form the rule compares.

    Raises:
        LedgerError: for anything but a non-empty location without control characters.
    """
    if not isinstance(location, str) or not location.strip():
        raise LedgerError(
            f"an input location must be a non-empty path or URL; received {location!r}"
        )
    if any(ord(char) < 32 or ord(char) == 127 for char in location):
        raise LedgerError("an input location must not hold control characters (such as NUL)")
    if _is_remote(location):
        scheme, _, rest = location.partition("://")
        if not scheme or not rest:
            raise LedgerError(f"input location {location!r} is not a URL of the form scheme://path")
        return f"{scheme.lower()}://{rest}"
    glob_at = next((i for i, char in enumerate(location) if char in _GLOB), None)
    if glob_at is None:
        resolved = os.path.realpath(os.path.abspath(location))
        return resolved + "/" if location.endswith("/") and resolved != "/" else resolved
    # Resolve the directory before the first glob character; keep the pattern after it.
    directory, separator, _ = location[:glob_at].rpartition("/")
    rest = location[len(directory) + 1 :] if separator else location
    resolved = os.path.realpath(os.path.abspath(directory or "/") if separator else os.getcwd())
    return resolved.rstrip("/") + "/" + rest


def _literal(location: str) -> str:
    """The text before the first glob character; a prefix also covers what is under it."""
    glob_at = next((i for i, char in enumerate(location) if char in _GLOB), None)
    if glob_at is not None:
        return location[:glob_at]
    return location if location.endswith("/") else location + "/"


def covers(location: str, path: str) -> bool:
    """Whether the registered ``location`` covers the input file ``path`` (both normalised)."""
    if any(char in _GLOB for char in location):
        return fnmatch.fnmatchcase(path, location)
    return path == location.rstrip("/") or path.startswith(location.rstrip("/") + "/")


def overlap(first: str, second: str) -> bool:
    """Whether two registrations may cover a common file (conservative: may say yes wrongly).

    Their literal parts (a prefix and what is under it, or a glob's text before its first
    glob character) overlap when one starts with the other.
    """
    a, b = _literal(first), _literal(second)
    if a.startswith(b) or b.startswith(a):
        return True
    return covers(first, second.rstrip("/")) or covers(second, first.rstrip("/"))


def owners(registrations: Mapping[str, Sequence[str]], path: str) -> list[str]:
    """The datasets whose registration covers ``path``, sorted."""
    return sorted(
        name
        for name, locations in registrations.items()
        if any(covers(location, path) for location in locations)
    )


def check_inputs(
    dataset: str, registrations: Mapping[str, Sequence[str]], files: Iterable[str]
) -> None:
    """Refuse a job on ``dataset`` that reads a file outside its registration or inside another's.

    Raises:
        LedgerError: naming the first such file (a file name is public) and the rule.
    """
    own = list(registrations.get(dataset, ()))
    if not own:
        raise LedgerError(
            f"dataset {dataset!r} protects no input yet: an owner registers the export it "
            "protects with: python -m pipelines.budget protect --dataset "
            f"{dataset} --input LOCATION"
        )
    for file in files:
        path = normalise_location(file)
        others = [name for name in owners(registrations, path) if name != dataset]
        if others:
            raise LedgerError(
                f"the input file {path} is registered to dataset {others[0]!r}: a job on it "
                f"charges that dataset's budget, not {dataset!r} (one export, one budget)"
            )
        if not any(covers(location, path) for location in own):
            raise LedgerError(
                f"the input file {path} lies outside what dataset {dataset!r} protects "
                f"({', '.join(own)}); read the registered export, or an owner registers "
                "this location with: python -m pipelines.budget protect"
            )
