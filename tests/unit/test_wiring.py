"""From the environment to behaviour: settings names, the app's wiring, the card, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.runtime import runner as runner_module
from agent.runtime.turn_gate import TurnGate
from app import cli
from app.main import create_app
from app.settings import Settings

from .scripted_llm import ScriptedLLM, text

ROOT = Path(__file__).resolve().parents[2]


def send(text_: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text_}]}},
    }


async def test_environment_reaches_the_agent_and_the_card(
    monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM
) -> None:
    for name, value in {
        "A2A_PUBLIC_URL": "https://agents.example.com/helper/",
        "AGENT_NAME": "Helper",
        "AGENT_DESCRIPTION": "Helps.",
        "AGENT_SYSTEM_PROMPT": "Be brief.",
        "AGENT_ASK_USER_TOOL": "false",
        "AGENT_FINISH_TOOL": "false",
        "LLM_MODEL": "openai/not-called",  # a real model is named; the scripted one answers
    }.items():
        monkeypatch.setenv(name, value)
    llm.script(text("hi there"))
    app = create_app(Settings(), llm=llm)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        card_response = await client.get("/.well-known/agent-card.json")
        card = card_response.json()
        assert card["name"] == "Helper" and card["description"] == "Helps."
        assert [i["url"] for i in card["supportedInterfaces"]] == [
            "https://agents.example.com/helper"
        ] * 4
        assert card["url"] == "https://agents.example.com/helper"
        etag = card_response.headers["etag"]
        assert "max-age" in card_response.headers["cache-control"]
        assert card_response.headers["last-modified"]
        cached = await client.get("/.well-known/agent-card.json", headers={"if-none-match": etag})
        assert cached.status_code == 304

        reply = (await client.post("/", json=send("hello"))).json()
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    (request,) = llm.requests
    assert request.messages[0] == {"role": "system", "content": "Be brief."}
    offered = {tool["function"]["name"] for tool in request.tools}
    assert not offered & {"ask_user", "finish"}, offered


def test_the_turn_slice_reaches_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    slices: list[float] = []

    class RecordedGate(TurnGate):
        def __init__(self, slice_s: float) -> None:
            super().__init__(slice_s)
            slices.append(slice_s)

    monkeypatch.setattr(runner_module, "TurnGate", RecordedGate)
    create_app(Settings())
    monkeypatch.setenv("A2A_TURN_SLICE_MS", "0")
    create_app(Settings())
    assert slices == [0.002, 0]  # the default, then the setting


def test_command_line_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[tuple[str, int]] = []

    def serve(app: object, settings: Settings) -> int:
        served.append((settings.a2a_host, settings.a2a_port))
        return 0

    monkeypatch.setattr(cli, "serve", serve)
    monkeypatch.setenv("A2A_HOST", "127.0.0.2")
    monkeypatch.setenv("A2A_PORT", "9001")
    assert cli.main([]) == 0
    assert cli.main(["--host", "127.0.0.3", "--port", "9002"]) == 0
    assert served == [("127.0.0.2", 9001), ("127.0.0.3", 9002)]


async def test_the_served_openapi_document_is_the_one_in_the_repository() -> None:
    app = create_app(Settings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        served = await client.get("/openapi.json")
    assert served.status_code == 200
    committed = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    assert served.json() == committed
    assert {"/", "/message:send", "/tasks"} <= set(served.json()["paths"])


def test_a_server_without_a_grpc_port_does_not_load_grpc() -> None:
    """grpc and the SDK's generated messages cost a quarter of a second and tens of MiB at
    start: only a server that serves gRPC (A2A_GRPC_PORT) imports them."""
    probe = (
        "import sys; from app.main import create_app; from app.settings import Settings;"
        " create_app(Settings());"
        " print(sorted({m.split('.')[0] for m in sys.modules} & {'grpc', 'a2a', 'grpc_health'}))"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "A2A_GRPC_PORT": ""}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
