"""`a2a`: a command-line client for any A2A agent (ours or another; either generation, binding).

    a2a agents URL                    the agents the server hosts (name, description, card URL)
    a2a card URL                      the agent card, and whether its signature verifies
    a2a send URL TEXT [--context C] [--task T]   send, stream the answer
    a2a chat URL [--context C]        talk: streamed answers, questions and approvals prompted,
                                      Ctrl-C cancels the running task
    a2a tasks URL [--context C]       list tasks (1.0 agents)
    a2a get URL ID | cancel URL ID
    a2a subscribe URL ID [--last-event-id N]   follow a task (resume after N)

URL is an agent's base URL (`URL/{name}` for one of a server's agents) or its card's URL.
`--binding jsonrpc|rest|grpc` picks the card's interface of that binding (default: the card's
first interface the CLI speaks, 1.0 before 0.3); `--extension URI` (repeatable) asks for an A2A
extension in every request (`A2A-Extensions`; gRPC: metadata).
`--json` prints the raw events (or results) one JSON document per line. Credentials: `--api-key` (or
A2A_API_KEY) as `X-API-Key`, `--bearer TOKEN` as `Authorization: Bearer`. A failure is one line on
stderr and a non-zero exit: 1 an error, 2 usage, 3 the task waits for input (`send`), 130 canceled.
Built on `app.client.a2a_client`, the wire code the server's remote-agent tools use."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from app.client.a2a_client import (
    END_STATES,
    INTERRUPTED_STATES,
    A2AClient,
    A2AClientError,
    Event,
    Unauthorized,
    card_url_of,
    fetch_card,
    parts_of,
    state_of,
    status_text,
    text_of,
)
from app.client.agent_directory import list_agents
from app.client.card_signatures import verify_card
from app.client.endpoints import BINDINGS
from app.client.generations import generation_of
from app.client.printer import Printer, Turn, describe_parts

EXIT_ERROR, EXIT_USAGE, EXIT_INPUT, EXIT_CANCELED = 1, 2, 3, 130


async def run_stream(events: AsyncGenerator[Event, None], printer: Printer, turn: Turn) -> Turn:
    async with contextlib.aclosing(events):
        return await _read(events, printer, turn)


async def _read(events: AsyncIterator[Event], printer: Printer, turn: Turn) -> Turn:
    async for event in events:
        printer.event(event, turn)
        turn.last_event_id = event.id or turn.last_event_id
        payload = event.payload
        turn.task_id = payload.get("taskId") or payload.get("id") or turn.task_id
        turn.context_id = payload.get("contextId") or turn.context_id
        if event.kind == "message":
            turn.state = "message"
            break
        turn.state = state_of(payload) or turn.state
        if turn.state in INTERRUPTED_STATES:
            status = (payload.get("status") or {}).get("message") or {}
            turn.question = text_of(status) or describe_parts(parts_of(status))
            break
        if turn.state in END_STATES:
            if turn.state != "TASK_STATE_COMPLETED":
                turn.question = status_text(payload)
            break
    if not printer.raw:
        printer.end_line()
    return turn


def headers_of(args: argparse.Namespace) -> dict[str, str]:
    headers = {}
    api_key = args.api_key or os.environ.get("A2A_API_KEY")
    if api_key:
        headers["X-API-Key"] = api_key
    if args.bearer:
        headers["Authorization"] = f"Bearer {args.bearer}"
    return headers


async def connect(args: argparse.Namespace, http: httpx.AsyncClient) -> A2AClient:
    """The agent through the interface `--binding` names (else the card's first the CLI
    speaks), with `--extension`s; closed when the command ends (`_with_http`)."""
    agent = await A2AClient.connect(
        http,
        args.url,
        headers=headers_of(args),
        binding=BINDINGS[args.binding] if args.binding else None,
        card_order=True,
        extensions=args.extension or (),
    )
    args.exit_stack.push_async_callback(agent.aclose)
    return agent


def emit(result: Any, args: argparse.Namespace) -> None:
    print(json.dumps(result, indent=None if args.json else 2))


async def stream_turn(
    agent: A2AClient, text: str, *, turn: Turn, printer: Printer, data: Any = None
) -> Turn:
    """Send `text` on the turn's task/context and stream it; Ctrl-C cancels the task."""
    message = agent.message(text, task_id=turn.task_id, context_id=turn.context_id, data=data)
    fresh = Turn(task_id=turn.task_id, context_id=turn.context_id)
    try:
        return await run_stream(agent.stream(message), printer, fresh)
    except asyncio.CancelledError:
        if fresh.task_id is not None and fresh.state not in END_STATES:
            try:
                await agent.cancel(fresh.task_id)
            except A2AClientError:
                pass
        printer.note(f"canceled task {fresh.task_id}")
        raise


def answer_of(question: str, line: str) -> str:
    """What to send for a line typed at a question: y/n for an approval."""
    if '"approve" or "deny"' in question and line.strip().lower() in ("y", "yes", "n", "no"):
        return "approve" if line.strip().lower().startswith("y") else "deny"
    return line


async def cmd_card(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    """The card on stdout; on stderr, what its signatures came to (1 if they do not verify)."""
    card = await fetch_card(http, args.url, headers=headers_of(args))
    emit(card, args)
    verdict = await verify_card(http, card, card_url=card_url_of(args.url))
    print(verdict, file=sys.stderr)
    return EXIT_ERROR if verdict.status == "invalid" else 0


async def cmd_agents(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    """One line per agent: name, card URL, description (`--json`: one document per agent)."""
    directory = await list_agents(http, args.url, headers=headers_of(args))
    if not directory.listed:
        print(f"{args.url} serves one agent (it has no /agents list)", file=sys.stderr)
    width = max(len(agent.name) for agent in directory.agents) if directory.agents else 0
    for agent in directory.agents:
        if args.json:
            emit(agent.as_json(), args)
        else:
            print(f"{agent.name:<{width}}  {agent.url}  {agent.description}".rstrip())
    return 0


async def cmd_send(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    agent = await connect(args, http)
    printer = Printer(raw=args.json)
    turn = await stream_turn(
        agent, args.text, turn=Turn(task_id=args.task, context_id=args.context), printer=printer
    )
    return ended(turn, printer, args)


def ended(turn: Turn, printer: Printer, args: argparse.Namespace) -> int:
    if turn.state in ("TASK_STATE_COMPLETED", "message"):
        return 0
    if turn.state in INTERRUPTED_STATES:
        printer.note(f"? {turn.question}")
        printer.note(
            f"the task waits for input: a2a send {args.url} ANSWER --task {turn.task_id}"
            f" --context {turn.context_id}"
        )
        return EXIT_INPUT
    if turn.state in END_STATES:
        printer.note(f"the task ended {turn.state}: {turn.question or '(no reason given)'}")
        return EXIT_CANCELED if turn.state == "TASK_STATE_CANCELED" else EXIT_ERROR
    resume = f" --last-event-id {turn.last_event_id}" if turn.last_event_id else ""
    printer.note(
        f"error: the stream ended before the task did; resume with:"
        f" a2a subscribe {args.url} {turn.task_id}{resume}"
    )
    return EXIT_ERROR


async def cmd_subscribe(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    agent = await connect(args, http)
    printer = Printer(raw=args.json)
    turn = Turn(task_id=args.id)
    turn = await run_stream(
        agent.subscribe(args.id, last_event_id=args.last_event_id), printer, turn
    )
    return ended(turn, printer, args)


async def cmd_tasks(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    agent = await connect(args, http)
    tasks = await agent.list_tasks(context_id=args.context)
    if args.json:
        for task in tasks:
            emit(task, args)
        return 0
    for task in tasks:
        first: dict[str, Any] = next(iter(task.get("history") or []), {})
        print(f"{task['id']}  {state_of(task) or '?':<28} {text_of(first)[:60]}")
    return 0


async def cmd_get(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    """The task; with --wait, once it ends or waits for input: long-polled from generation to
    generation where the agent speaks 1.1, else read again every second."""
    agent = await connect(args, http)
    task = await agent.get_task(args.id)
    while args.wait and state_of(task) not in END_STATES | INTERRUPTED_STATES:
        generation = generation_of(task)
        if generation is None:
            await asyncio.sleep(1.0)
        task = await agent.get_task(args.id, current_generation=generation)
    emit(task, args)
    return 0


async def cmd_cancel(args: argparse.Namespace, http: httpx.AsyncClient) -> int:
    task = await (await connect(args, http)).cancel(args.id)
    if args.json:
        emit(task, args)
    else:
        print(f"{args.id} {state_of(task.get('task', task)) or 'canceled'}")
    return 0


def chat(args: argparse.Namespace) -> int:
    """The interactive loop: one event loop per turn, so Ctrl-C cancels just that turn."""
    turn = Turn(context_id=args.context)
    printer = Printer(raw=args.json)
    agent_name = asyncio.run(_with_http(args, _agent_name))
    print(f"chatting with {agent_name} (Ctrl-C cancels a turn, Ctrl-D leaves)", file=sys.stderr)
    prompt = "> "
    while True:
        try:
            line = input(prompt)
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if not line.strip():
            continue
        text = answer_of(turn.question, line) if prompt != "> " else line
        task = turn.task_id if prompt != "> " else None
        this = Turn(task_id=task, context_id=turn.context_id)
        try:
            turn = asyncio.run(_with_http(args, _chat_turn(text, this, printer)))
        except KeyboardInterrupt:
            prompt = "> "
            continue
        except A2AClientError as exc:
            print(f"error: {exc}", file=sys.stderr)
            prompt = "> "
            continue
        if turn.state in INTERRUPTED_STATES:
            printer.note(f"? {turn.question}")
            prompt = "answer> "
        else:
            if turn.state in END_STATES and turn.state != "TASK_STATE_COMPLETED":
                printer.note(f"the task ended {turn.state}: {turn.question or '(no reason)'}")
            prompt = "> "
            turn.question = ""


async def _agent_name(http: httpx.AsyncClient, args: argparse.Namespace) -> str:
    agent = await connect(args, http)
    return str(agent.card.get("name", args.url))


def _chat_turn(text: str, turn: Turn, printer: Printer) -> Any:
    async def work(http: httpx.AsyncClient, args: argparse.Namespace) -> Turn:
        agent = await connect(args, http)
        return await stream_turn(agent, text, turn=turn, printer=printer)

    return work


async def _with_http(args: argparse.Namespace, work: Any) -> Any:
    """`work(http, args)` with an HTTP client (no proxy from the environment); the agents it
    connects to are closed after it (a gRPC channel)."""
    async with (
        httpx.AsyncClient(trust_env=False, timeout=args.timeout) as http,
        contextlib.AsyncExitStack() as args.exit_stack,
    ):
        return await work(http, args)


COMMANDS = {
    "agents": cmd_agents,
    "card": cmd_card,
    "send": cmd_send,
    "subscribe": cmd_subscribe,
    "tasks": cmd_tasks,
    "get": cmd_get,
    "cancel": cmd_cancel,
}


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("url", help="the agent's base URL (URL/{name}: one of a server's agents)")
    common.add_argument("--json", action="store_true", help="raw events, one JSON per line")
    common.add_argument("--api-key", help="sent as X-API-Key (default: $A2A_API_KEY)")
    common.add_argument("--bearer", help="sent as Authorization: Bearer TOKEN")
    common.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    common.add_argument(
        "--binding",
        choices=list(BINDINGS),
        help="the card's interface to use (default: its first one the CLI speaks)",
    )
    common.add_argument(
        "--extension",
        action="append",
        metavar="URI",
        help="ask for this A2A extension in every request (A2A-Extensions); repeatable",
    )
    root = argparse.ArgumentParser(prog="a2a", description="A client for any A2A agent.")
    sub = root.add_subparsers(dest="command", required=True)
    sub.add_parser("agents", parents=[common], help="list the agents a server hosts")
    sub.add_parser("card", parents=[common], help="print the agent card")
    send = sub.add_parser("send", parents=[common], help="send a message, stream the answer")
    send.add_argument("text")
    send.add_argument("--context", help="continue this context (conversation)")
    send.add_argument("--task", help="answer this task (one waiting for input)")
    chat_ = sub.add_parser("chat", parents=[common], help="talk to the agent")
    chat_.add_argument("--context", help="continue this context (conversation)")
    tasks = sub.add_parser("tasks", parents=[common], help="list tasks")
    tasks.add_argument("--context", help="only this context's")
    get = sub.add_parser("get", parents=[common], help="print a task")
    get.add_argument("id")
    get.add_argument(
        "--wait", action="store_true", help="once it ends or waits for input (long poll in 1.1)"
    )
    sub.add_parser("cancel", parents=[common], help="cancel a task").add_argument("id")
    subscribe = sub.add_parser("subscribe", parents=[common], help="follow a task's events")
    subscribe.add_argument("id")
    subscribe.add_argument("--last-event-id", help="resume after this event id")
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "chat":
            return chat(args)
        command = COMMANDS[args.command]
        return int(asyncio.run(_with_http(args, lambda http, args: command(args, http))))
    except KeyboardInterrupt:
        return EXIT_CANCELED
    except BrokenPipeError:  # `a2a ... --json | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Unauthorized as exc:
        print(f"error: {exc}: pass --api-key (or A2A_API_KEY) or --bearer", file=sys.stderr)
    except A2AClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except httpx.HTTPError as exc:
        print(f"error: {type(exc).__name__}: {exc or 'the connection failed'}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
