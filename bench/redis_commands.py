#!/usr/bin/env python
"""How many Redis commands (and round trips, and bytes) a turn costs, per turn and per chunk.

Runs a real `a2a-server` against a private `redis-server` (free loopback port) through a small
counting TCP proxy, with the fake OpenAI model streaming K text chunks per answer, and measures
N turns for each K:

* executed commands: `INFO commandstats` deltas (these include the commands Lua scripts run);
* client commands: the commands the server sent, parsed from the RESP it wrote (EVALSHA = 1);
* round trips: request bursts per connection (a pipeline is one);
* bytes the server wrote to Redis.

Two modes: `writer` (SendMessage with returnImmediately: only the turn's own writes) and `stream`
(SendStreamingMessage read to the end: the writer plus one SSE reader on the same replica).

Then the same counters for a naive baseline, simulated in the same run on the same Redis: a store
that rewrites the whole task snapshot (with the answer so far) for every chunk and PUBLISHes the
event (one pipelined round trip per chunk), and a reader that re-reads the snapshot per event.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/redis_commands.py
    ... --chunks 50 200 --turns 5 --chunk-delay 0.005

Not part of the test suite. Loopback only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import redis  # noqa: E402
from counting_proxy import Counters, CountingProxy  # noqa: E402

from tests.e2e.harness import RpcClient, ServerProcess, send_params  # noqa: E402
from tests.e2e_redis.support import RedisServer, open_sse, rpc_body, wait_ready  # noqa: E402
from tests.fakes.fake_llm import FakeLLMServer, text  # noqa: E402


def commandstats(client: redis.Redis, field: str = "calls") -> collections.Counter[str]:
    """`INFO commandstats` per command: its calls, or (`field="usec"`) the time Redis spent in it
    (a script's time includes the commands it runs, which count their own too)."""
    info = client.info("commandstats")
    out: collections.Counter[str] = collections.Counter()
    for key, value in info.items():
        name = key.removeprefix("cmdstat_").upper()
        if not name.startswith(("INFO", "CONFIG")):
            out[name] = int(value[field])
    return out


def redis_cpu_s(client: redis.Redis) -> float:
    """The Redis process' CPU time (user + system), from `INFO cpu`."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class Measure:
    executed: collections.Counter[str]
    client: Counters
    script_usec: float = 0.0  # Redis' time in the scripts (EVALSHA) and journal reads (XREAD)
    cpu_s: float = 0.0  # the Redis process' CPU (network and event loop too)

    @property
    def executed_total(self) -> int:
        return sum(self.executed.values())

    @property
    def client_total(self) -> int:
        return sum(self.client.commands.values())


class Meter:
    def __init__(self, direct: redis.Redis, proxy: CountingProxy) -> None:
        self.direct, self.proxy = direct, proxy

    def begin(self) -> tuple[collections.Counter[str], Counters, float, float]:
        return (commandstats(self.direct), self.proxy.snapshot(), self._top_usec(),
                redis_cpu_s(self.direct))  # fmt: skip

    def end(self, start: tuple[collections.Counter[str], Counters, float, float]) -> Measure:
        executed = commandstats(self.direct)
        executed.subtract(start[0])
        usec, cpu_s = self._top_usec() - start[2], redis_cpu_s(self.direct) - start[3]
        return Measure(+executed, self.proxy.snapshot() - start[1], usec, cpu_s)

    def _top_usec(self) -> float:
        """Redis' time in the scripts (which includes the commands they run) and the journal
        reads: nearly all the server sends (the rest, a DEL or a GET a turn, is also what
        scripts run, and `INFO commandstats` does not tell the two apart)."""
        usec = commandstats(self.direct, "usec")
        return float(usec["EVALSHA"] + usec["XREAD"])


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


def run_turns(mode: str, server: ServerProcess, rpc: RpcClient, llm: FakeLLMServer, k: int,
              turns: int, delay: float) -> dict[str, Any]:  # fmt: skip
    """N turns; return the last task (for the baseline's snapshot size)."""
    last: dict[str, Any] = {}
    for _ in range(turns):
        marker = f"bench-{uuid.uuid4().hex[:8]}"
        llm.script(text([f"tok{i:03d} " for i in range(k)], chunk_delay=delay,
                        when_user_contains=marker))  # fmt: skip
        if mode == "stream":
            body = rpc_body("SendStreamingMessage", send_params(f"go {marker}"), 1)
            with open_sse(server.url, "/", body, read_timeout=60) as s:
                events = list(s.sse_events())
            final = events[-1].data["result"]["statusUpdate"]["status"]["state"]
            assert final == "TASK_STATE_COMPLETED", events[-1].raw
            task_id = events[0].data["result"]["task"]["id"]
        else:
            task_id = rpc.send(f"go {marker}", configuration={"returnImmediately": True})["id"]
            deadline = time.monotonic() + 60
            while not llm.records_for(marker) or llm.records_for(marker)[0].finished_at is None:
                assert time.monotonic() < deadline, "model call never finished"
                time.sleep(0.02)
        time.sleep(0.3)  # let the turn finish its last writes (state, forget) off the clock
        last = {"task_id": task_id}
    return last


def naive_baseline(client: redis.Redis, task: dict[str, Any], k: int, turns: int,
                   readers: int) -> None:  # fmt: skip
    """A store that rewrites the whole snapshot per chunk (SET + PUBLISH, pipelined), and readers
    that re-read the snapshot on every event (GET). States: submitted, working, completed."""
    prefix = f"bench-naive-{uuid.uuid4().hex[:8]}"
    chunks = [f"tok{i:03d} " for i in range(k)]
    ttl_ms = 7 * 24 * 3600 * 1000
    for _ in range(turns):
        key = f"{prefix}:task:{uuid.uuid4()}"
        snap = json.loads(json.dumps(task))
        snap["artifacts"] = [{"artifactId": str(uuid.uuid4()), "name": "answer",
                              "parts": [{"text": ""}]}]  # fmt: skip

        def write(event: dict[str, Any], key: str = key, snap: dict[str, Any] = snap) -> None:
            pipe = client.pipeline(transaction=False)
            pipe.set(key, json.dumps(snap), px=ttl_ms)
            pipe.publish(f"{prefix}:events", json.dumps(event))
            pipe.execute()
            for _ in range(readers):
                client.get(key)

        for state in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
            snap["status"] = {"state": state}
            write({"statusUpdate": {"status": snap["status"]}})
        so_far = ""
        for i, c in enumerate(chunks):
            so_far += c
            snap["artifacts"][0]["parts"][0]["text"] = so_far
            write({"artifactUpdate": {"append": i > 0, "lastChunk": i == k - 1,
                                      "artifact": {"parts": [{"text": c}]}}})  # fmt: skip
        snap["status"] = {"state": "TASK_STATE_COMPLETED"}
        write({"statusUpdate": {"status": snap["status"]}})
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    k: int
    turns: int
    m: Measure

    def per_turn(self) -> tuple[float, float, float, float]:
        n = self.turns
        return (self.m.executed_total / n, self.m.client_total / n,
                self.m.client.round_trips / n, self.m.client.bytes_up / n)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chunks", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--chunk-delay", type=float, default=0.005)
    ap.add_argument(
        "--modes", nargs="+", default=["writer", "stream"], choices=["writer", "stream"]
    )
    ap.add_argument("--breakdown", action="store_true", help="print per-command counts too")
    ap.add_argument("--json", help="also write the server's rows (per turn, per chunk) here")
    args = ap.parse_args()

    redis_srv = RedisServer(persistent=False).start()
    proxy = CountingProxy(redis_srv.port).start()
    direct = redis.Redis(host="127.0.0.1", port=redis_srv.port)
    rows: list[Row] = []
    with FakeLLMServer() as llm:
        server = ServerProcess(llm.base_url, env={
            "REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0",
            "REDIS_KEY_PREFIX": "bench",
            "LEASE_TTL_S": "600",  # renewals/recovery sweeps every 200 s: none during a run
            "LOG_LEVEL": "warning",
        })  # fmt: skip
        server.start()
        rpc = RpcClient(server.url, timeout=60)
        try:
            wait_ready(server)
            meter = Meter(direct, proxy)
            run_turns("stream", server, rpc, llm, 5, 2, 0)  # warm-up (scripts loaded, pools)
            start = meter.begin()
            time.sleep(2.0)
            idle = meter.end(start)
            tasks: dict[int, dict[str, Any]] = {}
            for k in args.chunks:
                for mode in args.modes:
                    start = meter.begin()
                    last = run_turns(mode, server, rpc, llm, k, args.turns, args.chunk_delay)
                    rows.append(Row(f"server/{mode}", k, args.turns, meter.end(start)))
                    tasks[k] = rpc.get_task(last["task_id"])
                for readers, label in ((0, "naive/writer"), (1, "naive/stream")):
                    if label.split("/")[1] not in args.modes:
                        continue
                    bench_client = redis.Redis(host="127.0.0.1", port=proxy.port)
                    start = meter.begin()
                    naive_baseline(bench_client, tasks[k], k, args.turns, readers)
                    m = meter.end(start)
                    bench_client.close()
                    # its connection handshake and cleanup SCAN/DEL are not part of the baseline
                    for name in ("SCAN", "DEL", "HELLO", "CLIENT"):
                        m.executed.pop(name, None)
                        m.client.commands.pop(name, None)
                    rows.append(Row(label, k, args.turns, m))
        finally:
            rpc.close()
            server.cleanup()
            direct.close()
            proxy.stop()
            redis_srv.cleanup()

    print(
        f"\nturns per row: {args.turns}; chunk delay {args.chunk_delay}s; idle 2 s: "
        f"{sum(idle.executed.values())} executed cmds, {idle.client.round_trips} round trips"
    )
    hdr = (f"{'row':<14}{'K':>5} | {'exec/turn':>10}{'client/turn':>12}{'RT/turn':>9}"
           f"{'KiB up/turn':>12} | {'exec/chunk':>11}{'client/chunk':>13}{'RT/chunk':>9}"
           f"{'B up/chunk':>11}")  # fmt: skip
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        e, c, rt, b = r.per_turn()
        print(f"{r.label:<14}{r.k:>5} | {e:>10.1f}{c:>12.1f}{rt:>9.1f}{b / 1024:>12.1f} | "
              f"{e / r.k:>11.2f}{c / r.k:>13.2f}{rt / r.k:>9.2f}{b / r.k:>11.0f}")  # fmt: skip

    print("\nRedis' own time per turn (INFO commandstats: EVALSHA + XREAD, in µs; INFO cpu: the "
          "process, network included, in ms, coarse for a few turns):")  # fmt: skip
    for r in rows:
        if r.label.startswith("server/"):
            print(f"  {r.label:<14}K={r.k:<4} {r.m.script_usec / r.turns:>8.1f} µs in commands"
                  f"   {r.m.cpu_s / r.turns * 1000:>6.2f} ms CPU")  # fmt: skip

    if args.json:
        server_rows = [
            dict(zip(("exec", "client", "round_trips", "bytes_up"), r.per_turn(), strict=True))
            | {"row": r.label, "chunks": r.k}
            for r in rows
            if r.label.startswith("server/")
        ]
        Path(args.json).write_text(json.dumps(server_rows))

    # marginal cost of one more chunk: the slope between the smallest and largest K
    if len(args.chunks) >= 2:
        k0, k1 = min(args.chunks), max(args.chunks)
        print(f"\nmarginal cost per chunk (slope K={k0} -> K={k1}) and ratio naive/server:")
        for mode in args.modes:

            def slope(label: str, mode: str = mode) -> tuple[float, ...]:
                a = next(r for r in rows if r.label == f"{label}/{mode}" and r.k == k0)
                b = next(r for r in rows if r.label == f"{label}/{mode}" and r.k == k1)
                return tuple(
                    (y - x) / (k1 - k0) for x, y in zip(a.per_turn(), b.per_turn(), strict=True)
                )

            s, n = slope("server"), slope("naive")
            print(f"  {mode:<7} server: exec {s[0]:.2f}  client {s[1]:.2f}  RT {s[2]:.2f}  "
                  f"bytes {s[3]:.0f}   naive: exec {n[0]:.2f}  client {n[1]:.2f}  RT {n[2]:.2f}  "
                  f"bytes {n[3]:.0f}   ratio: exec {n[0] / s[0]:.2f}x  RT {n[2] / s[2]:.2f}x  "
                  f"bytes {n[3] / s[3]:.1f}x")  # fmt: skip
        print("\nper-turn ratio naive/server (bytes up, round trips):")
        for k in args.chunks:
            for mode in args.modes:
                s = next(r for r in rows if r.label == f"server/{mode}" and r.k == k).per_turn()
                n = next(r for r in rows if r.label == f"naive/{mode}" and r.k == k).per_turn()
                print(f"  K={k:<4} {mode:<7} exec {n[0] / s[0]:.2f}x  client {n[1] / s[1]:.2f}x  "
                      f"RT {n[2] / s[2]:.2f}x  bytes {n[3] / s[3]:.1f}x")  # fmt: skip
    if args.breakdown:
        for r in rows:
            print(f"\n{r.label} K={r.k}: executed {dict(sorted(r.m.executed.items()))}")
            print(
                f"{'':>{len(r.label) + 4}}   client   {dict(sorted(r.m.client.commands.items()))}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
