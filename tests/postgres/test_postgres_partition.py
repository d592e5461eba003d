"""A replica cut off from the database in the middle of a transaction (tests/e2e_chaos/blackhole.py
between it and the server: its session stays open on the server, nothing crosses): the server
ends the transaction once it has been idle for longer than its client would wait
(stores.postgres.database.session_settings), so the rows it had locked are not held for as long
as TCP takes to notice (hours), and another replica takes the lease over."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from stores.base import StoreUnavailable
from tests.e2e_chaos.blackhole import Blackhole

from .conftest import Replicas

OWNER, TASK = "alice", "t-cut"


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{port}").geturl()


async def test_a_transaction_cut_off_mid_way_does_not_keep_its_rows_locked(
    replicas: Replicas, database: str
) -> None:
    direct = replicas(command_timeout_s=0.5)
    assert await direct.leases.acquire(TASK, owner=OWNER, holder="first", ttl_s=0.2) is not None
    with Blackhole(urlsplit(database).port or 5432) as proxy:
        cut_off = replicas(url=_through(database, proxy.port), command_timeout_s=0.5)
        await cut_off.ping()  # its pool is open
        await asyncio.sleep(0.3)  # the first lease has expired
        with pytest.raises(StoreUnavailable):
            async with cut_off.database.transaction() as connection:
                await connection.execute(
                    "SELECT 1 FROM leases WHERE owner = $1 AND task_id = $2 FOR UPDATE",
                    OWNER, TASK,
                )  # fmt: skip
                proxy.cut()  # the lock is held; its next statement never reaches the server
                await connection.execute("SELECT 1")
        # The cut lasts; the server rolls the silent transaction back and the row is free.
        taken = None
        for _ in range(20):
            try:
                taken = await direct.leases.acquire(TASK, owner=OWNER, holder="next", ttl_s=5)
                break
            except StoreUnavailable:  # its statement waited on the lock past its timeout
                await asyncio.sleep(0.25)
        assert taken is not None, "the cut-off transaction's row lock outlived the cut's seconds"
        proxy.heal()
