"""Write a job's outputs: ``release.json``, ``release.avro`` and ``report.html``.

Everything written here is built from released values and public parameters only (the
release records and the budget): no score, count or record ever reaches these files.

Outputs go through Beam's ``FileSystems``, so ``gs://``, ``s3://`` and every registered scheme
work. **Publication is all or nothing**: a reader of the output location finds the
earlier whole release, the new whole release, or no release, never the files of two runs nor
some of a run's files, whenever the writing process is killed.

* **A manifest written last.** Beside the three files, ``release.manifest.json`` names the run
  and each file's size and SHA-256; it is the last file to appear, and, when a release is
  replaced, the first to go. A release is whole exactly when its manifest is there and every
  file matches it (:func:`check_release`); :func:`read_release_avro` refuses a file that its
  manifest does not vouch for. This is the rule on object stores (``gs://``, ``s3://``), which
  have no rename of a folder: each file is written under a temporary name in the location,
  then the old manifest is deleted, the files are renamed into place, and the new manifest
  is renamed in last.
* **One rename of the folder, locally.** A local output directory is written whole into a
  fresh ``.<name>.partial-*`` directory beside it (same file system; mode 0700 until it is
  complete, so a killed run's staged release is readable by no one else), and then appears at
  its final name in one ``rename(2)``. An existing release is replaced by exchanging the two
  directories in one ``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, on ext4, xfs, btrfs, tmpfs)
  and removing the old one: there is no moment without a whole release. Where the exchange is
  not supported, the old directory is renamed aside (``.<name>.replaced-*``) and the new one
  renamed in: a kill between the two renames leaves no release at the output (a reader finds
  nothing, the next run needs no ``--overwrite``), never a mix; the ledger has already recorded
  the overwrite. Both hidden directories are removed by the next run to the same output once
  the process that made them is gone (their names carry its host, process id and start time,
  so a live concurrent job's are never touched).
* **A directory shared with other files** (``make run`` keeps its ledger in ``out/``) cannot be
  replaced whole without moving files that are not the release's: the release's files are
  then moved in one by one under the manifest rule above (old manifest out first, new one in
  last), and the other files are never touched. So is a directory that cannot be renamed (a
  mount point), and one whose parent this process may not write (the release is then staged
  in a hidden ``.partial-*`` directory inside it).

``release.avro`` holds typed records, one per release, that fastavro, polars and pyarrow read
without parsing JSON: the value in the column of its kind (``value_number``, ``value_integer``,
``value_text``, ``value_numbers``, ``value_integers``, ``value_texts`` or ``value_cdf``, with
``value_kind`` naming it), the accuracy bounds and the contribution bounds as arrays of
``{name, value}`` records (no map fields), and the run's id and time on every row. A quantile
release's intervals are the record ``interval`` (``quantiles``, ``lower``, ``upper``: arrays in
the release's order; ``confidence``, ``method``, ``epsilon``, ``rho``, ``share``), null for other
releases. The budget (and the files skipped under ``on_bad_record="skip"``) ride in the file's
metadata.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fastavro
from apache_beam.io.filesystems import FileSystems

from beam_dp.errors import BeamDPError
from beam_dp.report import render_report

__all__ = [
    "MANIFEST_FILE",
    "OUTPUT_FILES",
    "RELEASE_AVRO_SCHEMA",
    "IncompleteReleaseError",
    "atomic_output_dir",
    "check_release",
    "output_files",
    "read_release_avro",
    "release_avro_rows",
    "remove_stale_staging",
    "write_outputs",
]

OUTPUT_FILES = ("release.json", "release.avro", "report.html")
#: Written last, removed first: a release is whole when it is there and every file matches it.
MANIFEST_FILE = "release.manifest.json"
_MANIFEST_FORMAT = "beam_dp release manifest 1"
_PARTIAL, _REPLACED = "partial", "replaced"


class IncompleteReleaseError(BeamDPError, ValueError):
    """An output location holds no whole release (public: a location and a file name)."""


_BOUND = {
    "type": "record",
    "name": "Bound",
    "fields": [{"name": "name", "type": "string"}, {"name": "value", "type": "long"}],
}
_ACCURACY = {
    "type": "record",
    "name": "AccuracyBound",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": ["null", "string"], "default": None},
    ],
}
_QUANTILE = {
    "type": "record",
    "name": "QuantileValue",
    "fields": [{"name": "alpha", "type": "double"}, {"name": "value", "type": "double"}],
}
_CDF = {
    "type": "record",
    "name": "CDFValue",
    "doc": "a released CDF: its points, its steps and cumulative fractions, its quantiles",
    "fields": [
        {"name": "points", "type": {"type": "array", "items": "double"}},
        {"name": "steps", "type": {"type": "array", "items": "double"}},
        {"name": "cdf", "type": {"type": "array", "items": "double"}},
        {"name": "quantiles", "type": {"type": "array", "items": _QUANTILE}},
        {"name": "lower", "type": "double"},
        {"name": "upper", "type": "double"},
        {"name": "k", "type": "long"},
        {"name": "n_hat", "type": ["null", "long"], "default": None},
        {"name": "count_released", "type": "boolean"},
    ],
}
_INTERVAL = {
    "type": "record",
    "name": "QuantileIntervals",
    "doc": "randomization intervals of a quantile release, in the column's units",
    "fields": [
        {"name": "quantiles", "type": {"type": "array", "items": "double"}},
        {"name": "lower", "type": {"type": "array", "items": "double"}},
        {"name": "upper", "type": {"type": "array", "items": "double"}},
        {"name": "confidence", "type": "double"},
        {"name": "method", "type": "string"},
        {"name": "epsilon", "type": "double"},
        {"name": "rho", "type": ["null", "double"], "default": None},
        {"name": "share", "type": ["null", "double"], "default": None},
        {
            "name": "share_of_public_range",
            "type": ["null", {"type": "array", "items": "double"}],
            "default": None,
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
_KINDS = ("number", "integer", "text", "numbers", "integers", "texts", "cdf")


def _optional(kind: Any) -> dict[str, Any]:
    return {"type": ["null", kind], "default": None}


RELEASE_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Release",
    "namespace": "beam_dp",
    "doc": "One differentially private release, one row per release.",
    "fields": [
        {"name": "run_id", "type": "string", "doc": "the job run that released it"},
        {"name": "released_at", "type": "string", "doc": "when the run released it (UTC)"},
        {"name": "name", "type": "string"},
        {"name": "statistic", "type": "string"},
        {"name": "value_kind", "type": {"type": "enum", "name": "ValueKind", "symbols": _KINDS}},
        {"name": "value_number", **_optional("double")},
        {"name": "value_integer", **_optional("long")},
        {"name": "value_text", **_optional("string")},
        {"name": "value_numbers", **_optional({"type": "array", "items": "double"})},
        {"name": "value_integers", **_optional({"type": "array", "items": "long"})},
        {"name": "value_texts", **_optional({"type": "array", "items": "string"})},
        {"name": "value_cdf", **_optional(_CDF)},
        {"name": "interval", **_optional(_INTERVAL)},
        {"name": "key_text", **_optional("string")},
        {"name": "key_integer", **_optional("long")},
        {"name": "window", **_optional("string")},
        {"name": "mechanism", "type": "string"},
        {"name": "epsilon", "type": "double"},
        {"name": "delta", "type": "double"},
        {"name": "rho", **_optional("double")},
        {"name": "sensitivity", "type": "double"},
        {"name": "neighbouring", "type": "string"},
        {"name": "monotone", "type": "boolean"},
        {"name": "num_candidates", "type": "long"},
        {"name": "contribution_bounds", "type": {"type": "array", "items": _BOUND}},
        {"name": "accuracy", "type": {"type": "array", "items": _ACCURACY}},
        {"name": "accuracy_description", **_optional("string")},
        {"name": "notes", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "rng", "type": "string"},
    ],
}


def _owner() -> str:
    """This process as a staging name records it: ``<host>_<pid>_<start time>``."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"
    return f"{host}_{os.getpid()}_{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """A process's start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or
    ``"0"`` where there is no ``/proc`` (a pid alone then names the owner)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return "0"
    return stat.rsplit(")", 1)[-1].split()[19]


def _owner_gone(owner: str) -> bool:
    """Whether the process an ``_owner()`` text names has ended (never True when unsure: a
    name from another host, or one that does not parse)."""
    parts = owner.split("_")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid, started = parts[0], int(parts[1]), parts[2]
    if host != _owner().split("_")[0]:
        return False
    if os.path.isdir("/proc") and started != "0":
        return _start_time(pid) != started  # "0" once the process is gone; another if reused
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _stale_owner(name: str, prefix: str) -> bool:
    """Whether ``name`` is ``<prefix><owner>_<random>`` and its owner has ended."""
    if not name.startswith(prefix):
        return False
    owner, _, rest = name[len(prefix) :].rpartition("_")
    return bool(rest) and _owner_gone(owner)


def remove_stale_staging(output: str | os.PathLike[str]) -> list[str]:
    """Remove what a killed writer left at ``output``: local ``.<name>.partial-*`` and
    ``.<name>.replaced-*`` directories beside it, a remote location's ``.<file>.partial-*``
    files, each only once the process that made it has ended. Returns what was removed."""
    target = os.fspath(output)
    removed: list[str] = []
    if "://" in target:
        with contextlib.suppress(Exception):
            found = FileSystems.match([FileSystems.join(target, ".*.partial-*")])[0]
            for match in found.metadata_list:
                name = match.path.rstrip("/").rsplit("/", 1)[-1]
                file_name = name[1:].split(f".{_PARTIAL}-", 1)[0]
                if _stale_owner(name, f".{file_name}.{_PARTIAL}-"):
                    FileSystems.delete([match.path])
                    removed.append(match.path)
        return removed
    path = Path(target)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        for kind in (_PARTIAL, _REPLACED):
            if _stale_owner(name, f".{path.name}.{kind}-"):
                shutil.rmtree(path.parent / name, ignore_errors=True)
                removed.append(os.fspath(path.parent / name))
    with contextlib.suppress(OSError):
        for name in os.listdir(path):  # staged inside an output whose parent was not writable
            if _stale_owner(name, f".{_PARTIAL}-"):
                shutil.rmtree(path / name, ignore_errors=True)
                removed.append(os.fspath(path / name))
    return removed


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` would, for every thread)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) with ``data``, on disk before this returns."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(first: Path, second: Path) -> bool:
    """Swap two directories in one ``renameat2(RENAME_EXCHANGE)``; False where the system or
    the file system does not offer it (nothing was changed then)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]  # fmt: skip
    renameat2.restype = ctypes.c_int
    done = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), os.fspath(second))


#: What rename(2) answers for a directory it cannot move (a mount point, another device).
_CANNOT_MOVE = (errno.EBUSY, errno.EXDEV)


def _publish_folder(staging: Path, target: Path) -> None:
    """Make ``staging``'s files the release at ``target`` (module docstring)."""
    names = set(os.listdir(staging))
    inside = staging.parent == target  # staged inside: the parent was not writable
    try:
        present = set(os.listdir(target)) - {staging.name}
    except FileNotFoundError:
        present = set()
    if not present and not inside:  # absent, or an empty directory (rename(2) replaces it)
        try:
            os.rename(staging, target)
            return
        except OSError as error:  # made meanwhile, or a mount point: publish in it
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, *_CANNOT_MOVE):
                raise
            present = set(os.listdir(target))
    if not inside and present <= names | set(OUTPUT_FILES) | {MANIFEST_FILE}:
        try:  # a release's own folder: replaced whole
            if _exchange(staging, target):
                shutil.rmtree(staging, ignore_errors=True)  # now the replaced release
                return
            aside = target.parent / f".{target.name}.{_REPLACED}-{_owner()}_{uuid.uuid4().hex}"
            os.rename(target, aside)
        except OSError as error:  # a mount point: nothing moved, publish in it
            if error.errno not in _CANNOT_MOVE:
                raise
        else:
            os.rename(staging, target)
            shutil.rmtree(aside, ignore_errors=True)
            return
    # A directory shared with other files: the release's files one by one, manifest rule.
    with contextlib.suppress(FileNotFoundError):
        os.remove(target / MANIFEST_FILE)
    _fsync_dir(target)
    for name in sorted(names - {MANIFEST_FILE}):
        os.replace(staging / name, target / name)
    if MANIFEST_FILE in names:
        _fsync_dir(target)
        os.replace(staging / MANIFEST_FILE, target / MANIFEST_FILE)


@contextlib.contextmanager
def atomic_output_dir(output_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a staging directory; on success publish its files at ``output_dir`` whole.

    The staging directory, ``.<name>.partial-<owner>_<random>`` beside ``output_dir``, is
    made 0700 (a killed run's files are readable by no one else) and given the output's mode
    only once complete. On success it becomes ``output_dir`` in one rename, or is exchanged
    with an existing release in one ``renameat2`` (module docstring); a shared directory
    gets the files one by one, a :data:`MANIFEST_FILE` last. On an exception the staging
    directory is removed and ``output_dir`` is untouched (created only if the job succeeds).
    What killed writers left at ``output_dir`` is removed first (:func:`remove_stale_staging`).
    """
    target = Path(output_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    tag = f"{_PARTIAL}-{_owner()}_{uuid.uuid4().hex}"
    staging = target.parent / f".{target.name}.{tag}"
    try:
        os.mkdir(staging, 0o700)
    except PermissionError:  # the output is writable, its parent not: stage inside it
        if not target.is_dir():
            raise
        staging = target / f".{tag}"
        os.mkdir(staging, 0o700)
    try:
        os.chmod(staging, 0o700)
        yield staging
        _fsync_dir(staging)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o777 & ~_umask()
        os.chmod(staging, mode)
        _publish_folder(staging, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value_columns(value: Any) -> dict[str, Any]:
    """The typed column (and ``value_kind``) of one released value."""
    if isinstance(value, Mapping) and "points" in value:
        quantiles = [
            {"alpha": float(alpha), "value": float(point)}
            for alpha, point in sorted(
                value.get("quantiles", {}).items(), key=lambda i: float(i[0])
            )
        ]
        cdf = {
            "points": [float(x) for x in value["points"]],
            "steps": [float(x) for x in value.get("steps", value["points"])],
            "cdf": [float(x) for x in value.get("cdf", [])],
            "quantiles": quantiles,
            "lower": float(value["lower"]),
            "upper": float(value["upper"]),
            "k": int(value["k"]),
            "n_hat": None if value.get("n_hat") is None else int(value["n_hat"]),
            "count_released": bool(value.get("count_released", False)),
        }
        return {"value_kind": "cdf", "value_cdf": cdf}
    if isinstance(value, list):
        if all(_is_integer(v) for v in value) and value:
            return {"value_kind": "integers", "value_integers": [int(v) for v in value]}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return {"value_kind": "numbers", "value_numbers": [float(v) for v in value]}
        if all(isinstance(v, str) for v in value):
            return {"value_kind": "texts", "value_texts": list(value)}
    elif _is_integer(value):
        return {"value_kind": "integer", "value_integer": int(value)}
    elif isinstance(value, float):
        return {"value_kind": "number", "value_number": value}
    elif isinstance(value, str):
        return {"value_kind": "text", "value_text": value}
    raise TypeError(f"a released value of type {type(value).__name__} has no Avro column")


def _value_of(row: Mapping[str, Any]) -> Any:
    kind = row["value_kind"]
    if kind != "cdf":
        return row[f"value_{kind}"]
    cdf = dict(row["value_cdf"])
    quantiles = cdf.pop("quantiles")
    value: dict[str, Any] = {
        "points": cdf["points"],
        "steps": cdf["steps"],
        "cdf": cdf["cdf"],
        "quantiles": {_alpha_text(q["alpha"]): q["value"] for q in quantiles},
        "lower": cdf["lower"],
        "upper": cdf["upper"],
        "k": cdf["k"],
        "n_hat": cdf["n_hat"],
        "count_released": cdf["count_released"],
    }
    return value


def _ends(ends: Any) -> list[float]:
    return [float(x) for x in ends] if isinstance(ends, list) else [float(ends)]


def _interval_columns(interval: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``interval`` record of a release (ends as arrays whatever the value's shape)."""
    if interval is None:
        return None
    return {
        "quantiles": [float(q) for q in interval["quantiles"]],
        "lower": _ends(interval["lower"]),
        "upper": _ends(interval["upper"]),
        "confidence": float(interval["confidence"]),
        "method": str(interval["method"]),
        "epsilon": float(interval["epsilon"]),
        "rho": None if interval.get("rho") is None else float(interval["rho"]),
        "share": None if interval.get("share") is None else float(interval["share"]),
        "share_of_public_range": (
            None
            if interval.get("share_of_public_range") is None
            else _ends(interval["share_of_public_range"])
        ),
        "note": None if interval.get("note") is None else str(interval["note"]),
    }


def _interval_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """``release.json``'s ``interval`` back from its record: ends as numbers for a one-number
    value, as lists otherwise (as the release writes them)."""
    record = row.get("interval")
    if record is None:
        return None
    scalar = row["value_kind"] in ("number", "integer")
    out: dict[str, Any] = {
        "lower": record["lower"][0] if scalar else list(record["lower"]),
        "upper": record["upper"][0] if scalar else list(record["upper"]),
        "confidence": record["confidence"],
        "method": record["method"],
        "quantiles": list(record["quantiles"]),
        "epsilon": record["epsilon"],
    }
    for field in ("rho", "share"):
        if record[field] is not None:
            out[field] = record[field]
    shares = record.get("share_of_public_range")
    if shares is not None:
        out["share_of_public_range"] = shares[0] if scalar else list(shares)
    if record.get("note") is not None:
        out["note"] = record["note"]
    return out


def _alpha_text(alpha: float) -> str:
    """A CDF quantile's name in ``release.json`` (``f"{alpha:g}"``, as the release writes it)."""
    return f"{alpha:g}"


def release_avro_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One typed row per release of a ``release.json`` document (:data:`RELEASE_AVRO_SCHEMA`)."""
    run = document.get("run", {})
    rows = []
    for release in document["releases"]:
        key = release.get("key")
        if key is not None and not isinstance(key, str) and not _is_integer(key):
            raise TypeError(f"a key of type {type(key).__name__} has no Avro column")
        units = release.get("accuracy_units") or {}
        rows.append(
            {
                "run_id": str(run.get("id", "")),
                "released_at": str(run.get("released_at", "")),
                "name": release["name"],
                "statistic": release["statistic"],
                **{f"value_{kind}": None for kind in _KINDS},
                **_value_columns(release["value"]),
                "interval": _interval_columns(release.get("interval")),
                "key_text": key if isinstance(key, str) else None,
                "key_integer": key if _is_integer(key) else None,
                "window": release.get("window"),
                "mechanism": release["mechanism"],
                "epsilon": float(release["epsilon"]),
                "delta": float(release["delta"]),
                "rho": None if release.get("rho") is None else float(release["rho"]),
                "sensitivity": float(release["sensitivity"]),
                "neighbouring": release["neighbouring"],
                "monotone": bool(release["monotone"]),
                "num_candidates": int(release["num_candidates"]),
                "contribution_bounds": [
                    {"name": k, "value": int(v)} for k, v in release["contribution_bounds"].items()
                ],
                "accuracy": [
                    {"name": k, "value": float(v), "unit": units.get(k)}
                    for k, v in release["accuracy"].items()
                ],
                "accuracy_description": release.get("accuracy_description"),
                "notes": list(release.get("notes") or ()),
                "rng": release["rng"],
            }
        )
    return rows


def _release_json(document: Mapping[str, Any]) -> bytes:
    """The document as UTF-8 JSON (unicode labels written as themselves, not ``\\u`` escapes)."""
    return (json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()


def _release_avro(document: Mapping[str, Any]) -> bytes:
    """One typed Avro row per release; the budget and the run in the file's metadata."""
    metadata = {"beam_dp.budget": json.dumps(document["budget"], sort_keys=True)}
    if document.get("run") is not None:
        metadata["beam_dp.run"] = json.dumps(document["run"], sort_keys=True)
    if document.get("skipped_files"):
        metadata["beam_dp.skipped_files"] = json.dumps(document["skipped_files"])
    buffer = io.BytesIO()
    fastavro.writer(
        buffer,
        fastavro.parse_schema(RELEASE_AVRO_SCHEMA),
        release_avro_rows(document),
        metadata=metadata,
    )
    return buffer.getvalue()


def output_files(document: Mapping[str, Any]) -> dict[str, bytes]:
    """The three output files' bytes (``report.html``: :mod:`beam_dp.report.page`).

    **Privacy**: built from ``document`` only (released values and public parameters).
    """
    return {
        "release.json": _release_json(document),
        "release.avro": _release_avro(document),
        "report.html": render_report(document).encode("utf-8"),
    }


def _manifest(document: Mapping[str, Any], files: Mapping[str, bytes]) -> bytes:
    """The manifest of ``files``: the run's id, each file's size and SHA-256."""
    run = document.get("run") or {}
    manifest = {
        "format": _MANIFEST_FORMAT,
        "run_id": run.get("id"),
        "files": {
            name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in files.items()
        },
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def write_outputs(
    document: Mapping[str, Any],
    output: str | os.PathLike[str],
    *,
    extra_files: Mapping[str, bytes] | None = None,
) -> str:
    """Write every output file and the manifest into ``output`` (a directory or a
    ``scheme://`` location), all or nothing (module docstring); return ``output``.

    ``extra_files`` (name: bytes) are published with them, under the same manifest (the
    stream job's ``releases.jsonl``); they may not take the name of an output file.
    """
    files = output_files(document)
    for name in extra_files or {}:
        if name in files or name == MANIFEST_FILE or "/" in name or name.startswith("."):
            raise ValueError(f"'extra_files' may not hold a file named {name!r}")
    files.update(extra_files or {})
    manifest = _manifest(document, files)
    target = os.fspath(output)
    if "://" not in target:
        with atomic_output_dir(target) as staging:
            for name, data in files.items():
                _write_new(staging / name, data)
            _write_new(staging / MANIFEST_FILE, manifest)
        return target
    remove_stale_staging(target)
    tag = f"{_owner()}_{uuid.uuid4().hex}"
    everything = {**files, MANIFEST_FILE: manifest}
    staged = {name: FileSystems.join(target, f".{name}.{_PARTIAL}-{tag}") for name in everything}
    try:
        for name, data in everything.items():
            with FileSystems.create(staged[name]) as handle:
                handle.write(data)
        final_manifest = FileSystems.join(target, MANIFEST_FILE)
        if FileSystems.exists(final_manifest):  # the earlier release stops being whole first
            FileSystems.delete([final_manifest])
        finals = [FileSystems.join(target, name) for name in files]
        present = [path for path in finals if FileSystems.exists(path)]
        if present:  # --overwrite: the earlier run's files go
            FileSystems.delete(present)
        FileSystems.rename([staged[name] for name in files], finals)
        FileSystems.rename([staged[MANIFEST_FILE]], [final_manifest])  # last: now it is whole
    except BaseException:
        with contextlib.suppress(Exception):
            leftover = [path for path in staged.values() if FileSystems.exists(path)]
            if leftover:
                FileSystems.delete(leftover)
        raise
    return target


def _split(path: str) -> tuple[str, str]:
    """A file's location and name, local or ``scheme://``."""
    if "://" in path:
        folder, name = FileSystems.split(path)
        return folder, name
    folder, name = os.path.split(path)
    return folder or ".", name


def _read(path: str) -> bytes:
    with FileSystems.open(path) as handle:
        data: bytes = handle.read()
    return data


def _manifest_of(location: str) -> dict[str, Any]:
    path = FileSystems.join(location, MANIFEST_FILE)
    try:
        manifest = json.loads(_read(path).decode("utf-8"))
    except Exception:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT:
        raise IncompleteReleaseError(
            f"{location} holds no whole release: {MANIFEST_FILE} is missing or unreadable (a "
            "run was stopped while it published, or the files were not written by a job)"
        )
    return manifest


def _check_file(location: str, manifest: Mapping[str, Any], name: str, data: bytes) -> None:
    entry = manifest.get("files", {}).get(name)
    if (
        not isinstance(entry, dict)
        or entry.get("bytes") != len(data)
        or entry.get("sha256") != hashlib.sha256(data).hexdigest()
    ):
        raise IncompleteReleaseError(
            f"{location} holds no whole release: {name} is not the file its {MANIFEST_FILE} "
            "names (the files of two runs, or a run stopped while it published)"
        )


def check_release(output: str | os.PathLike[str]) -> str | None:
    """Check that ``output`` holds one whole release; return its run's id.

    Whole: :data:`MANIFEST_FILE` is there, names :data:`OUTPUT_FILES` (and any extra file
    published with them), and each file's size and SHA-256 match it.

    Raises:
        IncompleteReleaseError: naming the location and the file, never a value.
    """
    location = os.fspath(output)
    manifest = _manifest_of(location)
    named = sorted(manifest.get("files", {}))
    if not set(OUTPUT_FILES) <= set(named):
        raise IncompleteReleaseError(
            f"{location} holds no whole release: its {MANIFEST_FILE} does not name "
            f"{', '.join(OUTPUT_FILES)}"
        )
    for name in named:
        try:
            data = _read(FileSystems.join(location, name))
        except Exception:
            raise IncompleteReleaseError(
                f"{location} holds no whole release: {name} is missing"
            ) from None
        _check_file(location, manifest, name, data)
    run_id = manifest.get("run_id")
    return None if run_id is None else str(run_id)


def read_release_avro(
    path: str | os.PathLike[str], *, check_manifest: bool = True
) -> dict[str, Any]:
    """Read ``release.avro`` back into the ``release.json`` document (through ``FileSystems``).

    The file must be the one its location's :data:`MANIFEST_FILE` names (size and SHA-256),
    unless ``check_manifest=False`` (a file written without one, e.g. by ``WriteReleases``).

    Raises:
        IncompleteReleaseError: the manifest is missing or names another file.
    """
    data = _read(os.fspath(path))
    if check_manifest:
        location, name = _split(os.fspath(path))
        _check_file(location, _manifest_of(location), name, data)
    reader = fastavro.reader(io.BytesIO(data))
    document: dict[str, Any] = {}
    releases = []
    for raw in reader:
        row: dict[str, Any] = raw  # type: ignore[assignment]
        record: dict[str, Any] = {
            "name": row["name"],
            "statistic": row["statistic"],
            "value": _value_of(row),
        }
        interval = _interval_of(row)
        if interval is not None:
            record["interval"] = interval
        key = row["key_text"] if row["key_text"] is not None else row["key_integer"]
        if key is not None:
            record["key"] = key
        if row["window"] is not None:
            record["window"] = row["window"]
        for field in ("mechanism", "epsilon", "delta", "rho", "sensitivity", "neighbouring",
                      "monotone", "num_candidates"):  # fmt: skip
            record[field] = row[field]
        record["contribution_bounds"] = {b["name"]: b["value"] for b in row["contribution_bounds"]}
        record["accuracy"] = {a["name"]: a["value"] for a in row["accuracy"]}
        units = {a["name"]: a["unit"] for a in row["accuracy"] if a["unit"] is not None}
        if units:
            record["accuracy_units"] = units
        if row["accuracy_description"] is not None:
            record["accuracy_description"] = row["accuracy_description"]
        if row["notes"]:
            record["notes"] = list(row["notes"])
        record["rng"] = row["rng"]
        releases.append(record)
    metadata = reader.metadata
    document["releases"] = releases
    document["budget"] = json.loads(str(metadata["beam_dp.budget"]))
    if "beam_dp.run" in metadata:
        document["run"] = json.loads(str(metadata["beam_dp.run"]))
    if "beam_dp.skipped_files" in metadata:
        document["skipped_files"] = json.loads(str(metadata["beam_dp.skipped_files"]))
    return document
