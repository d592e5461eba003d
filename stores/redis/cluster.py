"""Redis Cluster: what a cluster URL means, and the cluster client the stores then use.

`REDIS_URL=redis+cluster://host:port[,host:port...]` (or `rediss+cluster://` for TLS), or a plain
`redis://` URL with REDIS_CLUSTER=true: the hosts are seed nodes; redis-py's cluster client reads
the slot map from them and routes every command, script and blocking read to the shard that holds
its key. The stores need nothing else from a cluster: every script and pipeline step touches keys
of one hash tag (one slot), see `stores.redis.keys`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio.cluster import ClusterNode, RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}  # scheme -> TLS


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


@dataclass(frozen=True, kw_only=True)
class ClusterAddress:
    """Seed nodes and credentials of a cluster URL (the database, if any, must be 0)."""

    nodes: list[tuple[str, int]]
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @classmethod
    def parse(cls, url: str) -> ClusterAddress:
        scheme, rest = url.split("://", 1)
        tls = CLUSTER_SCHEMES.get(scheme, scheme == "rediss")
        credentials, _, hosts = rest.rpartition("@")
        hosts, _, path = hosts.partition("/")
        if path.strip("/") not in ("", "0"):
            raise ValueError("a Redis Cluster has only database 0 (drop the /N from REDIS_URL)")
        nodes = []
        for host in hosts.split(","):
            parsed = urlsplit(f"//{host}")
            if not parsed.hostname:
                raise ValueError(f"REDIS_URL names no host in {host!r}")
            nodes.append((parsed.hostname, parsed.port or 6379))
        username, _, password = credentials.partition(":") if credentials else ("", "", "")
        return cls(
            nodes=nodes,
            username=unquote(username) or None,
            password=unquote(password) or None,
            tls=tls,
        )


class ClusterClient(RedisCluster):
    """redis-py's cluster client, whose first command runs alone.

    Measured with redis-py 8.1: when many commands are a fresh client's first at once, some fail
    ("Connection closed by server", a writer closed under a connection being set up): the client
    rebuilds its node table while they connect. Once one command has completed, concurrent use
    is safe; so the first one is run alone and the others wait for it. A pipeline does not go
    through `execute_command`: `ready()` first.
    """

    _warmed = False
    _warming: asyncio.Lock | None = None

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if not self._warmed:
            if self._warming is None:
                self._warming = asyncio.Lock()
            async with self._warming:
                if not self._warmed:
                    result = await super().execute_command(*args, **kwargs)
                    self._warmed = True
                    return result
        return await super().execute_command(*args, **kwargs)

    async def ready(self) -> None:
        if not self._warmed:
            await self.execute_command("PING")


def cluster_client(address: ClusterAddress, **options: Any) -> ClusterClient:
    """A cluster client (`options`: max_connections per node, socket timeouts, ...)."""
    return ClusterClient(
        startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],
        username=address.username,
        password=address.password,
        ssl=address.tls,
        **options,
    )
