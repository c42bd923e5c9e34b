"""A throwaway PostgreSQL server for the ledger tests: initdb + pg_ctl in a temporary dir.

It listens on 127.0.0.1 at a free port with password (SCRAM) authentication, so tests use a
real URL with a real password. PostgreSQL refuses to run as root: as root, the server runs
as the ``postgres`` user (Debian's package creates it) or, failing that, ``nobody``.
Binaries are found through ``$BEAM_DP_PG_BIN``, ``$PATH`` or ``/usr/lib/postgresql/*/bin``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class ServerUnavailableError(RuntimeError):
    """The server could not be started here (with the reason)."""


def find_bin_dir() -> Path:
    candidates: list[Path] = []
    if os.environ.get("BEAM_DP_PG_BIN"):
        candidates.append(Path(os.environ["BEAM_DP_PG_BIN"]))
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(found).resolve().parent)

    def version(path: Path) -> int:
        with contextlib.suppress(ValueError):
            return int(path.parent.name)
        return 0

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    raise ServerUnavailableError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql "
        "package (make test does) or set BEAM_DP_PG_BIN"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """Start with :meth:`start`, stop with :meth:`stop`; :attr:`url` has the password."""

    user = "beam"

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.bin_dir = find_bin_dir()
        self.base = Path(tempfile.mkdtemp(prefix="beam_dp_pg_"))
        self.password = "pw-" + secrets.token_hex(8)
        self.port = free_port()
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            account = None
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    account = pwd.getpwnam(name)
                    break
            if account is None or shutil.which("runuser") is None:
                raise ServerUnavailableError("running as root, with no postgres or nobody user")
            os.chown(self.base, account.pw_uid, account.pw_gid)
            self._prefix = ["runuser", "-u", account.pw_name, "--"]
            self._owner = (account.pw_uid, account.pw_gid)
        else:
            self._owner = (os.getuid(), os.getgid())

    def _run(self, *command: str, timeout: float = 60) -> None:
        try:
            subprocess.run(
                [*self._prefix, *command],
                check=True,
                capture_output=True,
                timeout=timeout,
                cwd=self.base,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as error:
            log = self.base / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            stderr = getattr(error, "stderr", b"") or b""
            raise ServerUnavailableError(
                f"{command[0]} failed: {stderr.decode(errors='replace')[-2000:]} {tail}"
            ) from None

    def start(self) -> PostgresServer:
        password_file = self.base / "password"
        password_file.write_text(self.password + "\n")
        os.chown(password_file, *self._owner)
        password_file.chmod(0o600)
        data = self.base / "data"
        self._run(
            str(self.bin_dir / "initdb"),
            "-D", str(data),
            "-U", self.user,
            "--pwfile", str(password_file),
            "-A", "scram-sha-256",
            "-E", "UTF8",
            "--locale", "C",
            "--no-sync",
        )  # fmt: skip
        password_file.unlink()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.base} -c max_connections=64"
        )
        if not self.durable:  # a throwaway server: no fsync (tests), unless measuring
            options += " -c fsync=off -c full_page_writes=off"
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D", str(data),
            "-l", str(self.base / "server.log"),
            "-o", options,
            "-w", "-t", "60",
            "start",
        )  # fmt: skip
        return self

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def stop(self) -> None:
        with contextlib.suppress(ServerUnavailableError):
            self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.base / "data"),
                "-m",
                "immediate",
                "stop",
            )
        shutil.rmtree(self.base, ignore_errors=True)
