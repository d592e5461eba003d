"""`a2a --binding jsonrpc|rest|grpc` and `--extension URI`, as installed, against one real server
that serves gRPC and requires an A2A extension: every command on each binding, a refusal without
the extension, and a card that offers gRPC only (no flag needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.e2e.extension_plugins import SEEN_KEY
from tests.e2e.harness import free_port
from tests.e2e.test_cli_client import a2a
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(180)

REQUIRED_URI = "https://ext.example/cli/required/v1"
OPTIONAL_URI = "https://ext.example/cli/optional/v1"
GRPC_PORT = free_port()
SERVER_ENV = {
    "A2A_GRPC_PORT": str(GRPC_PORT),
    "A2A_EXTENSIONS": json.dumps([{"uri": REQUIRED_URI, "required": True}, {"uri": OPTIONAL_URI}]),
    "AGENT_HOOKS": "tests.e2e.extension_plugins:ExtensionsSeen",
}
BINDINGS = ["jsonrpc", "rest", "grpc"]
WITH_IT = ("--extension", REQUIRED_URI)


def last_status(lines: str) -> dict[str, Any]:
    events = [json.loads(line) for line in lines.splitlines()]
    return [e["statusUpdate"] for e in events if "statusUpdate" in e][-1]


@pytest.mark.parametrize("binding", BINDINGS)
def test_every_command_on_each_binding(server, fake_llm, marker, binding):
    on = ("--binding", binding, *WITH_IT)
    fake_llm.script(
        text(["On ", binding, "."], when_user_contains=f"plain {marker}"),
        tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=f"ask {marker}"),
        text("Chatted.", when_user_contains=f"chat {marker}"),
    )
    sent = a2a("send", server.url, f"plain {marker}", *on)
    assert (sent.returncode, sent.stdout) == (0, f"On {binding}.\n"), sent.stderr
    raw = a2a("send", server.url, f"plain {marker}", *on, "--json")
    assert raw.returncode == 0, raw.stderr
    events = raw.stdout.splitlines()
    task_id = json.loads(events[0])["task"]["id"]
    assert last_status(raw.stdout)["status"]["state"] == "TASK_STATE_COMPLETED"

    got = a2a("get", server.url, task_id, *on, "--json")
    assert got.returncode == 0, got.stderr
    assert (json.loads(got.stdout)["id"], json.loads(got.stdout)["status"]["state"]) == (
        task_id,
        "TASK_STATE_COMPLETED",
    )
    listed = a2a("tasks", server.url, *on)
    assert listed.returncode == 0, listed.stderr
    assert f"{task_id}  TASK_STATE_COMPLETED" in listed.stdout
    # Resumed after its second event: the rest, as the stream sent them (their ids are the
    # journal's positions on every binding, gRPC's from its metadata).
    resumed = a2a("subscribe", server.url, task_id, "--last-event-id", "2", "--json", *on)
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(line) for line in resumed.stdout.splitlines()] == [
        json.loads(line) for line in events[2:]
    ]

    asked = a2a("send", server.url, f"ask {marker}", *on)
    assert asked.returncode == 3, asked.stderr
    command = asked.stderr.strip().splitlines()[-1].split()
    waiting = command[command.index("--task") + 1]
    canceled = a2a("cancel", server.url, waiting, *on)
    assert (canceled.returncode, canceled.stdout) == (0, f"{waiting} TASK_STATE_CANCELED\n"), (
        canceled.stderr
    )

    chatted = subprocess.run(
        [a2a_path(), "chat", server.url, *on],
        input=f"chat {marker}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chatted.returncode == 0, chatted.stderr
    assert "Chatted." in chatted.stdout, chatted.stdout + chatted.stderr


def a2a_path() -> str:
    from tests.e2e.test_cli_client import A2A

    return A2A


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_required_extension_refuses_without_the_flag(server, binding):
    for command in (("send", "hi"), ("tasks",), ("get", "t-1")):
        refused = a2a(command[0], server.url, *command[1:], "--binding", binding)
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert REQUIRED_URI in refused.stderr
        code = (
            "FAILED_PRECONDITION"
            if binding == "grpc"
            else "(400)"
            if binding == "rest"
            else "(-32008)"
        )
        assert code in refused.stderr, refused.stderr


@pytest.mark.parametrize("binding", BINDINGS)
def test_extensions_asked_for_are_the_ones_activated(server, fake_llm, marker, binding):
    fake_llm.script(text("Seen.", when_user_contains=marker))
    done = a2a(
        "send",
        server.url,
        marker,
        "--binding",
        binding,
        *WITH_IT,
        "--extension",
        OPTIONAL_URI,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    final = last_status(done.stdout)
    assert final["metadata"][SEEN_KEY] == sorted([REQUIRED_URI, OPTIONAL_URI])


@pytest.fixture(scope="module")
def grpc_only_card(server) -> Iterator[str]:
    """The server's card with its gRPC interface only, served from another address."""
    card = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10).json()
    card["supportedInterfaces"] = [
        entry for entry in card["supportedInterfaces"] if entry["protocolBinding"] == "GRPC"
    ]
    for v03_member in ("url", "preferredTransport", "additionalInterfaces"):  # 0.3's interfaces
        card.pop(v03_member, None)
    body = json.dumps(card).encode()

    class Card(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Card)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}/agent-card.json"
    finally:
        http.shutdown()
        http.server_close()


def test_a_grpc_only_card_works_without_the_flag(grpc_only_card, fake_llm, marker):
    fake_llm.script(text("Over gRPC.", when_user_contains=marker))
    done = a2a("send", grpc_only_card, marker, *WITH_IT)
    assert (done.returncode, done.stdout) == (0, "Over gRPC.\n"), done.stderr
    asked_http = a2a("send", grpc_only_card, marker, *WITH_IT, "--binding", "rest")
    assert asked_http.returncode == 1
    assert "offers no rest interface (it offers: GRPC 0.3, GRPC 1.0)" in asked_http.stderr, (
        asked_http.stderr
    )


def test_http_commands_do_not_import_grpc(server):
    """Startup time: grpc (and the SDK's messages) load only when a command talks gRPC."""
    probe = (
        "import sys\n"
        "from app.client.cli import main\n"
        f"code = main(['tasks', {server.url!r}, '--extension', {REQUIRED_URI!r}])\n"
        "loaded = sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.'))\n"
        "print(code, loaded[:3])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
