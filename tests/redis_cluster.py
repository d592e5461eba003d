"""A real Redis Cluster on loopback for the tests: three masters with one replica each, started
from `redis-server --cluster-enabled yes` and joined with `redis-cli --cluster create`.

`shared_cluster()` starts one per test process, on first use, and stops it at exit; its `url` is a
`redis+cluster://` URL with every master as a seed node. `failover(key)` promotes the replica of the
master that holds `key` (CLUSTER FAILOVER, as an operator or a managed service does).
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster, key_slot

from tests.e2e.harness import free_port

MASTERS = 3


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                continue


class LocalRedisCluster:
    def __init__(self, masters: int = MASTERS, replicas: int = 1) -> None:
        self.ports: list[int] = []
        while len(self.ports) < masters * (1 + replicas):  # distinct: a port picked twice
            port = _free_cluster_port()  # would leave a running node without its process
            if port not in self.ports:
                self.ports.append(port)
        self.replicas = replicas
        self.dir = Path(tempfile.mkdtemp(prefix="a2a-redis-cluster-"))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.master_ports())

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=2)

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=5)

    def start(self) -> LocalRedisCluster:
        try:
            self._create()
        except BaseException:
            self.stop()  # no node outlives a cluster that did not come up
            raise
        return self

    def _create(self) -> None:
        for port in self.ports:
            self._start_node(port)
        hosts = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *hosts, "--cluster-replicas", str(self.replicas),
             "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
        self._until(self._healthy, "the cluster did not come up")

    def _start_node(self, port: int) -> None:
        self.processes[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
             "--cluster-node-timeout", "3000", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--logfile", f"redis-{port}.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._until(lambda: self.node(port).ping(), f"redis-server on {port} did not start")

    def master_ports(self) -> list[int]:
        return [port for port in self.ports if self._role(port) == "master"]

    def _role(self, port: int) -> str | None:
        try:
            return self.node(port).info("replication")["role"]
        except redis.RedisError:
            return None

    def _healthy(self) -> bool:
        for port in self.ports:
            info = self.node(port).cluster("info")
            state = info.get("cluster_state") if isinstance(info, dict) else None
            if state != "ok":
                return False
        # Every replica has caught up with its master's link.
        for port in self.ports:
            if self._role(port) == "slave":
                if self.node(port).info("replication").get("master_link_status") != "up":
                    return False
        return True

    def master_of(self, key: str) -> int:
        """The port of the master that holds `key`'s slot."""
        slot = key_slot(key.encode())
        for shard in self.node(self.ports[0]).execute_command("CLUSTER", "SLOTS"):
            start, end, master = shard[0], shard[1], shard[2]
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"no master for slot {slot}")

    def replica_of(self, master_port: int) -> int:
        for port in self.ports:
            info = self.node(port).info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == master_port:
                return port
        raise AssertionError(f"no replica of {master_port}")

    def failover(self, key: str) -> tuple[int, int]:
        """Promote the replica of `key`'s master (a manual failover: no write is lost); returns
        (old master, new master) once the new one serves the slot."""
        old = self.master_of(key)
        new = self.replica_of(old)
        self.node(new).execute_command("CLUSTER", "FAILOVER")
        self._until(lambda: self.master_of(key) == new and self._role(new) == "master",
                    f"the replica {new} was not promoted")  # fmt: skip
        self._until(self._healthy, "the cluster did not settle after the failover")
        return old, new

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()
        for process in self.processes.values():
            process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _until(check, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, what
            time.sleep(0.1)


_shared: LocalRedisCluster | None = None


def shared_cluster() -> LocalRedisCluster:
    """The test process's cluster, started on first use and stopped at exit."""
    global _shared
    if _shared is None:
        _shared = LocalRedisCluster().start()
        atexit.register(_shared.stop)
    return _shared


def cluster_stores_client(*, socket_timeout: float | None = 5.0):
    """An asyncio cluster client of the shared cluster, as the stores build theirs."""
    from stores.redis.cluster import ClusterAddress, cluster_client

    return cluster_client(ClusterAddress.parse(shared_cluster().url), socket_timeout=socket_timeout)
