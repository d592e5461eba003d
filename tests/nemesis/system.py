"""The system the nemesis attacks: `a2a-server` replicas (the shipped command, as the chaos and
Redis suites start them) on one Redis with AOF, each reaching it through its own cuttable proxy:

    replica i --REDIS_URL--> Blackhole i --> redis-server (AOF, a temp dir, a free port)

or, with `cluster=True`, on a local Redis Cluster (three masters with a replica each; no proxies:
a cluster client follows the nodes' own addresses, so a cut is not one proxy away), or, with
`database="postgres"`, on one private PostgreSQL (tests/e2e_chaos/private_postgres.py: fsync and
synchronous_commit on, killed -9 and restarted from its WAL as Redis is from its AOF):

    replica i --DATABASE_URL--> Blackhole i --> postgres (a temp dir, a free port)

The model is the nemesis' fake (model.py) in this process; the tool is tests/nemesis/tool.py.
Every replica gets the same environment (`replica_env`, plus a deployment's own settings).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.harness import ServerProcess
from tests.e2e_chaos.blackhole import Blackhole
from tests.e2e_chaos.private_postgres import PrivatePostgres
from tests.e2e_redis.support import RedisServer, connect, wait_ready
from tests.nemesis.model import NemesisModel
from tests.redis_cluster import LocalRedisCluster


class AofRedis(RedisServer):
    """A private redis-server with AOF at the fsync policy asked for."""

    def __init__(self, appendfsync: str) -> None:
        super().__init__(persistent=True)
        self.appendfsync = appendfsync

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--appendfsync") + 1] = self.appendfsync
        return cmd

    def kill9(self) -> None:
        assert self.proc is not None
        self.thaw()
        self.proc.kill()
        self.proc.wait(timeout=10)


@dataclass
class Replica:
    index: int
    server: ServerProcess
    proxy: Blackhole | None
    restarts: int = 0
    paused: bool = False
    logs: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid

    def alive(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None


class System:
    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int = 3,
        cluster: bool = False,
        appendfsync: str = "always",
        lease_ttl_s: float = 6.0,
        env: dict[str, str] | None = None,
        database: str = "redis",
    ) -> None:
        assert database in ("redis", "postgres"), database
        assert not (cluster and database == "postgres"), "a cluster is Redis's"
        self.workdir = workdir
        self.count = replicas
        self.cluster_mode = cluster
        self.database = database
        self.lease_ttl_s = lease_ttl_s
        self.prefix = f"nemesis-{os.getpid()}-{int(time.time())}"
        self.tool_log = workdir / "tool-runs.jsonl"
        self.model = NemesisModel(lease_ttl_s=lease_ttl_s)
        self.redis = None if cluster or database == "postgres" else AofRedis(appendfsync)
        self.postgres = PrivatePostgres() if database == "postgres" else None
        self.cluster: LocalRedisCluster | None = LocalRedisCluster() if cluster else None
        self.deployment_env = dict(env or {})
        self.replicas: list[Replica] = []

    # --- start and stop -----------------------------------------------------------------------

    def replica_env(self, store_url: str) -> dict[str, str]:
        stores = (
            {"DATABASE_URL": store_url}
            if self.postgres is not None
            else {"REDIS_URL": store_url, "REDIS_KEY_PREFIX": self.prefix}
        )
        env = {
            **stores,
            "LEASE_TTL_S": str(self.lease_ttl_s),
            "AGENT_TOOLS": "tests.nemesis.tool:nemesis_step",
            "NEMESIS_TOOL_LOG": str(self.tool_log),
            # A stream is never silent for longer than this: a client hearing nothing for three
            # of them resubscribes elsewhere (workload.py), as docs/operations.md says clients do.
            "A2A_STREAM_KEEPALIVE_S": "2",
            "A2A_MAX_TURNS_PER_PRINCIPAL": "256",
            "A2A_MAX_STREAMS_PER_PRINCIPAL": "1000",
            "LOG_LEVEL": "info",
        }
        if self.cluster_mode:
            env["REDIS_CLUSTER"] = "true"
        env.update(self.deployment_env)
        return env

    def start(self) -> System:
        self.model.start()
        if self.cluster is not None:
            self.cluster.start()
            urls = [self.cluster.url] * self.count
            proxies: list[Blackhole | None] = [None] * self.count
        elif self.postgres is not None:
            postgres = self.postgres.start()
            proxies = [Blackhole(postgres.port).start() for _ in range(self.count)]
            urls = [postgres.url_at(p.port) for p in proxies if p is not None]
        else:
            assert self.redis is not None
            self.redis.start()
            proxies = [Blackhole(self.redis.port).start() for _ in range(self.count)]
            urls = [p.url for p in proxies if p is not None]
        for index, (url, proxy) in enumerate(zip(urls, proxies, strict=True)):
            server = ServerProcess(
                self.model.replica_base_url(index), env=self.replica_env(url),
                start_timeout=120, wait_ready=False,
            )  # fmt: skip
            self.replicas.append(Replica(index, server, proxy))
        # Together: each spends seconds loading LiteLLM on a busy machine.
        with ThreadPoolExecutor(max_workers=self.count) as pool:
            list(pool.map(lambda r: r.server.start(), self.replicas))
            list(pool.map(lambda r: wait_ready(r.server, timeout=120), self.replicas))
        return self

    def stop(self) -> None:
        # The run is over and checked: no drain to wait for (SIGTERM would take up to
        # A2A_SHUTDOWN_GRACE_S per replica).
        for replica in self.replicas:
            if replica.alive():
                self.kill9(replica)
        for replica in self.replicas:
            replica.server.stop()
            self._keep_log(replica)
            replica.server.cleanup()
            if replica.proxy is not None:
                replica.proxy.close()
        if self.redis is not None:
            self.redis.cleanup()
        if self.postgres is not None:
            self.postgres.cleanup()
        if self.cluster is not None:
            self.cluster.stop()
        self.model.stop()

    def __enter__(self) -> System:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    def redis_client(self) -> Any:
        if self.cluster is not None:
            return connect(self.cluster.url)
        assert self.redis is not None
        return connect(self.redis.url)

    # --- what the faults do -------------------------------------------------------------------

    def kill9(self, replica: Replica) -> None:
        os.killpg(replica.pid, signal.SIGKILL)
        assert replica.server.proc is not None
        replica.server.proc.wait(timeout=10)

    def restart(self, replica: Replica) -> None:
        """Start a killed replica again on its port (its earlier logs are kept). It serves once
        /healthz answers; it is ready (its model adapter loaded: seconds on a busy machine) later,
        as a restarted pod is: the faults go on meanwhile."""
        replica.server.stop()  # the dead process's log files closed before new ones open
        self._keep_log(replica)
        replica.restarts += 1
        replica.server.start()

    def pause(self, replica: Replica) -> None:
        os.kill(replica.pid, signal.SIGSTOP)
        replica.paused = True

    def resume(self, replica: Replica) -> None:
        os.kill(replica.pid, signal.SIGCONT)
        replica.paused = False

    def kill_redis(self) -> None:
        assert self.redis is not None
        self.redis.kill9()

    def start_redis(self) -> None:
        assert self.redis is not None
        self.redis.start(timeout=60)

    def kill_database(self) -> None:
        """kill -9 of the PostgreSQL server and every backend (a crash: no checkpoint)."""
        assert self.postgres is not None
        self.postgres.kill9()

    def start_database(self) -> None:
        """PostgreSQL again on its directory (crash recovery from the WAL) and port."""
        assert self.postgres is not None
        self.postgres.start(timeout=120)

    def failover(self, key: str) -> tuple[int, int]:
        assert self.cluster is not None
        return self.cluster.failover(key)

    # --- the end ------------------------------------------------------------------------------

    def readiness(self, timeout: float) -> dict[str, str]:
        """Each replica's /readyz once it answers 200, or what it last answered."""
        out: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=3) as http:
            for replica in self.replicas:
                last = "no answer"
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        r = http.get(replica.url + "/readyz")
                        last = f"{r.status_code} {r.text[:120]}"
                        if r.status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.25)
                out[replica.url] = last
        return out

    def _keep_log(self, replica: Replica) -> None:
        """Copy the replica's stderr aside (a restart truncates it)."""
        kept = self.workdir / f"replica-{replica.index}.{replica.restarts}.log"
        with contextlib.suppress(OSError):
            shutil.copyfile(replica.server.stderr_path, kept)
            replica.logs.append(str(kept))

    def tracebacks(self) -> list[str]:
        """Tracebacks in any replica's stderr, over every life of it (once stopped)."""
        found = []
        for replica in self.replicas:
            for path in dict.fromkeys(replica.logs):
                with contextlib.suppress(OSError):
                    text = Path(path).read_text(errors="replace")
                    at = text.find("Traceback")
                    if at >= 0:
                        found.append(f"{path}: {text[max(0, at - 200) : at + 1200]}")
        return found
