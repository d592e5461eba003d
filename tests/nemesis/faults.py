"""The nemesis proper: one fault at a time, at random (seeded), every 3 to 6 s (`gap_s`: the
suite's short run is quicker), each healed before the next:

* `kill`      kill -9 of a replica, started again 1-3 s later;
* `pause`     SIGSTOP of a replica past its lease (LEASE_TTL_S + 1.5 s), then SIGCONT;
* `cut`       a replica's proxy to Redis black-holed, short (1.5 s: under the heartbeat) or past
              the lease, then healed by dropping the held connections or by letting the held
              writes through late (how a stale turn's writes land after others took it over);
* `redis`     kill -9 of Redis, restarted 1-3 s later from its AOF;
* `database`  (on PostgreSQL, in place of `redis`) kill -9 of the server and its backends,
              restarted 1-3 s later (crash recovery from its WAL);
* `failover`  (on a cluster) a replica of a master promoted (CLUSTER FAILOVER).

Runs in a thread of its own (every step is a blocking call on processes and proxies).
"""

from __future__ import annotations

import random
import sys
import threading
import time

from tests.nemesis.history import FaultRecord, History
from tests.nemesis.system import System

SINGLE_FAULTS = ("kill", "pause", "cut", "redis")
CLUSTER_FAULTS = ("kill", "pause", "failover")
POSTGRES_FAULTS = ("kill", "pause", "cut", "database")


class Nemesis(threading.Thread):
    def __init__(
        self, system: System, history: History, seed: int, *, faults: tuple[str, ...] | None = None,
        gap_s: tuple[float, float] = (3.0, 6.0),
    ) -> None:  # fmt: skip
        super().__init__(daemon=True, name="nemesis")
        self.system = system
        self.history = history
        self.rng = random.Random(seed * 7919 + 1)
        self.faults = faults or (
            CLUSTER_FAULTS
            if system.cluster_mode
            else POSTGRES_FAULTS
            if system.database == "postgres"
            else SINGLE_FAULTS
        )
        self.gap_s = gap_s
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)

    def run(self) -> None:
        try:
            bag: list[str] = []
            while not self.stopping.wait(self.rng.uniform(*self.gap_s)):
                if not bag:  # every kind once, in a seeded order, then again: a short run
                    bag = self.rng.sample(self.faults, len(self.faults))  # still meets each
                self.one_fault(bag.pop())
        except BaseException as exc:  # reported by the run: the nemesis itself broke
            self.failure = exc

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # a fault always heals, even when the run is stopping

    def one_fault(self, kind: str) -> None:
        system = self.system
        replica = self.rng.choice(system.replicas)
        record = FaultRecord(kind, replica.url, time.monotonic())
        self.history.faults.append(record)
        lease = system.lease_ttl_s
        if kind == "kill":
            system.kill9(replica)
            self._sleep(self.rng.uniform(1, 3))
            system.restart(replica)
        elif kind == "pause":
            system.pause(replica)
            self._sleep(lease + 1.5)
            system.resume(replica)
        elif kind == "cut":
            assert replica.proxy is not None
            long = self.rng.random() < 0.6
            late = self.rng.random() < 0.5
            record.detail = (
                f"{'past the lease' if long else 'short'}, healed {'late' if late else 'dropped'}"
            )
            replica.proxy.cut()
            self._sleep(lease + 1.0 if long else 1.5)
            replica.proxy.heal(resume=late)
        elif kind == "redis":
            record.target = "redis"
            system.kill_redis()
            self._sleep(self.rng.uniform(1, 3))
            system.start_redis()
        elif kind == "database":
            record.target = "postgres"
            system.kill_database()
            self._sleep(self.rng.uniform(1, 3))
            system.start_database()
        elif kind == "failover":
            key = f"{system.prefix}:x{{{self.rng.randrange(1 << 30)}}}"
            old, new = system.failover(key)
            record.target, record.detail = "cluster", f"master {old} -> {new}"
        record.ended = time.monotonic()
        print(  # the run's progress, on stderr (a test captures it)
            f"nemesis: {kind} {record.target} {record.detail} healed after"
            f" {record.ended - record.started:.1f}s ({len(self.history.turns)} turns so far)",
            file=sys.stderr,
            flush=True,
        )
