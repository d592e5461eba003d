"""Where a server's time on PostgreSQL goes (bench only, never shipped): put this folder first on
the server's PYTHONPATH and every asyncpg call it makes is counted and timed (wall time, from the
call to its answer: the round trip, PostgreSQL's work and the wait for the event loop) by
statement, with the pool's acquire (waiting for a free connection) and release (asyncpg's reset
query) apart; the totals are written every second to $PG_STATEMENTS_OUT as JSON
{statement: [calls, seconds]}. How bench/RESULTS.md's issue 51 breakdown was made:

    PYTHONPATH=bench/pg_statements:. PG_STATEMENTS_OUT=/tmp/pg.json DATABASE_URL=postgresql://... \\
        LLM_MODEL=scripted .venv/bin/a2a-server --port 9181 &
    wrk -t1 -c16 -d14s -s send.lua http://127.0.0.1:9181/     # send.lua: loadgen._SEND_LUA
"""

import collections
import json
import os
import threading
import time

import asyncpg.connection
import asyncpg.pool
import asyncpg.transaction

stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])


def _wrap(cls: type, name: str, label: str | None = None) -> None:
    original = getattr(cls, name)

    async def timed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            sql = " ".join(str(args[0]).split())[:90] if args else ""
            entry = stats[label or f"{name}: {sql}"]
            entry[0] += 1
            entry[1] += time.perf_counter() - began

    setattr(cls, name, timed)


for _method in ("execute", "fetch", "fetchrow", "fetchval"):
    _wrap(asyncpg.connection.Connection, _method)
_wrap(asyncpg.transaction.Transaction, "start", "BEGIN (transaction start)")
_wrap(asyncpg.transaction.Transaction, "commit", "COMMIT (transaction commit)")
_wrap(asyncpg.pool.Pool, "_acquire", "pool acquire (the wait for a connection)")
_wrap(asyncpg.pool.Pool, "release", "pool release (asyncpg's reset query)")


def _dump() -> None:
    out = os.environ.get("PG_STATEMENTS_OUT", "/tmp/pg_statements.json")
    while True:
        time.sleep(1)
        with open(out, "w") as file:
            json.dump(dict(stats), file)


threading.Thread(target=_dump, daemon=True).start()
