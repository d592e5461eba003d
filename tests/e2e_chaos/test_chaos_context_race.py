"""The same-context race on both stores: a conversation runs at most one turn at a time.

Ten conversations, four at a time, each for two rounds (twenty rounds); in each round eight
sends (JSON-RPC and REST, spread over the replicas) race on the conversation's contextId. The
first round races on a new context (nobody has claimed it yet), the second on a context whose
previous turn has ended (the old claim is stale). The fake model holds the winning turn at its
gate until every send of the round has its answer, so a loser cannot be excused by the winner
having finished already. The sends of a round reach the servers together: each is written but
for its last byte, then all the last bytes at once.

Counted: per round exactly one send is accepted and the others get -32004 (REST 400,
UNSUPPORTED_OPERATION); per conversation, ListTasks(contextId) shows exactly one task per round
with the winner's message; the model saw the conversation as user, assistant, user (never two
user messages in a row); on Redis, the stored conversation list is user, assistant, user,
assistant with the winners' texts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, send_params
from tests.e2e_chaos.client import (
    BUSY,
    TASK,
    Outcome,
    http_client,
    judge_rest_response,
    judge_rpc_response,
    rpc_payload,
    simultaneous,
    summarize,
)
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.targets import LIMIT_TURNS, SETTLED_STATES, Target, list_all_tasks
from tests.fakes.fake_llm import last_user_text, message_text

pytestmark = [pytest.mark.timeout(150)]

CONVERSATIONS = 10
ROUNDS = 2
SENDS = 8
# Conversations racing at once: their sends (and the winners' turns) stay below the turn limit
# of a single server, so no send is refused for overload instead of being judged on the race.
AT_ONCE = 4
assert AT_ONCE * (SENDS + 1) < LIMIT_TURNS


async def settled(http: httpx.AsyncClient, base: str, task_id: str) -> dict[str, Any]:
    """GetTask until the task is terminal or waiting for input (TimeoutError after 30 s)."""
    async with asyncio.timeout(30):
        while True:
            r = await http.post(
                base + "/",
                headers=A2A_HEADERS,
                json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
            )
            body = r.json()
            assert "result" in body, f"GetTask {task_id}: {body}"
            if body["result"]["status"]["state"] in SETTLED_STATES:
                return body["result"]
            await asyncio.sleep(0.1)


async def race_rounds(
    http: httpx.AsyncClient, target: Target, llm: GatedLLM, name: str
) -> list[list[Outcome]]:
    """ROUNDS rounds of SENDS simultaneous sends on one context; each round's outcomes."""
    urls, ctx = target.urls, f"ctx-{name}"
    rounds = []
    for r in range(ROUNDS):
        mark = f"{name}-r{r}"
        posts, rest = [], []
        for j in range(SENDS):
            text = f"{mark} s{j}"  # also the label (and JSON-RPC id) of its outcome
            params = send_params(text, context_id=ctx, configuration={"returnImmediately": True})
            base = urls[j % len(urls)]
            rest.append(j % 3 == 2)
            if rest[-1]:
                posts.append((base + "/message:send", params))
            else:
                posts.append((base + "/", rpc_payload("SendMessage", params, text)))
        with llm.gate(mark):
            answers = await simultaneous(posts)
        outcomes = []
        for (_, body), is_rest, answer in zip(posts, rest, answers, strict=True):
            label = body["message"]["parts"][0]["text"] if is_rest else body["id"]
            out = Outcome(label)
            if is_rest:
                outcomes.append(judge_rest_response(out, answer))
            else:
                outcomes.append(judge_rpc_response(out, answer, label))
        for o in outcomes:
            if o.kind == TASK:
                await settled(http, urls[0], o.task_id or "")
        rounds.append(outcomes)
    return rounds


def chat_roles_and_users(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    convo = [m for m in messages if m.get("role") != "system"]
    return [m["role"] for m in convo], [message_text(m) for m in convo if m["role"] == "user"]


async def test_a_conversation_runs_one_turn_at_a_time(
    target: Target, gated_llm: GatedLLM, marker: str
) -> None:
    target.mark_logs()
    names = [f"{marker}-c{c}" for c in range(CONVERSATIONS)]
    at_once = asyncio.Semaphore(AT_ONCE)

    async def conversation(http: httpx.AsyncClient, name: str) -> list[list[Outcome]]:
        async with at_once:
            return await race_rounds(http, target, gated_llm, name)

    async with http_client() as http:
        all_rounds = await asyncio.gather(*(conversation(http, n) for n in names))

    problems = []
    for name, rounds in zip(names, all_rounds, strict=True):
        winners = []
        for r, outcomes in enumerate(rounds):
            accepted = [o for o in outcomes if o.kind == TASK]
            others = [o for o in outcomes if o.kind not in (TASK, BUSY)]
            if len(accepted) != 1 or others:
                problems.append(
                    f"{name} round {r}: {len(accepted)} accepted, want 1; " + summarize(outcomes)
                )
            winners.extend(accepted)
        want_users = [o.label for o in winners]

        with httpx.Client(trust_env=False, timeout=30) as sync:
            listed = list_all_tasks(sync, target.urls[-1], context_id=f"ctx-{name}")
        if len(listed) != ROUNDS:
            problems.append(
                f"{name}: ListTasks(contextId) shows {len(listed)} tasks, want {ROUNDS}"
            )
        for task in listed:
            history = task.get("history") or []
            first = "".join(p.get("text", "") for p in (history[0]["parts"] if history else []))
            if first not in want_users or task["status"]["state"] != "TASK_STATE_COMPLETED":
                problems.append(
                    f"{name}: task {task['id']} {task['status']['state']} with the"
                    f" message {first!r}"
                )

        # The conversation as the model was given it, at the last turn of the context.
        last = [b for b in gated_llm.requests if f"{name}-r{ROUNDS - 1}" in last_user_text(b)]
        if not last:
            problems.append(f"{name}: the model never saw round {ROUNDS - 1}")
        else:
            roles, users = chat_roles_and_users(last[-1]["messages"])
            want_roles = ["user", "assistant"] * (ROUNDS - 1) + ["user"]
            if roles != want_roles or users != want_users[:ROUNDS]:
                problems.append(f"{name}: the model saw roles {roles} with user texts {users}")

        if target.view is not None:
            stored = target.view.conversation(f"ctx-{name}")
            roles = [m["role"] for m in stored]
            users = [m.get("content") or "" for m in stored if m["role"] == "user"]
            if roles != ["user", "assistant"] * ROUNDS or not all(
                w in u for w, u in zip(want_users, users, strict=True)
            ):
                problems.append(f"{name}: stored conversation {roles} users {users}")
    assert not problems, "\n".join(problems)
    tracebacks = target.new_tracebacks()
    assert not tracebacks, "tracebacks in the servers' stderr:\n" + "\n".join(tracebacks[:3])
