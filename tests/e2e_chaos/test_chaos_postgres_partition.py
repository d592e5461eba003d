"""A replica cut off from PostgreSQL (a black-holed network) for several lease periods, then healed:
the test of tests/e2e_chaos/test_chaos_partition.py, collected here again on PostgreSQL.

Replica A reaches the database through the proxy the test black-holes (tests/e2e_chaos/blackhole.py
is a generic TCP proxy: connections stay open, nothing crosses, new ones are accepted and answered
by nobody), its pool and its LISTEN connection alike; replica B reaches it directly. Both on a
fresh database of the machine's PostgreSQL (tests/databases.py: the cut does not touch the
server), LEASE_TTL_S=3, DATABASE_COMMAND_TIMEOUT_S=2 (the default; see LEASE_TTL_S). As
there, each round streams a turn from A (JSON-RPC) with a subscriber on A (HTTP+JSON) and a
blocking send waiting on A, then cuts A off:

* A answers with the clean store-unavailable error within seconds and fails /readyz; its two
  streams and the blocking send end with that error (a statement times out, or the listener's
  ping finds its connection silent and wakes every waiter to read again, and fail);
* B takes both turns over once A's lease expires (the lease row's conditional update); each
  client resubscribes on B with its Last-Event-ID and gets every event once, the answer whole;
* healed, the held connections dropped or (one round) let through late: A's writes are refused
  by the fence, it logs the lost lease, is ready again by itself and completes a new turn.

The journal, the task and the conversation are checked from the rows
(tests/e2e_chaos/postgres_view.py), and no task is left active without a live lease.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.databases import ADMIN_URL, postgres_database
from tests.e2e.harness import RpcClient, ServerProcess
from tests.e2e_chaos.blackhole import Blackhole
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.postgres_view import PostgresView
from tests.e2e_chaos.targets import Target
from tests.e2e_chaos.test_chaos_partition import (
    test_a_replica_cut_off_from_redis_ends_its_streams_fails_fast_and_recovers as test_a_replica_cut_off_from_postgres_ends_its_streams_fails_fast_and_recovers,
)
from tests.e2e_redis.support import Cluster, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

# A lease and a statement timeout a little longer than the Redis test's (2 s, 1.5 s): a statement
# on a shared, busy PostgreSQL can take a second, and a replica whose heartbeat lapses before
# the cut loses its turns for a reason the test is not about. The cut still outlasts the lease
# (it lasts until B has finished the turn it took over).
LEASE_TTL_S = 3
COMMAND_TIMEOUT_S = 2.0

__all__ = ["test_a_replica_cut_off_from_postgres_ends_its_streams_fails_fast_and_recovers"]


def through(url: str, port: int) -> str:
    """`url` with its host and port replaced by the proxy's (127.0.0.1:`port`)."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{port}").geturl()


@pytest.fixture(scope="module")
def partitioned(
    gated_llm: GatedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Target, Blackhole]]:
    """(A through the proxy, B direct) as a Target, and the proxy."""
    tool_log = Path(tmp_path_factory.mktemp("pg-partition")) / "tools.log"
    env = {"LEASE_TTL_S": str(LEASE_TTL_S), "DATABASE_COMMAND_TIMEOUT_S": str(COMMAND_TIMEOUT_S)}
    with (
        postgres_database() as url,
        Blackhole(urlsplit(ADMIN_URL).port or 5432) as proxy,
        Cluster(gated_llm.base_url, database_url=url, tool_log=tool_log, extra_env=env) as cluster,
    ):
        a = ServerProcess(
            gated_llm.base_url, env={**cluster.env, "DATABASE_URL": through(url, proxy.port)}
        )
        cluster.servers.append(a)
        with ThreadPoolExecutor(max_workers=1) as pool:  # A and B start together
            starting = pool.submit(lambda: wait_ready(a.start()))
            (b,) = cluster.spawn(1)
            starting.result()
        for server in (a, b):  # a first turn each: its first-use work is not under the test
            rpc = RpcClient(server.url, timeout=60)
            try:
                assert rpc.send("warm up")["status"]["state"] == "TASK_STATE_COMPLETED"
            finally:
                rpc.close()
        try:
            yield Target("postgres", [a, b], PostgresView(url)), proxy  # type: ignore[arg-type]
        finally:
            proxy.heal()
            cluster.close()


@pytest.fixture
def target(partitioned: tuple[Target, Blackhole]) -> Target:
    return partitioned[0]  # its servers' logs are attached to a failure (conftest)
