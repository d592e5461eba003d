"""What bench/side_by_side.py prints: the table of medians with the ratios, then the bars (the
issues' goals) with every run's own ratio.

A ratio is `ours / theirs` taken within each run (figures seconds apart), the median over the
runs, not the ratio of the medians. Each reference is compared with the stores of ours it stands
beside: the in-memory ones (the Python, JS and Go SDKs' servers) with ours in memory and on
Redis, the Python SDK's DatabaseTaskStore with ours on PostgreSQL.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

Runs = list[dict[str, float]]

NAMES = {
    "memory": "ours (memory)",
    "redis": "ours (redis)",
    "postgres": "ours (postgres)",
    "sqlite": "ours (sqlite)",
    "reference": "Python SDK",
    "reference (database)": "Python SDK (DatabaseTaskStore)",
    "reference (js)": "JS SDK",
    "reference (go)": "Go SDK (2 cores)",
    "reference (go, 1 core)": "Go SDK (1 core)",
}
# The label of each reference in the ratios' names ("memory / JS SDK").
LABELS = {
    "reference": "Python SDK",
    "reference (database)": "SDK database",
    "reference (js)": "JS SDK",
    "reference (go)": "Go SDK 2 cores",
    "reference (go, 1 core)": "Go SDK 1 core",
}
COMPARED_WITH = {"reference (database)": ("postgres",)}
IN_MEMORY_COMPARED_WITH = ("memory", "redis")


@dataclass(frozen=True)
class Bar:
    ratio: str
    metric: str
    at_least: float
    issue: int


_SENDS_AND_STREAMS = ("SendMessage c=16 req/s", "stream c=16 events/s", "stream c=32 events/s")
BARS = [
    # Issue 51's bar is PostgreSQL's (Redis has issue 53's; SQLite none: measured beside).
    *(Bar("postgres / memory", metric, 0.35, 51) for metric in _SENDS_AND_STREAMS),
    *(Bar("postgres / SDK database", metric, 10.0, 51) for metric in _SENDS_AND_STREAMS),
    *(Bar("redis / memory", metric, 0.6, 53)
      for metric in ("SendMessage c=16 req/s", "SendMessage c=64 req/s", "stream c=32 events/s")),
    Bar("memory / Python SDK", "GetTask c=16 req/s", 2.5, 53),
    Bar("memory / Go SDK 1 core", "GetTask c=16 req/s", 1.0, 53),
    Bar("memory / JS SDK", "SendMessage c=16 req/s", 5.0, 53),
    Bar("memory / JS SDK", "SendMessage c=64 req/s", 5.0, 53),
    Bar("memory / JS SDK", "stream c=32 events/s", 3.0, 53),
]  # fmt: skip


def median_of(runs: Runs) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs if name in run) for name in runs[0]}


def each_run(ours: Runs, theirs: Runs, metric: str) -> list[float]:
    return [m[metric] / t[metric] for m, t in zip(ours, theirs, strict=True)
            if t.get(metric) and metric in m]  # fmt: skip


def paired_ratios(ours: Runs, theirs: Runs) -> dict[str, float]:
    """Each metric's ratio ours / theirs within each run, the median over the runs."""
    return {metric: statistics.median(each)
            for metric in ours[0] if (each := each_run(ours, theirs, metric))}  # fmt: skip


def pairs(names: list[str], ours: set[str]) -> dict[str, tuple[str, str]]:
    """Every ratio to print, by its name: (ours, theirs). Each store of ours beside memory, then
    each reference beside the stores of ours it is compared with."""
    found = {f"{name} / memory": (name, "memory") for name in names
             if name in ours and name != "memory" and "memory" in names}  # fmt: skip
    for reference in (name for name in names if name not in ours):
        for mine in COMPARED_WITH.get(reference, IN_MEMORY_COMPARED_WITH):
            if mine in names:
                found[f"{mine} / {LABELS[reference]}"] = (mine, reference)
    return found


def print_table(result: dict[str, dict[str, float]], ratios: dict[str, dict[str, float]]) -> None:
    """Medians of the runs, then each ratio (the median of each run's ratio)."""
    servers = [name for name in result if name not in ("bare ASGI", "redis costs")]
    print(f"| metric | {' | '.join(NAMES[n] for n in servers)} | {' | '.join(ratios)} |")
    print(f"|---|{'---|' * (len(servers) + len(ratios))}")
    metrics = list(dict.fromkeys(m for n in servers for m in result[n]))
    for metric in metrics:
        cells = [fmt(result[n].get(metric)) for n in servers]
        cells += [f"{r[metric]:.2f}" if metric in r else "" for r in ratios.values()]
        print(f"| {metric} | {' | '.join(cells)} |")
    blank = " | " * (len(servers) + len(ratios) - 1)
    for metric, value in result.get("bare ASGI", {}).items():
        print(f"| {metric} (bare ASGI) | {fmt(value)}{blank}|")
    for metric, value in result.get("redis costs", {}).items():
        print(f"| {metric} (redis) | {fmt(value)}{blank}|")


def print_bars(runs: dict[str, Runs], compared: dict[str, tuple[str, str]]) -> None:
    """The bars of issues 51 and 53 this run measured: each run's own ratio, then the median."""
    print()
    print("| issue | ratio | metric | bar | per run | median | met |")
    print("|---|---|---|---|---|---|---|")
    for bar in BARS:
        if bar.ratio not in compared:
            continue
        mine, theirs = compared[bar.ratio]
        each = each_run(runs[mine], runs[theirs], bar.metric)
        if not each:
            continue
        median = statistics.median(each)
        shown = ", ".join(f"{r:.2f}" for r in each)
        met = "yes" if median >= bar.at_least else "**no**"
        print(f"| {bar.issue} | {bar.ratio} | {bar.metric} | {bar.at_least:g}x | {shown} "
              f"| {median:.2f} | {met} |")  # fmt: skip


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
