#!/usr/bin/env python
"""Capacity figures for docs/scaling.md: one replica on one Redis and on a Redis Cluster.

For each backend (a private `redis-server`, and a private three-master cluster from
tests/redis_cluster.py), one `a2a-server` with the scripted model (SCRIPTED_CHUNKS chunks) is
driven with wrk (SendMessage, blocking, to COMPLETED) and with the asyncio stream client, and the
Redis side is read from INFO before and after: CPU seconds (user + sys) and commands processed,
summed over the masters, and how the commands spread over the shards. From those: what one
replica does per second, and what one Redis core spends per turn, hence how many turns per second
(and replicas) one Redis or one shard carries before its core is full.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/redis_capacity.py [--seconds 10]

Not part of the test suite. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import loadgen  # noqa: E402
from loadgen import private_redis  # noqa: E402
from side_by_side import server  # noqa: E402

from tests.redis_cluster import LocalRedisCluster  # noqa: E402

SERVER = [str(ROOT / ".venv" / "bin" / "a2a-server")]


def redis_side(ports: list[int]) -> tuple[float, list[int]]:
    """CPU seconds used so far (all masters) and commands processed per master."""
    cpu, commands = 0.0, []
    for port in ports:
        client = redis.Redis(port=port)
        info = client.info()
        cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        commands.append(int(info["total_commands_processed"]))
        client.close()
    return cpu, commands


def measure(url: str, ports: list[int], chunks: int, seconds: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    env = {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": str(chunks), "REDIS_URL": url}
    with server(SERVER, env) as (base, _, _):
        completed = loadgen.send_params()
        loadgen.wrk(
            base,
            method="SendMessage",
            params=completed,
            expect="TASK_STATE_COMPLETED",
            concurrency=16,
            seconds=2,
        )  # fmt: skip  (warm-up)
        cpu0, commands0 = redis_side(ports)
        rate = loadgen.wrk(
            base,
            method="SendMessage",
            params=completed,
            expect="TASK_STATE_COMPLETED",
            concurrency=16,
            seconds=seconds,
        )
        cpu1, commands1 = redis_side(ports)
        turns = rate.per_s * seconds
        per_shard = [after - before for before, after in zip(commands0, commands1, strict=True)]
        figures["turns/s, one replica (SendMessage c=16)"] = rate.per_s
        figures["turn p99 ms"] = rate.p99_ms
        figures["Redis CPU ms per turn"] = (cpu1 - cpu0) * 1000 / turns
        figures["Redis commands per turn"] = sum(per_shard) / turns
        figures["busiest shard's share of commands"] = max(per_shard) / max(sum(per_shard), 1)
        figures["turns/s one Redis core carries"] = turns / max(cpu1 - cpu0, 1e-9)
        cpu0, _ = redis_side(ports)
        streamed = asyncio.run(loadgen.streams(base, concurrency=32, seconds=seconds))
        cpu1, _ = redis_side(ports)
        figures["streamed events/s, one replica (c=32)"] = streamed.events_per_s
        figures["Redis CPU us per streamed event"] = (
            (cpu1 - cpu0) * 1e6 / max(streamed.events_per_s * seconds, 1)
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with private_redis() as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        results["one Redis"] = measure(url, [port], args.chunks, args.seconds)
    cluster = LocalRedisCluster(masters=3, replicas=0).start()
    try:
        results["cluster, 3 masters"] = measure(
            cluster.url, cluster.master_ports(), args.chunks, args.seconds
        )
    finally:
        cluster.stop()
    names = list(next(iter(results.values())))
    print(f"| metric | {' | '.join(results)} |")
    print(f"|---|{'---|' * len(results)}")
    for name in names:
        cells = " | ".join(f"{results[backend][name]:,.2f}" for backend in results)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
