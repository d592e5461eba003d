"""A turn's server CPU through the real LiteLLM adapter and the fake OpenAI model, two trees side
by side (issue 49: "a turn's server CPU with the OpenAI fake has not grown by more than 5%").

    git worktree add --detach /tmp/base <commit before the change>
    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/llm_turn_cpu.py --before /tmp/base

Two `a2a-server` processes, one from each tree (this one's code and `--before`'s, both on this
venv), each on its defaults with `LLM_MODEL` a model LiteLLM prices (`openai/gpt-4o-mini`, so the
new cost is computed on every call) and `LLM_API_BASE` the fake from tests/fakes/fake_llm.py
(one answer of --chunks chunks, no tool), in memory. In each round each server is sent --turns
blocking SendMessages (--concurrency at a time), in an order that rotates from round to round;
its CPU time (utime + stime from /proc) around them, divided by the turns, is that round's CPU
per turn. Prints each server's median and the median of the rounds' own ratios (this machine's
speed drifts over minutes: ratios taken seconds apart are what to read).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fakes.fake_llm import FakeLLMServer, text  # noqa: E402


def server(tree: Path, llm_url: str) -> AbstractContextManager[tuple[str, int]]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("A2A_", "LLM_", "AGENT_", "REDIS_", "AGENTS_"))
    }
    env |= {
        "PYTHONPATH": str(tree),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LLM_MODEL": "openai/gpt-4o-mini",
        "LLM_API_BASE": llm_url,
        "LLM_API_KEY": "sk-bench",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return loadgen.served([sys.executable, "-m", "app", "--port", "{port}"], env=env, cwd=tree)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="the tree before the change")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree after (this one)")
    parser.add_argument("--turns", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=20)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    per_turn: dict[str, list[float]] = {name: [] for name in trees}
    with FakeLLMServer() as llm, ExitStack() as stack:
        llm.script(text([f"tok{n:03d} " for n in range(args.chunks)], times=None))
        servers = {
            name: stack.enter_context(server(tree, llm.base_url)) for name, tree in trees.items()
        }
        for url, _ in servers.values():  # warm up: litellm imported, first calls made
            asyncio.run(loadgen.calls(url, method="SendMessage", count=48, concurrency=8))
        names = list(trees)
        for round_ in range(args.rounds):
            order = names[round_ % 2 :] + names[: round_ % 2]
            for name in order:
                url, pid = servers[name]
                began = loadgen.cpu_seconds(pid)
                asyncio.run(
                    loadgen.calls(
                        url, method="SendMessage", count=args.turns, concurrency=args.concurrency
                    )
                )
                per_turn[name].append((loadgen.cpu_seconds(pid) - began) / args.turns * 1e3)
            print(
                f"round {round_ + 1}: "
                + "  ".join(f"{name} {per_turn[name][-1]:.3f} ms" for name in names),
                flush=True,
            )
            llm.reset()
            llm.script(text([f"tok{n:03d} " for n in range(args.chunks)], times=None))
    ratios = [a / b for a, b in zip(per_turn["after"], per_turn["before"], strict=True)]
    print(
        f"server CPU per turn (median of {args.rounds} rounds of {args.turns} turns,"
        f" c={args.concurrency}, {args.chunks} chunks):"
    )
    for name in names:
        print(f"  {name:6s} {statistics.median(per_turn[name]):.3f} ms")
    print(
        f"  after/before: median {statistics.median(ratios):.3f}"
        f" (rounds {min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
