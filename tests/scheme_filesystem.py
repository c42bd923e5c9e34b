"""A registered Beam filesystem for tests: ``beamdptest://`` paths backed by a local folder.

It stands for a remote filesystem (``gs://``, ``s3://``): only Beam's ``FileSystems`` can
reach it, so a writer that treats its URL as a local path writes the wrong place. The root is
``$BEAM_DP_TEST_FS_ROOT`` (set by the test before it writes).
"""

from __future__ import annotations

import os
from typing import Any

from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "beamdptest"
PREFIX = f"{SCHEME}://"


def _local(path: str) -> str:
    root = os.environ["BEAM_DP_TEST_FS_ROOT"]
    return os.path.join(root, path[len(PREFIX) :]) if path.startswith(PREFIX) else path


def _remote(path: str) -> str:
    root = os.environ["BEAM_DP_TEST_FS_ROOT"]
    return PREFIX + os.path.relpath(path, root)


class SchemeFileSystem(LocalFileSystem):  # type: ignore[misc]
    """Local files seen through a URL scheme, as a bucket would be."""

    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        os.makedirs(_local(path), exist_ok=True)

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str) -> Any:
        """Every file whose URL starts with ``dir_or_prefix`` (a bucket lists by prefix)."""
        from apache_beam.io.filesystem import FileMetadata

        local = _local(dir_or_prefix)
        top = local if os.path.isdir(local) else os.path.dirname(local)
        for directory, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(directory, name)
                if path.startswith(local):
                    yield FileMetadata(_remote(path), os.path.getsize(path), os.path.getmtime(path))

    def metadata(self, path: str) -> Any:
        from apache_beam.io.filesystem import FileMetadata

        local = _local(path)
        return FileMetadata(path, os.path.getsize(local), os.path.getmtime(local))

    def create(self, path: str, *args: Any, **kwargs: Any) -> Any:
        os.makedirs(os.path.dirname(_local(path)), exist_ok=True)
        return super().create(_local(path), *args, **kwargs)

    def open(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return super().open(_local(path), *args, **kwargs)

    def copy(self, sources: list[str], destinations: list[str]) -> None:
        super().copy([_local(s) for s in sources], [_local(d) for d in destinations])

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        super().rename([_local(s) for s in sources], [_local(d) for d in destinations])

    def exists(self, path: str) -> bool:
        return bool(super().exists(_local(path)))

    def size(self, path: str) -> int:
        return int(super().size(_local(path)))

    def last_updated(self, path: str) -> float:
        return float(super().last_updated(_local(path)))

    def checksum(self, path: str) -> Any:
        return super().checksum(_local(path))

    def delete(self, paths: list[str]) -> None:
        super().delete([_local(p) for p in paths])
