"""A private PostgreSQL 15 server on a free loopback port, in a temp dir: one the tests may kill.

The machine's PostgreSQL (127.0.0.1:5432) is shared by every test and engineer, so the tests that
crash the database start one of their own:

    initdb -D <dir>/data -U postgres --auth=trust      (once, as the `postgres` OS user if root)
    postgres -D <dir>/data -p <port> -k <dir> -c listen_addresses=127.0.0.1 -c fsync=on

with `fsync` and `synchronous_commit` on (the defaults, said explicitly): a transaction is on disk
in the WAL before its COMMIT is answered, so whatever a replica was told was written survives a
crash. `kill9()` is that crash: SIGKILL of the postmaster and of every backend at once (no
checkpoint, no shutdown record), and `start()` again on the same directory replays the WAL.

PostgreSQL refuses to run as root: as root, the directory is given to the `postgres` OS user and
the server runs as it (subprocess's `user=`); otherwise it runs as whoever runs the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.e2e.harness import free_port

BIN = Path(os.environ.get("A2A_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
DATABASE = "a2a"


def _run_as() -> str | None:
    """The OS user the server runs as: `postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root and there is no `postgres` OS user") from exc
    return "postgres"


class PrivatePostgres:
    """`with PrivatePostgres() as pg:` started (its database `a2a` made), removed at the end."""

    def __init__(self) -> None:
        if not (BIN / "postgres").exists():
            raise RuntimeError(f"no PostgreSQL server binaries in {BIN}")
        self.user = _run_as()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="a2a-e2e-pg-"))
        self.data = self.dir / "data"
        self.log_path = self.dir / "postgres.log"
        self.url = self.url_at(self.port)
        self.proc: subprocess.Popen[bytes] | None = None
        self.crashes = 0

    def url_at(self, port: int) -> str:
        """The URL of its database through `port` (its own, or a proxy's in front of it)."""
        return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"

    # --- start and stop -------------------------------------------------------------------

    def _popen(self, cmd: list[str], **kw: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, user=self.user, stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]

    def init(self) -> None:
        if self.user is not None:
            shutil.chown(self.dir, self.user)
        done = self._popen(
            [str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out, _ = done.communicate(timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{out.decode(errors='replace')[-2000:]}")

    def start(self, timeout: float = 60.0) -> PrivatePostgres:
        """Start (again) on the same directory; returns once it accepts queries. After a crash
        it first replays its WAL; a backend of the killed server still detaching its shared
        memory makes a start fail, and it is tried again."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if not self.data.exists():
            self.init()
        deadline = time.monotonic() + timeout
        while True:
            log = open(self.log_path, "ab")
            self.proc = self._popen(
                [
                    str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                    "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1",
                    "-c", "fsync=on", "-c", "synchronous_commit=on",
                    "-c", "max_connections=200", "-c", "shared_buffers=32MB",
                ],
                stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
            log.close()
            if self._wait_answering(deadline):
                return self
            if self.proc.poll() is None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start:\n{self.logs()}")
            time.sleep(0.3)  # it exited (the old one's memory still attached): again

    def _wait_answering(self, deadline: float) -> bool:
        """Until the database answers (made on the first start); False if the server exited."""
        assert self.proc is not None
        while self.proc.poll() is None:
            with contextlib.suppress(Exception):
                asyncio.run(self._ensure_database())
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return False

    async def _ensure_database(self) -> None:
        import asyncpg

        admin = await asyncpg.connect(self.url_at(self.port).rsplit("/", 1)[0] + "/postgres",
                                      timeout=2)  # fmt: skip
        try:
            if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
                await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await admin.close()

    def pids(self) -> list[int]:
        """The postmaster and its children (backends, background workers: each in a session of
        its own, so not one process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        out = [self.proc.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                        out.append(int(entry.name))
        return out

    def kill9(self) -> None:
        """The crash: SIGKILL to every process of the server at once, then reaped."""
        assert self.proc is not None and self.proc.poll() is None, "PostgreSQL is not running"
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.crashes += 1

    def stop(self) -> None:
        """Fast shutdown (SIGINT), or SIGKILL if it takes too long."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def logs(self, limit: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-limit:]
        return "<no postgres log>"

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *_: object) -> None:
        self.cleanup()
