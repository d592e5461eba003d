"""Round trips, statements and transactions to PostgreSQL per blocking send and per streamed
task: deterministic counts (not times), so a change to the stores is measured on a busy machine.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/pg_round_trips.py [--tasks 160]

Starts our server (the scripted model, 23 events a task, LEASE_TTL_S=600) on a fresh database
with bench/pg_statements/sitecustomize.py first on its PYTHONPATH, makes `--tasks` blocking sends
then `--tasks` streamed tasks, 16 at a time, and divides the asyncpg calls made meanwhile by the
tasks. A round trip is a call that waits for the server's answer: every statement, BEGIN, COMMIT,
ROLLBACK and reset query (asyncpg's at a release, when it has one); a pool acquire is not one
(it waits for a connection of ours), but its count says how often a send takes one. Background
work (the expiry sweep, heartbeats) runs meanwhile and is counted too: a few calls a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen
from side_by_side import BIN, ROOT, server

sys.path.insert(0, str(ROOT))
from tests import databases

RESET = "SELECT pg_advisory_unlock_all()"


def snapshot(path: Path) -> dict[str, list[float]]:
    time.sleep(1.5)  # the counter writes its totals every second
    return dict(json.loads(path.read_text()))


def per_task(before: dict[str, list[float]], after: dict[str, list[float]], tasks: int) -> dict:
    calls = {key: after[key][0] - before.get(key, [0, 0.0])[0] for key in after}
    calls = {key: count for key, count in calls.items() if count}
    acquires = sum(n for key, n in calls.items() if key.startswith("pool acquire"))
    # BEGIN, COMMIT, ROLLBACK and the reset query are sent through `execute` (counted there).
    sent = {
        key: n
        for key, n in calls.items()
        if key.split(":")[0] in ("execute", "fetch", "fetchrow", "fetchval")
    }

    def count(*texts: str) -> float:
        return sum(n for key, n in sent.items() if any(text in key for text in texts))

    begins, commits = count(": BEGIN"), count(": COMMIT")
    resets, rollbacks = count(RESET), count(": ROLLBACK")
    own = {
        key: n
        for key, n in sent.items()
        if not any(text in key for text in (": BEGIN", ": COMMIT", ": ROLLBACK", RESET))
    }
    return {
        "round trips": sum(sent.values()) / tasks,
        "statements": sum(own.values()) / tasks,
        "transactions (BEGIN ... COMMIT)": commits / tasks,
        "BEGIN": begins / tasks,
        "pool acquires": acquires / tasks,
        "reset queries": resets / tasks,
        "rollbacks": rollbacks / tasks,
        "by statement": {key: round(n / tasks, 2) for key, n in sorted(own.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="pg-round-trips-")) / "calls.json"
    url = asyncio.run(databases.create_database())
    env = {
        "DATABASE_URL": url,
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": "20",
        "SCRIPTED_DELAY_MS": "0",
        "LEASE_TTL_S": "600",
        "LOG_LEVEL": "warning",
        "PG_STATEMENTS_OUT": str(out),
        # The counter first: its sitecustomize wraps asyncpg before the server imports it.
        "PYTHONPATH": f"{ROOT / 'bench' / 'pg_statements'}:{ROOT}",
    }
    try:
        with server([str(BIN / "a2a-server")], env) as (base, _, _):
            figures = {}
            for method in ("SendMessage", "SendStreamingMessage"):
                before = snapshot(out)
                began = time.monotonic()
                asyncio.run(
                    loadgen.calls(
                        base, method=method, count=args.tasks, concurrency=args.concurrency
                    )
                )
                elapsed = time.monotonic() - began
                figures[method] = per_task(before, snapshot(out), args.tasks)
                # Wall time, for a glance only: it moves with the machine's other load.
                figures[method]["tasks/s (wall, noisy)"] = args.tasks / elapsed
    finally:
        asyncio.run(databases.drop_database(url))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
