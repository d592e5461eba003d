"""The nemesis' tool, loaded by the replicas (AGENT_TOOLS): each run writes a line when it starts
and one when it ends to `$NEMESIS_TOOL_LOG`, so the checker sees every run of every call and in
which process it ran. Its result names the run, so the conversation shows which run was kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid


def _record(event: str, key: str, run: str) -> None:
    path = os.environ.get("NEMESIS_TOOL_LOG")
    if not path:
        return
    # CLOCK_MONOTONIC is one clock for every process of the machine: the checker compares it
    # with the model's records.
    at = time.monotonic()
    line = json.dumps({"event": event, "key": key, "run": run, "pid": os.getpid(), "at": at})
    # O_APPEND: each short write lands whole, with three processes appending.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def nemesis_step(key: str) -> str:
    """One step of the nemesis' workload (takes about half a second); `key` names the turn."""
    run = uuid.uuid4().hex[:12]
    _record("start", key, run)
    await asyncio.sleep(0.5)
    _record("end", key, run)
    return f"ran {key} as {run}"


def read_runs(path: str) -> list[dict[str, object]]:
    """Every line the tool wrote (a replica killed mid-write may leave a torn last line)."""
    runs = []
    try:
        with open(path, encoding="utf-8") as log:
            for line in log:
                try:
                    runs.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return runs
