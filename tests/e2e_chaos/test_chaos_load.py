"""Load on both stores: a burst of 240 requests, 3-6 times the turn limit, over both bindings.

Every request of the burst (blocking and returnImmediately SendMessage, SendStreamingMessage, over
JSON-RPC and REST) carries a context of its own. The fake model holds every turn at its gate until
each request is either refused or has its turn waiting at the model, so the number of turns
running at once is known exactly: at most A2A_MAX_RUNNING_TURNS per replica, and the rest of the
burst must have been refused. Then the gate opens and every accepted task must finish.

Counted, not timed:
* every answer is a task or the clean overload refusal (no 5xx, no "store unavailable", no other
  -32603, no plain-text body, no dropped connection, no stream cut short);
* some requests were refused, and no more turns ran at once than the limit allows;
* every accepted task completes with its own answer ("echo: <its text>"), as the client saw it
  and as GetTask shows it; none is left SUBMITTED/WORKING without a live lease (Redis);
* refused requests left nothing behind: the tasks of the burst are exactly the accepted ones,
  and a refused context has no claim or conversation in Redis;
* no traceback in the servers' stderr.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.e2e_chaos.client import (
    OVERLOADED,
    TASK,
    Outcome,
    answer_of,
    http_client,
    send,
    summarize,
    task_answer,
)
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.streams import rest_stream_send, rpc_stream_send
from tests.e2e_chaos.targets import (
    LIMIT_TURNS,
    Target,
    gather_within,
    rpc,
    tasks_by_id,
    wait_async,
    wait_settled,
)
from tests.fakes.fake_llm import last_user_text

pytestmark = [pytest.mark.timeout(170)]

TOTAL = 6 * LIMIT_TURNS  # 240 requests, spread over the replicas
KINDS = ("rpc-send", "rpc-send-immediate", "rpc-stream", "rest-send", "rest-stream")


async def fire(http: httpx.AsyncClient, kind: str, base: str, text: str, ctx: str, label: str):
    match kind:
        case "rpc-send":
            return await send(http, base, text, binding="rpc", label=label, context_id=ctx)
        case "rpc-send-immediate":
            return await send(
                http, base, text, binding="rpc", label=label, context_id=ctx, immediate=True
            )
        case "rpc-stream":
            return await rpc_stream_send(http, base, text, label=label, context_id=ctx)
        case "rest-send":
            return await send(http, base, text, binding="rest", label=label, context_id=ctx)
        case "rest-stream":
            return await rest_stream_send(http, base, text, label=label, context_id=ctx)
    raise AssertionError(kind)


async def test_a_burst_over_the_limit_is_refused_cleanly_and_every_accepted_task_completes(
    target: Target, gated_llm: GatedLLM, marker: str
) -> None:
    target.mark_logs()
    urls = target.urls
    total = TOTAL
    batch = f"ctx-{marker}-"
    texts = {i: f"{marker} n{i}" for i in range(total)}
    not_accepted = 0

    async def one(http: httpx.AsyncClient, i: int) -> Outcome:
        nonlocal not_accepted
        kind = KINDS[i % len(KINDS)]
        out = await fire(
            http, kind, urls[i % len(urls)], texts[i], f"{batch}{i}", f"{kind}#{i}@{i % len(urls)}"
        )
        if out.kind != TASK:
            not_accepted += 1
        return out

    async with http_client() as http:
        with gated_llm.gate(marker) as gate:
            tasks = [asyncio.ensure_future(one(http, i)) for i in range(total)]
            # Each request is refused (it returns) or its turn waits at the model (recorded).
            resolved = await wait_async(
                lambda: not_accepted + gated_llm.waiting(marker) >= total, 45
            )
            held = [last_user_text(r.body) for r in gated_llm.records_for(marker)]
            gate.open()
            outcomes = await gather_within(tasks, 90, "the burst")

    summary = summarize(outcomes)
    print(summary)
    problems = []
    if [o for o in outcomes if o.kind not in (TASK, OVERLOADED) or o.stream_problem]:
        problems.append(f"answers other than a task or the clean overload refusal:\n{summary}")
    refused = [o for o in outcomes if o.kind == OVERLOADED]
    accepted = {o.task_id: (i, o) for i, o in enumerate(outcomes) if o.kind == TASK}
    if not refused:
        problems.append(f"{total} requests against a limit of {LIMIT_TURNS} turns: none refused")
    if not resolved:
        problems.append(
            f"the burst never resolved: {not_accepted} answered without a task,"
            f" {len(held)} turns at the model, of {total}"
        )
    # Request i went to replica i % len(urls): count the turns each replica ran at once.
    at_once = [0] * len(urls)
    for text in held:
        at_once[int(text.rsplit(" n", 1)[1]) % len(urls)] += 1
    if any(count > LIMIT_TURNS for count in at_once):
        problems.append(f"turns running at once per replica {at_once}, limit {LIMIT_TURNS}")
    if len(held) != len(accepted):
        problems.append(
            f"{len(accepted)} accepted but {len(held)} reached the model while it was held:"
            " turns were queued instead of refused"
        )

    with httpx.Client(trust_env=False, timeout=30) as sync:
        in_batch = lambda t: str(t.get("contextId", "")).startswith(batch)  # noqa: E731
        seen = wait_settled(sync, urls[0], set(accepted), in_batch, timeout=60)
        if target.view is not None:
            stuck = target.view.stuck(list(seen))
            if stuck:
                problems.append(f"tasks left active without a live lease: {stuck[:10]}")
        if set(seen) != set(accepted):
            problems.append(
                f"tasks of the burst in ListTasks != accepted: {len(seen)} listed, "
                f"{len(accepted)} accepted; listed but not accepted: "
                f"{sorted(set(seen) - set(accepted))[:5]}; accepted but not listed: "
                f"{sorted(set(accepted) - set(seen))[:5]}"
            )
        not_done = [
            (t, s["status"]["state"])
            for t, s in seen.items()
            if s["status"]["state"] != "TASK_STATE_COMPLETED"
        ]
        if not_done:
            problems.append(f"accepted tasks that did not complete: {not_done[:10]}")

        wrong = []
        for task_id, (i, out) in accepted.items():
            want = f"echo: {texts[i]}"
            if out.events or out.task["status"]["state"] == "TASK_STATE_COMPLETED":
                got = answer_of(out)
            else:  # returnImmediately: read the finished task
                body = rpc(sync, urls[1 % len(urls)], "GetTask", {"id": task_id})
                got = task_answer(body.get("result") or {})
            if got != want:
                wrong.append(f"{out.label}: {got!r} != {want!r}")
        if wrong:
            problems.append(f"answers not the task's own: {wrong[:10]}")

        if target.view is not None:
            leftovers = []
            for i, o in enumerate(outcomes):
                if o.kind == OVERLOADED:
                    leftovers += target.view.context_leftovers(f"{batch}{i}")
            if leftovers:
                problems.append(f"refused requests left keys behind: {leftovers[:10]}")
        if tasks_by_id(sync, urls[-1], in_batch).keys() != set(accepted):
            problems.append("another replica lists other tasks of the burst")

    tracebacks = target.new_tracebacks()
    if tracebacks:
        problems.append("tracebacks in the servers' stderr:\n" + "\n".join(tracebacks[:3]))
    assert not problems, "\n".join(problems)
