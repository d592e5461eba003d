"""What the fenced fast paths buy: our server with every private name it uses, against the same
server on the public path each one falls back to when the name is missing (a later Python,
uvicorn or redis-py).

The names are removed as the suite's tests/e2e/test_public_paths.py removes them (its
`sitecustomize.py` runs first in the server process): `asyncio` (its running-task hooks: no
first step inside the read), `uvicorn` (its request-task hook and its listening servers: uvicorn's
own request tasks, writes and accepts), `redis` (redis-py's parser internals: its public
`read_response`). Rounds are interleaved (fast, then each fallback, a few seconds apart), and the
medians of `--rounds` are printed with the ratio fallback / fast.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/fallback_paths.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import loadgen
import side_by_side as bench

ROOT = Path(__file__).resolve().parents[1]
WITHOUT = ROOT / "tests" / "e2e" / "without_private_names"
SCRIPTED = {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": str(bench.CHUNKS), "SCRIPTED_DELAY_MS": "0"}


def variant(removed: str) -> dict[str, str]:
    """The environment of a server started without the named private names ("": all there)."""
    if not removed:
        return {}
    return {"PYTHONPATH": f"{WITHOUT}:{ROOT}", "WITHOUT_PRIVATE_NAMES": removed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scenarios = bench.load_scenarios(args.seconds)
    picked = [scenarios[1], scenarios[2], scenarios[4]]  # SendMessage c=16, c=64; streams c=32
    figures: dict[str, list[dict[str, float]]] = {}
    with loadgen.private_redis() as redis_url:
        on_redis = {"REDIS_URL": redis_url, "LEASE_TTL_S": "600"}
        targets = {
            "memory, fast": {},
            "memory, without asyncio": variant("asyncio"),
            "memory, without asyncio+uvicorn": variant("asyncio,uvicorn"),
            "redis, fast": on_redis,
            "redis, without redis-py's parser": on_redis | variant("redis"),
        }
        for round_ in range(args.rounds):
            for name, env in targets.items():
                command = [str(bench.BIN / "a2a-server")]
                with bench.server(command, SCRIPTED | env) as (url, _, _):
                    measured: dict[str, float] = {}
                    for measure in picked:
                        measured |= measure(url)
                figures.setdefault(name, []).append(measured)
                print(f"round {round_ + 1} {name}: {json.dumps(measured)}", file=sys.stderr)
    medians = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in figures.items()
    }
    keys = [key for key in medians["memory, fast"] if "failures" not in key]
    print("| metric | " + " | ".join(medians) + " |")
    print("|---" * (len(medians) + 1) + "|")
    for key in keys:
        cells = []
        for name, values in medians.items():
            fast = medians["redis, fast" if name.startswith("redis") else "memory, fast"][key]
            ratio = f" ({values[key] / fast:.2f}x)" if fast and "fast" not in name else ""
            cells.append(f"{values[key]:,.1f}{ratio}")
        print(f"| {key} | " + " | ".join(cells) + " |")
    failures = {
        name: sum(value for key, value in values.items() if "failures" in key)
        for name, values in medians.items()
    }
    print(json.dumps({"medians": medians, "failures": failures}))


if __name__ == "__main__":
    main()
