"""The official SDKs' servers of the side-by-side bench, and the check that they all stream the
same events as ours.

* Python: bench/reference_server.py (a2a-sdk), on this venv.
* JavaScript: bench/js_reference/server.mjs (@a2a-js/sdk on Express 5, pinned by its
  package-lock.json), installed on demand with `npm ci` into bench/js_reference/node_modules.
* Go: a server the developer builds with the a2a-go SDK (bench/README.md says what its executor
  must emit), given as a command (`{port}` in it is replaced by the port); run as it is (both
  cores) and under `taskset -c 0` (one core: the Go runtime sizes GOMAXPROCS from the affinity).

    .venv/bin/python bench/sdk_servers.py [--go-server-cmd '/path/to/server --port {port}']

starts ours and every reference it can and compares one streamed turn of each, event by event;
exit status 1 if any differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen

BENCH = Path(__file__).resolve().parent
JS_DIR = BENCH / "js_reference"


def js_command() -> list[str]:
    """The JavaScript SDK's server, its packages installed first if missing or out of date."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("the JS reference needs node (>= 20) and npm on PATH")
    installed = JS_DIR / "node_modules" / ".package-lock.json"
    lock = JS_DIR / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=JS_DIR, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return ["node", str(JS_DIR / "server.mjs")]


def go_commands(template: str) -> tuple[list[str], list[str]]:
    """(both cores, one core) commands of the Go server given as `template`."""
    command = shlex.split(template)
    if "{port}" not in template:
        command += ["--port", "{port}"]
    return command, ["taskset", "-c", "0", *command]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return ticks / os.sysconf("SC_CLK_TCK")


def streamed_events(url: str) -> list[tuple[object, ...]]:
    """One SendStreamingMessage to its end, each event reduced to what a client reads from it:
    its kind and state, or an artifact chunk's text, append, lastChunk, name, and whether its
    artifact is the first chunk's (ids are the servers' own: only their sameness is compared)."""
    body = loadgen.rpc_body("SendStreamingMessage", loadgen.send_params())
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json",
               "Accept": "text/event-stream"}  # fmt: skip
    events: list[tuple[object, ...]] = []
    first_artifact: str | None = None
    with httpx.stream("POST", url, content=body, headers=headers, timeout=30) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line[5:])["result"]
            if "task" in result:
                events.append(("task", result["task"]["status"]["state"]))
            elif "statusUpdate" in result:
                events.append(("status", result["statusUpdate"]["status"]["state"]))
            elif "artifactUpdate" in result:
                update = result["artifactUpdate"]
                artifact = update["artifact"]
                first_artifact = first_artifact or artifact["artifactId"]
                texts = [part.get("text") for part in artifact["parts"]]
                same = artifact["artifactId"] == first_artifact
                events.append(
                    (
                        "artifact",
                        texts,
                        bool(update.get("append")),
                        bool(update.get("lastChunk")),
                        artifact.get("name"),
                        same,
                    )
                )
            else:
                events.append(("other", sorted(result)))
    return events


def differences(servers: dict[str, list[tuple[object, ...]]], baseline: str) -> list[str]:
    """Each server whose events differ from `baseline`'s, with the first difference."""
    expected = servers[baseline]
    found = []
    for name, events in servers.items():
        if events != expected:
            at = next((i for i, (a, b) in enumerate(zip(events, expected, strict=False)) if a != b),
                      min(len(events), len(expected)))  # fmt: skip
            seen = events[at] if at < len(events) else "nothing"
            wanted = expected[at] if at < len(expected) else "nothing"
            found.append(f"{name}: {len(events)} events (not {len(expected)}), "
                         f"event {at}: {seen} where {baseline} sent {wanted}")  # fmt: skip
    return found


def main() -> None:
    import side_by_side

    parser = argparse.ArgumentParser()
    parser.add_argument("--go-server-cmd", help="the a2a-go server: '/path/server --port {port}'")
    args = parser.parse_args()
    scripted = {"SCRIPTED_CHUNKS": str(side_by_side.CHUNKS), "SCRIPTED_DELAY_MS": "0"}
    commands = {
        "ours": [str(side_by_side.BIN / "a2a-server")],
        "Python SDK": [sys.executable, str(BENCH / "reference_server.py")],
        "JS SDK": js_command(),
    }
    if args.go_server_cmd:
        commands["Go SDK"] = go_commands(args.go_server_cmd)[0]
    seen = {}
    for name, command in commands.items():
        with side_by_side.server(command, {**scripted, "LLM_MODEL": "scripted"}) as (url, _, _):
            seen[name] = streamed_events(url)
        print(f"{name}: {len(seen[name])} events: {seen[name][0]}, {seen[name][1]}, "
              f"{seen[name][2]} ... {seen[name][-2]}, {seen[name][-1]}")  # fmt: skip
    found = differences(seen, "Python SDK")
    print("\n".join(found) or f"the same {len(seen['ours'])} events from every server")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
