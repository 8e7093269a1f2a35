"""Throwaway PostgreSQL clusters for tests.

``ThrowawayCluster`` runs ``initdb`` into a fresh folder under ``/tmp`` and starts a
server on a free loopback port with durability switched off (``fsync=off``,
``initdb --no-sync``), so a cluster is ready in well under a second. PostgreSQL refuses
to run as root: when the tests run as root the folder is handed to the ``postgres`` OS
user and ``initdb``/``pg_ctl`` run as that user through ``runuser`` (or ``su``). Clients
always connect over TCP to 127.0.0.1 with ``trust`` authentication as the ``postgres``
role, so they can run as any OS user.

Everything here shells out to ``initdb``/``pg_ctl``/``psql``; no Python driver is needed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = [
    "ClusterError",
    "ThrowawayCluster",
    "dsn_with_database",
    "find_pg_bin",
    "find_psql",
    "free_port",
    "quote_ident",
    "run_psql",
]

SERVER_TOOLS = ("initdb", "pg_ctl")
PG_USER = "postgres"
StopMode = Literal["smart", "fast", "immediate"]


class ClusterError(RuntimeError):
    """A throwaway cluster could not be found, created, started or stopped."""


# --------------------------------------------------------------------------- discovery


def _has_server_tools(directory: Path) -> bool:
    return all((directory / tool).is_file() and os.access(directory / tool, os.X_OK) for tool in SERVER_TOOLS)


def _version_key(bin_dir: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin; versions look like "15" or "9.6".
    return tuple(int(part) for part in re.findall(r"\d+", bin_dir.parent.name)) or (-1,)


def find_pg_bin() -> Path | None:
    """Return a directory holding ``initdb`` and ``pg_ctl``, or None if there is none.

    Looks at ``$HARNESSX_PG_BIN`` first (raising ``ClusterError`` if it is set but lacks
    the tools, rather than silently using something else), then ``PATH`` (following
    symlinks, so ``/usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb`` yields
    the real directory, which also holds ``psql``), then the highest version under
    ``/usr/lib/postgresql/*/bin``.
    """
    configured = os.environ.get("HARNESSX_PG_BIN")
    if configured:
        directory = Path(configured).expanduser()
        if not _has_server_tools(directory):
            raise ClusterError(
                f"HARNESSX_PG_BIN={configured!r} does not contain executable initdb and pg_ctl"
            )
        return directory

    found = shutil.which("initdb")
    if found is not None:
        for directory in (Path(found).resolve().parent, Path(found).parent):
            if _has_server_tools(directory):
                return directory

    candidates = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if _has_server_tools(d)]
    if candidates:
        return max(candidates, key=_version_key)
    return None


def find_psql(bin_dir: Path | None = None) -> Path:
    """Return a ``psql`` executable: from ``bin_dir``, then ``PATH``, then ``/usr/bin/psql``."""
    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(bin_dir / "psql")
    found = shutil.which("psql")
    if found is not None:
        candidates.append(Path(found))
    candidates.append(Path("/usr/bin/psql"))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterError("psql not found (looked in the PostgreSQL bin dir, PATH and /usr/bin/psql)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- psql helpers


def quote_ident(name: str) -> str:
    """Quote an SQL identifier."""
    if not name or "\x00" in name:
        raise ValueError(f"invalid SQL identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def dsn_with_database(dsn: str, database: str) -> str:
    """Return ``dsn`` (a ``postgresql://`` URL) pointing at ``database`` instead."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ClusterError(f"expected a postgresql:// URL, got {dsn!r}")
    return urlunsplit(parts._replace(path="/" + quote(database, safe="")))


def run_psql(dsn: str, sql: str, *, psql: Path | None = None, timeout: float = 60.0) -> str:
    """Run ``sql`` through ``psql`` against ``dsn``; return unaligned, tuples-only output.

    Raises ``ClusterError`` with psql's stderr if the statement fails.
    """
    exe = psql if psql is not None else find_psql(find_pg_bin())
    cmd = [str(exe), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql]
    env = {k: v for k, v in os.environ.items() if k not in ("PGSERVICEFILE", "PGSERVICE", "PSQLRC")}
    env["PGCONNECT_TIMEOUT"] = env.get("PGCONNECT_TIMEOUT", "10")
    try:
        proc = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"psql timed out after {timeout}s running {sql!r}") from exc
    if proc.returncode != 0:
        raise ClusterError(f"psql failed (exit {proc.returncode}) running {sql!r}: {proc.stderr.strip()}")
    return proc.stdout


# --------------------------------------------------------------------------- the cluster


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


class ThrowawayCluster:
    """A private PostgreSQL cluster in a temporary folder, removed on exit.

    Use as a context manager::

        with ThrowawayCluster() as pg:
            run_psql(pg.dsn, "SELECT 1")
            pg.restart("immediate")      # crash + recovery
            dsn = pg.create_database("t1")
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        *,
        start_timeout: float = 60.0,
        durable: bool = False,
        settings: dict[str, str] | None = None,
    ) -> None:
        found = bin_dir if bin_dir is not None else find_pg_bin()
        if found is None:
            raise ClusterError(
                "PostgreSQL server binaries (initdb, pg_ctl) not found: set HARNESSX_PG_BIN, put them on "
                "PATH or install the Debian 'postgresql' package"
            )
        self.bin_dir: Path = found
        self.start_timeout = start_timeout
        # Tests skip fsync for speed; benchmarks keep the server's durable defaults.
        self.durable = durable
        # More server settings (`-c name=value`), e.g. a benchmark's pg_stat_statements.
        self.settings = dict(settings or {})
        self.port: int = 0
        self._root: Path | None = None
        self._as_root = os.geteuid() == 0
        self.start_seconds: float | None = None  # wall time of initdb + first start

    # -- paths and addresses

    @property
    def root(self) -> Path:
        if self._root is None:
            raise ClusterError("cluster not created yet; use it as a context manager")
        return self._root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    # -- running server tools

    def _server_cmd(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bin_dir / tool), *args]
        if not self._as_root:
            return cmd
        if shutil.which("runuser"):
            return ["runuser", "-u", PG_USER, "--", *cmd]
        if shutil.which("su"):
            return ["su", PG_USER, "-s", "/bin/sh", "-c", shlex.join(cmd)]
        raise ClusterError("running as root but neither runuser nor su is available to switch to 'postgres'")

    def _run(self, tool: str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        cmd = self._server_cmd(tool, *args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        try:
            return subprocess.run(
                cmd,
                cwd=self.root,  # readable by the postgres user, unlike e.g. /root
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout if timeout is not None else self.start_timeout + 30,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{shlex.join(cmd)} timed out; server log:\n{_tail(self.log_file)}") from exc

    def _check(self, proc: subprocess.CompletedProcess[str], what: str, with_log: bool = True) -> None:
        if proc.returncode == 0:
            return
        output = (proc.stdout + proc.stderr).strip()
        message = f"{what} failed (exit {proc.returncode}): {shlex.join(map(str, proc.args))}\n{output}"
        if with_log:
            message += f"\n--- tail of {self.log_file} ---\n{_tail(self.log_file)}"
        raise ClusterError(message)

    # -- lifecycle

    def _create_root(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="harnessx-pg-", dir="/tmp"))  # mode 0700
        self._root = root
        self.socket_dir.mkdir(mode=0o700)
        if self._as_root:
            try:
                entry = pwd.getpwnam(PG_USER)
            except KeyError as exc:
                raise ClusterError(
                    f"running as root, but there is no {PG_USER!r} OS user to run PostgreSQL as"
                ) from exc
            for path in (root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _initdb(self) -> None:
        proc = self._run(
            "initdb",
            "-D", str(self.data_dir),
            "-A", "trust",
            "-U", PG_USER,
            "--no-sync",
            "-E", "UTF8",
            "--locale=C",  # independent of the caller's (possibly ungenerated) locale
        )  # fmt: skip
        self._check(proc, "initdb", with_log=False)

    def _server_options(self) -> str:
        return (
            f"-p {self.port} -k {shlex.quote(str(self.socket_dir))} -c listen_addresses=127.0.0.1 "
            f"{'' if self.durable else '-c fsync=off '}-c max_connections=200"
            + "".join(f" -c {shlex.quote(f'{name}={value}')}" for name, value in self.settings.items())
        )

    def start(self) -> None:
        """Start the server (``pg_ctl start -w``) on ``self.port``."""
        proc = self._run(
            "pg_ctl", "start", "-w",
            "-t", str(int(self.start_timeout)),
            "-D", str(self.data_dir),
            "-l", str(self.log_file),
            "-o", self._server_options(),
        )  # fmt: skip
        self._check(proc, f"starting PostgreSQL on 127.0.0.1:{self.port}")

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server (``pg_ctl stop -m MODE -w``); ``immediate`` simulates a crash."""
        timeout = str(int(self.start_timeout))
        proc = self._run("pg_ctl", "stop", "-w", "-t", timeout, "-D", str(self.data_dir), "-m", mode)
        self._check(proc, f"stopping PostgreSQL ({mode})")

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop with ``mode`` and start again on the same port and data directory."""
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        proc = self._run("pg_ctl", "status", "-D", str(self.data_dir), timeout=30)
        return proc.returncode == 0

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` in ``database``; return unaligned, tuples-only output."""
        return run_psql(self.dsn_for(database), sql, psql=find_psql(self.bin_dir))

    def create_database(self, name: str, template: str | None = None) -> str:
        """``CREATE DATABASE name [TEMPLATE template]``; return the new database's DSN."""
        sql = f"CREATE DATABASE {quote_ident(name)}"
        if template is not None:
            sql += f" TEMPLATE {quote_ident(template)}"
        self.psql(sql)
        return self.dsn_for(name)

    def __enter__(self) -> ThrowawayCluster:
        began = time.monotonic()
        try:
            self._create_root()
            self._initdb()
            for attempt in range(3):
                self.port = free_port()
                try:
                    self.start()
                    break
                except ClusterError as exc:
                    # Someone grabbed the port between probing and binding: try another.
                    if attempt == 2 or "already in use" not in str(exc):
                        raise
        except BaseException:
            self._cleanup()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if self._root is None:
            return
        try:
            if (self.data_dir / "postmaster.pid").exists():
                proc = self._run(
                    "pg_ctl", "stop", "-w", "-t", "30", "-D", str(self.data_dir), "-m", "immediate"
                )
                if proc.returncode != 0 and self.is_running():
                    self._kill_postmaster()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _kill_postmaster(self) -> None:
        """Last resort: SIGQUIT (immediate shutdown) the postmaster we started, by its pid."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
            if b"postgres" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                return
            os.kill(pid, signal.SIGQUIT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # raises once the process is gone
                time.sleep(0.05)
