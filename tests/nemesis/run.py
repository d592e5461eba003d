"""One nemesis run: start the system, play the workload under the faults for a while, heal, let
the clients finish their turns, read what Redis (or PostgreSQL) holds, check the whole history,
report.

Used by bench/nemesis.py (long runs, flags) and tests/e2e_chaos/test_nemesis.py (a short run).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.nemesis.a2a_wire import TERMINAL
from tests.nemesis.checker import check
from tests.nemesis.faults import Nemesis
from tests.nemesis.history import (
    FinalState,
    History,
    read_final_state,
    read_postgres_final_state,
)
from tests.nemesis.system import System
from tests.nemesis.tool import read_runs
from tests.nemesis.workload import WorkloadConfig, run_workload


@dataclass
class RunConfig:
    seed: int = 1
    seconds: float = 60.0
    replicas: int = 3
    cluster: bool = False
    appendfsync: str = "always"
    lease_ttl_s: float = 6.0
    sessions: int = 6
    faults: tuple[str, ...] | None = None
    fault_gap_s: tuple[float, float] = (3.0, 6.0)  # the quiet time before each fault
    env: dict[str, str] = field(default_factory=dict)
    database: str = "redis"  # or "postgres": a private PostgreSQL instead of Redis


@dataclass
class RunResult:
    violations: list[str]
    report: str
    history: History


def nemesis_run(config: RunConfig, workdir: Path) -> RunResult:
    history = History()
    workload = WorkloadConfig(sessions=config.sessions, lease_ttl_s=config.lease_ttl_s)
    began = time.monotonic()
    with System(
        workdir, replicas=config.replicas, cluster=config.cluster, appendfsync=config.appendfsync,
        lease_ttl_s=config.lease_ttl_s, env=config.env, database=config.database,
    ) as system:  # fmt: skip
        nemesis = Nemesis(
            system, history, config.seed, faults=config.faults, gap_s=config.fault_gap_s
        )
        deadline = time.monotonic() + config.seconds
        nemesis.start()
        try:
            asyncio.run(_play(system, history, config, workload, deadline, nemesis))
        finally:
            nemesis.stop()
        readiness = system.readiness(timeout=120)
        # Turns the clients gave up on may still be taken over: give the sweep up to two leases,
        # read again as soon as every stored task has ended (what the sleep waited for).
        settle_by = time.monotonic() + 2 * config.lease_ttl_s
        final = _read_final(system, history, readiness)
        while time.monotonic() < settle_by and not _all_ended(final):
            time.sleep(0.25)
            final = _read_final(system, history, readiness)
        (workdir / "history.json").write_text(json.dumps(history.dump(), default=str))
        (workdir / "model-calls.json").write_text(json.dumps(final.model_calls))
        violations = check(history, final)
        if nemesis.failure is not None:
            violations.append(f"the nemesis itself failed: {nemesis.failure!r}")
    tracebacks = system.tracebacks()
    report = render_report(config, history, final, violations, tracebacks, time.monotonic() - began)
    (workdir / "report.txt").write_text(report)
    return RunResult(violations, report, history)


def _read_final(system: System, history: History, readiness: dict[str, str]) -> FinalState:
    """What the store holds now, with what the model and the tool recorded so far."""
    contexts = sorted({t.context_id for t in history.turns})
    records = (read_runs(str(system.tool_log)), system.model.calls(), readiness, system.urls)
    if system.postgres is not None:
        return read_postgres_final_state(system.postgres.url, contexts, *records)
    client = system.redis_client()
    try:
        return read_final_state(client, system.prefix, contexts, *records)
    finally:
        client.close()


def _all_ended(final: FinalState) -> bool:
    return all(task.state in TERMINAL for task in final.tasks.values())


async def _play(system: System, history: History, config: RunConfig, workload: WorkloadConfig,
                deadline: float, nemesis: Nemesis) -> None:  # fmt: skip
    clients = asyncio.create_task(
        run_workload(system.urls, history, config.seed, workload, deadline)
    )
    await asyncio.wait([clients], timeout=max(0.0, deadline - time.monotonic()))
    nemesis.stopping.set()  # no new fault; the current one heals
    await asyncio.to_thread(nemesis.join, 120)
    await clients


def _store(config: RunConfig) -> str:
    if config.database == "postgres":
        return "postgres fsync=on synchronous_commit=on"
    return "cluster" if config.cluster else "redis appendfsync=" + config.appendfsync


def render_report(config: RunConfig, history: History, final, violations: list[str],
                  tracebacks: list[str], elapsed: float) -> str:  # fmt: skip
    turns = history.turns
    states = Counter(t.final_state for t in turns)
    faults = Counter(f.kind for f in history.faults)
    expected = Counter(e.detail.split(" ")[0] + " " + (e.detail.split(" ")[1] if " " in e.detail else "")
                       for e in history.errors if e.expected)  # fmt: skip
    streams = [s for s in history.streams if s.events]
    resumed = sum(1 for s in streams if s.after is not None)
    joined = sum(1 for s in streams if s.joined)
    tool_runs = sum(1 for r in final.tool_runs if r["event"] == "start")
    lines = [
        f"nemesis seed={config.seed} length={config.seconds:.0f}s replicas={config.replicas}"
        f" store={_store(config)}"
        f" lease={config.lease_ttl_s}s ran {elapsed:.0f}s",
        f"faults: {len(history.faults)} ({', '.join(f'{k} {n}' for k, n in sorted(faults.items()))})",
        f"turns: {len(turns)} ({', '.join(f'{k} {n}' for k, n in sorted(Counter(t.kind for t in turns).items()))});"
        f" attempts {sum(len(t.keys) for t in turns)}; cancels asked {sum(t.canceled for t in turns)}",
        "ended: "
        + ", ".join(
            f"{str(k).removeprefix('TASK_STATE_')} {n}" for k, n in sorted(states.items(), key=str)
        ),
        f"tasks stored: {len(final.tasks)}, acknowledged to clients: {len(history.acknowledged)}",
        f"streams read: {len(streams)} ({resumed} resumed with Last-Event-ID, {joined} joined mid-turn),"
        f" events {sum(len(s.events) for s in streams)}",
        f"tool runs: {tool_runs}; model calls: {len(final.model_calls)}",
        f"errors clients were told to expect: {sum(expected.values())}"
        f" ({', '.join(f'{k.strip()} {n}' for k, n in expected.most_common(6))})",
        f"-32004 refusals: {len(history.busy)} ({sum(not b.readable for b in history.busy)} naming a task not readable then)",
        f"replica tracebacks logged: {len(tracebacks)}",
    ]
    if violations:
        lines.append(f"VIOLATIONS: {len(violations)}")
        lines += [f"  - {v}" for v in violations[:60]]
        if len(violations) > 60:
            lines.append(f"  ... and {len(violations) - 60} more")
    else:
        lines.append("no violation: every guarantee held")
    return "\n".join(lines)
