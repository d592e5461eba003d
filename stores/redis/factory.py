"""The Redis stores of one replica, built from a URL: their three clients and pool sizes.

The stores themselves: `tasks`, `leases`, `messages`, `checkpoints`, `push`; every key in `keys`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from stores.base import DEFAULT_TASK_TTL_S
from stores.rate_limit import RateLimit, RateLimiter
from stores.redis.batch import CommandBatcher
from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.cluster import ClusterAddress, cluster_client, is_cluster_url
from stores.redis.leases import RedisLeaseStore
from stores.redis.messages import RedisMessageStore
from stores.redis.push import RedisPushConfigStore
from stores.redis.rate_limit import RedisRateLimiter
from stores.redis.read_watch import ReadWatch, ping_within
from stores.redis.support import RedisClient, packing_with_hiredis
from stores.redis.tasks import RedisTaskStore

__all__ = [
    "PoolSizes",
    "RedisCheckpointStore",
    "RedisLeaseStore",
    "RedisMessageStore",
    "RedisStores",
    "RedisTaskStore",
    "create_redis_stores",
]

POOL_WAITS = 10
"""How many command timeouts a caller may wait for a free connection (see create_redis_stores)."""

COMMANDS_MAX = 512
LEASES_MAX = 256
# The shared batcher has one round trip in flight at a time (and a lone command's retry).
BATCH_CONNECTIONS = 4


@dataclass(frozen=True, kw_only=True)
class PoolSizes:
    """How many connections each of a replica's three Redis clients may open.

    The rule, from the replica's admission limits (`A2A_MAX_RUNNING_TURNS`, `A2A_MAX_STREAMS`):

    * readers = max_streams + 16. On a cluster every open stream and every blocking SendMessage
      holds one stream slot and, while it waits, one blocking journal read (shared with the
      other readers of its task); the 16 spare cover the other blocking waits (a CancelTask
      waiting for another replica to record the cancel). On one Redis they share reads of up
      to 128 journals each (`JournalMux`): one connection per 128 tasks waited on.
    * commands = max_running_turns + max_streams // 4 + 32, at most COMMANDS_MAX. A running turn
      writes one command at a time; a stream or blocking send runs a short lookup between its
      blocking reads (a burst of new streams all do it at once, hence a quarter of them); 32 for
      everything else (GetTask, ListTasks, claims, creates).
    * leases = max_running_turns + 8, at most LEASES_MAX: every running turn may take or release
      its lease at the same moment (a burst of sends), and 8 for the cancel listener (held for
      good), the renewal loop, the orphan sweep and the readiness probe.

    The caps: one event loop drives every connection, and past a few hundred more connections
    add no throughput, only connection attempts that time out while the loop is saturated
    (bench/RESULTS.md, "Figures moved out of docstrings"). Callers of a full pool wait their
    turn instead (see `create_redis_stores`).

    Connections are opened on demand, so an idle replica holds few of them.
    """

    commands: int
    readers: int
    leases: int

    @classmethod
    def for_limits(cls, *, max_running_turns: int, max_streams: int) -> PoolSizes:
        return cls(
            commands=min(max_running_turns + max_streams // 4 + 32, COMMANDS_MAX),
            readers=max_streams + 16,
            leases=min(max_running_turns + 8, LEASES_MAX),
        )


@dataclass(frozen=True, kw_only=True)
class RedisStores:
    """The four Redis stores over three clients: commands, blocking reads, and leases.

    Leases (and the readiness probe) have a client of their own, so a flood of commands can never
    starve a lease renewal; blocking reads have theirs, so waiting readers never starve a write.
    """

    tasks: RedisTaskStore
    messages: RedisMessageStore
    checkpoints: RedisCheckpointStore
    leases: RedisLeaseStore
    pushes: RedisPushConfigStore
    client: RedisClient
    read_client: RedisClient
    lease_client: RedisClient
    batch_client: RedisClient  # the shared batcher's (`client` itself on a cluster)
    prefix: str = "a2a"
    ping_timeout_s: float = 3.0

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        """Buckets in Redis on the command client: every replica of this prefix shares them."""
        return RedisRateLimiter(self.client, limit, prefix=self.prefix)

    async def ping(self) -> None:
        """Raise StoreUnavailable unless Redis answers within `ping_timeout_s` (the readiness
        probe: on the lease client, whose pool a flood of commands or readers cannot fill)."""
        await ping_within(self.lease_client, self.ping_timeout_s)

    async def aclose(self) -> None:
        await self.tasks.aclose()
        await self.read_client.aclose()
        await self.lease_client.aclose()
        if self.batch_client is not self.client:
            await self.batch_client.aclose()
        await self.client.aclose()


def create_redis_stores(
    url: str,
    *,
    prefix: str = "a2a",
    ttl_s: int = DEFAULT_TASK_TTL_S,
    journal_max: int = 10_000,
    max_running_turns: int,
    max_streams: int,
    command_timeout_s: float = 1.5,
    cluster: bool = False,
) -> RedisStores:
    """Build the Redis stores for a `redis://` or `rediss://` URL (TLS with the latter), or a
    Redis Cluster (`redis+cluster://host:port,...`, or `cluster=True`: see stores.redis.cluster).

    Three clients, each with a pool of its own, sized by `PoolSizes.for_limits`: commands,
    blocking journal reads, and leases (renewals, the cancel listener, the readiness probe).

    Failing fast when Redis hangs: a command (and a connection attempt) without an answer after
    `command_timeout_s` fails with StoreUnavailable; a dropped connection is retried once, at
    once, and a timeout never (a retry would multiply it). So a request fails within one command
    timeout, and a hung Redis also frees every pooled connection within one command timeout.

    Waiting for a free connection is not a failure: under a burst the event loop, not Redis, is
    the bottleneck, and a short pool wait would turn a busy replica into "store unavailable"
    errors below its admission limits. A caller queues for up to `POOL_WAITS` command timeouts;
    while Redis hangs the queue drains one pool-full per command timeout.

    Blocking reads have no socket timeout (a read blocks for up to its own `timeout_s`): the
    task store bounds each one itself, the wait for a connection included, and while any waits
    Redis is pinged every `command_timeout_s` (the readiness probe's ping): a ping without an
    answer ends them all with StoreUnavailable (see stores.redis.read_watch), so an open stream
    learns of a hung or partitioned Redis within a few command timeouts, not after its block.
    Nothing connects until the first command.
    """
    if not url.startswith(("redis://", "rediss://")) and not is_cluster_url(url):
        raise ValueError(
            "REDIS_URL must start with redis://, rediss://, redis+cluster:// or"
            f" rediss+cluster:// (got {url.split(':')[0]!r})"
        )
    sizes = PoolSizes.for_limits(max_running_turns=max_running_turns, max_streams=max_streams)
    pool_wait_s = POOL_WAITS * command_timeout_s
    address = ClusterAddress.parse(url) if cluster or is_cluster_url(url) else None

    def client_of(size: int, *, timeout_s: float | None, connect_timeout_s: float) -> RedisClient:
        if address is not None:
            # Per shard: the same pool sizes, routed by slot; a failover (MOVED, a dropped
            # connection) makes the client read the slot map again.
            return cluster_client(
                address,
                max_connections=size,
                socket_timeout=timeout_s,
                socket_connect_timeout=connect_timeout_s,
                retry=Retry(NoBackoff(), retries=1),
                decode_responses=False,
            )
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=size,
            timeout=pool_wait_s if timeout_s is not None else None,
            socket_timeout=timeout_s,
            socket_connect_timeout=connect_timeout_s,
            retry=Retry(NoBackoff(), retries=1, supported_errors=(RedisConnectionError,)),
            health_check_interval=30,
            decode_responses=False,
        )
        return Redis.from_pool(packing_with_hiredis(pool))

    # A burst of requests (thousands of streams opening at once) opens hundreds of connections
    # while the event loop is saturated: a connection attempt then waits for the loop, not for
    # Redis, and a tight bound turned that burst into "store unavailable" for most of it. A
    # frozen Redis still accepts connections (the kernel does), so commands still fail within
    # one command timeout; only an unreachable host takes the longer bound to be reported.
    burst_connect_timeout_s = max(5.0, command_timeout_s)
    client = client_of(
        sizes.commands, timeout_s=command_timeout_s, connect_timeout_s=burst_connect_timeout_s
    )
    read_client = client_of(
        sizes.readers, timeout_s=None, connect_timeout_s=burst_connect_timeout_s
    )
    lease_client = client_of(
        sizes.leases, timeout_s=command_timeout_s, connect_timeout_s=command_timeout_s
    )
    if address is None:
        # One pipeline in flight for the stores' writes, on connections of its own: each round
        # trip is bounded as a whole (see stores.redis.batch), not each reply read.
        batch_client = client_of(
            BATCH_CONNECTIONS, timeout_s=None, connect_timeout_s=burst_connect_timeout_s
        )
        batcher = CommandBatcher(batch_client, round_trip_timeout_s=command_timeout_s)
    else:
        batch_client, batcher = client, CommandBatcher(client)  # a cluster never batches
    ping_timeout_s = 2 * command_timeout_s
    read_watch = ReadWatch(
        partial(ping_within, lease_client, ping_timeout_s), interval_s=command_timeout_s
    )
    return RedisStores(
        tasks=RedisTaskStore(
            client,
            prefix=prefix,
            ttl_s=ttl_s,
            journal_max=journal_max,
            read_client=read_client,
            batcher=batcher,
            read_watch=read_watch,
        ),
        messages=RedisMessageStore(client, prefix=prefix, ttl_s=ttl_s, batcher=batcher),
        checkpoints=RedisCheckpointStore(client, prefix=prefix, ttl_s=ttl_s, batcher=batcher),
        leases=RedisLeaseStore(lease_client, prefix=prefix, ttl_s=ttl_s, batcher=batcher),
        pushes=RedisPushConfigStore(client, prefix=prefix, ttl_s=ttl_s),
        client=client,
        read_client=read_client,
        lease_client=lease_client,
        batch_client=batch_client,
        prefix=prefix,
        ping_timeout_s=ping_timeout_s,
    )
