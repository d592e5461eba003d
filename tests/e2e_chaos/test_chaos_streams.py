"""Streams on Redis: hundreds open at once below A2A_MAX_STREAMS all work; beyond it, clean refusals.

Two replicas, each limited to LIMIT_STREAMS open streams. The fake model holds every turn at its
gate, so no stream can end by itself while the test counts:

1. per replica, LIMIT_STREAMS - 10 streams: SendStreamingMessage (JSON-RPC and REST) and
   SubscribeToTask (JSON-RPC and REST) on two running tasks, one started on each replica. Every
   one of them must open with the task as its first event (none refused, none failing with
   "store unavailable" because readers took the connections);
2. per replica, 20 more subscribes: at most 10 can fit, the others must get the clean overload
   refusal (JSON-RPC -32603 OVERLOADED with RetryInfo / REST 503 with Retry-After);
3. the gate opens: every stream that was accepted ends with the task completed and the whole
   answer; afterwards each replica takes new streams again (the slots were given back).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e_chaos.client import (
    OVERLOADED,
    TASK,
    Outcome,
    answer_of,
    http_client,
    send,
    summarize,
)
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.streams import rest_stream_send, rest_subscribe, rpc_stream_send, rpc_subscribe
from tests.e2e_chaos.targets import LIMIT_STREAMS, LIMIT_TURNS, Target, gather_within, wait_async

pytestmark = [pytest.mark.redis, pytest.mark.timeout(170)]

PHASE1 = LIMIT_STREAMS - 10  # per replica
SENDS = 30  # of PHASE1, the streams that start a turn (below LIMIT_TURNS with the base task)
PHASE2 = 20  # per replica; only 10 fit
assert SENDS + 1 < LIMIT_TURNS


async def test_streams_below_the_limit_all_work_and_beyond_it_are_refused_cleanly(
    redis_target: Target, gated_llm: GatedLLM, marker: str
) -> None:
    target = redis_target
    target.mark_logs()
    urls = target.urls
    decided: dict[str, Outcome] = {}

    def note(out: Outcome) -> None:
        decided[out.label] = out

    async with http_client(timeout=120) as http:
        with gated_llm.gate(marker) as gate:
            base = [
                await send(
                    http, url, f"{marker} base{n}", binding="rpc", label=f"base{n}", immediate=True
                )
                for n, url in enumerate(urls)
            ]
            assert all(b.kind == TASK for b in base), [str(b) for b in base]
            base_ids = [b.task_id for b in base]

            def stream(n: int, url: str, k: int, phase: str) -> asyncio.Future[Outcome]:
                label = f"{phase}-{n}-{k}"
                task_id = base_ids[k % len(base_ids)]
                if phase == "p1" and k < SENDS:
                    send = rpc_stream_send if k % 3 else rest_stream_send
                    coro = send(http, url, f"{marker} {label}", label=label, on_first=note)
                elif k % 3:
                    coro = rpc_subscribe(http, url, task_id, label=label, on_first=note)
                else:
                    coro = rest_subscribe(http, url, task_id, label=label, on_first=note)
                return asyncio.ensure_future(coro)

            p1 = [stream(n, url, k, "p1") for n, url in enumerate(urls) for k in range(PHASE1)]
            await wait_async(lambda: len(decided) >= len(p1), 60)
            p1_kinds = {label: o.kind for label, o in decided.items()}
            p2 = [stream(n, url, k, "p2") for n, url in enumerate(urls) for k in range(PHASE2)]
            await wait_async(lambda: len(decided) >= len(p1) + len(p2), 30)
            p2_kinds = {lb: o.kind for lb, o in decided.items() if lb.startswith("p2")}
            gate.open()
            outcomes = await gather_within(p1 + p2, 90, "the streams")

        after = [
            await rpc_stream_send(http, url, f"after {marker}", label=f"after{n}")
            for n, url in enumerate(urls)
        ]

    first = [o for o in outcomes if o.label.startswith("p1")]
    second = [o for o in outcomes if o.label.startswith("p2")]
    print("phase 1:", summarize(first), "\nphase 2:", summarize(second))
    assert len(p1_kinds) == len(first) and set(p1_kinds.values()) == {TASK}, (
        f"{PHASE1} streams per replica (limit {LIMIT_STREAMS}) did not all open:\n"
        + summarize(first)
    )
    assert not [o for o in second if o.kind not in (TASK, OVERLOADED)], summarize(second)
    for n in range(len(urls)):
        mine = [k for lb, k in p2_kinds.items() if lb.startswith(f"p2-{n}-")]
        fits = LIMIT_STREAMS - PHASE1
        assert mine.count(TASK) <= fits, (
            f"replica {n}: {PHASE1} + {mine.count(TASK)} streams open at once, limit "
            f"{LIMIT_STREAMS}:\n{summarize(second)}"
        )
        assert mine.count(OVERLOADED) >= PHASE2 - fits, (
            f"replica {n}: {mine.count(OVERLOADED)} of {PHASE2} streams beyond the limit refused"
        )

    accepted = [o for o in outcomes if o.kind == TASK]
    problems = [f"{o.label}: {o.stream_problem}" for o in accepted if o.stream_problem]
    assert not problems, f"accepted streams that did not end cleanly: {problems[:10]}"
    for o in accepted:
        k = int(o.label.rsplit("-", 1)[1])
        if o.label.startswith("p1") and k < SENDS:
            want = f"echo: {marker} {o.label}"
        else:
            want = f"echo: {marker} base{k % len(base_ids)}"
        assert o.last_state == "TASK_STATE_COMPLETED" and answer_of(o) == want, (
            f"{o.label}: ended {o.last_state} with {answer_of(o)!r}, want {want!r}"
        )
    assert all(a.kind == TASK and not a.stream_problem for a in after), (
        f"new streams after the burst: {[str(a) for a in after]}"
    )
    assert target.view is not None
    stuck = target.view.stuck(base_ids + [o.task_id for o in accepted if o.task_id])
    assert not stuck, stuck
    tracebacks = target.new_tracebacks()
    assert not tracebacks, "tracebacks in the servers' stderr:\n" + "\n".join(tracebacks[:3])
