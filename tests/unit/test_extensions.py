"""A2A extensions below the wire: A2A_EXTENSIONS read and checked, the activation rule the
bindings share (gRPC's `Extensions.negotiate` too), a turn's extensions kept through a takeover,
and tool sources that declare one and read it on their calls."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from agent.context import TurnContext
from agent.extensions import AgentExtension
from agent.hooks import Hooks
from agent.runtime.supervisor import TurnSupervisor
from agent.tools.base import ToolProvider, ToolSpec
from app.call_context import CallContext, parse_extensions
from app.errors import ExtensionSupportRequiredError
from app.extensions import ExtensionDeclarationError, Extensions, echo_headers, echoed
from app.http.auth import Authenticator
from app.http.edge import Edge
from app.main import create_app
from app.settings import Settings

from .engine_helpers import Stores, make_loop, status_updates
from .scripted_llm import ScriptedLLM, blocked, call, text, tools

A, B, REQUIRED = "https://ext.example/a/v1", "https://ext.example/b/v1", "urn:ext:required"


# --- A2A_EXTENSIONS ------------------------------------------------------------------------------


def test_the_setting_takes_inline_json_and_json_or_yaml_files(tmp_path: Path) -> None:
    declared = [{"uri": A, "description": "a", "required": True, "params": {"k": [1]}}]
    inline = Settings(a2a_extensions=json.dumps(declared)).a2a_extensions  # type: ignore[arg-type]
    (tmp_path / "ext.json").write_text(json.dumps(declared))
    (tmp_path / "ext.yaml").write_text(
        f"- uri: {A}\n  description: a\n  required: true\n  params: {{k: [1]}}\n"
    )
    for source in (tmp_path / "ext.json", tmp_path / "ext.yaml"):
        assert Settings(a2a_extensions=str(source)).a2a_extensions == inline  # type: ignore[arg-type]
    assert inline == [AgentExtension(uri=A, description="a", required=True, params={"k": [1]})]
    assert inline[0].card_entry() == declared[0]
    assert Settings().a2a_extensions == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('[{"uri": "urn:a"', "is not valid JSON"),
        ('[{"description": "no uri"}]', "A2A_EXTENSIONS[0] needs a `uri`"),
        ('[{"uri": "urn:a, urn:b"}]', "needs a `uri`"),
        ('[{"uri": "urn:a", "require": true}]', "unknown members ['require']"),
        ('[{"uri": "urn:a", "required": "yes"}]', "`required` must be true or false"),
        ('[{"uri": "urn:a", "params": []}]', "`params` must be an object"),
        ('[{"uri": "urn:a"}, {"uri": "urn:a"}]', "'urn:a' is declared twice"),
        ("/no/such/extensions.yaml", "cannot read the extensions file"),
    ],
)
def test_a_bad_setting_is_refused_saying_why(value: str, says: str) -> None:
    with pytest.raises(ValidationError, match=r"a2a_extensions") as refused:
        Settings(a2a_extensions=value)  # type: ignore[arg-type]
    assert says in str(refused.value)


# --- activation ----------------------------------------------------------------------------------


def test_declared_ones_requested_are_activated_and_others_ignored() -> None:
    extensions = Extensions([AgentExtension(uri=A), AgentExtension(uri=B)])
    assert extensions.activate(frozenset({A, "urn:undeclared"})) == {A}
    assert extensions.activate(frozenset()) == frozenset()
    # a header (or gRPC metadata value) is a comma-separated list
    assert extensions.activate(parse_extensions(f" {A} ,, ,{B},urn:x")) == {A, B}


def test_a_required_one_not_requested_refuses_the_request() -> None:
    extensions = Extensions([AgentExtension(uri=REQUIRED, required=True), AgentExtension(uri=A)])
    with pytest.raises(ExtensionSupportRequiredError) as refused:
        extensions.activate(frozenset({A}))
    error = refused.value
    assert (error.code, error.reason, error.http_status) == (
        -32008,
        "EXTENSION_SUPPORT_REQUIRED",
        400,
    )
    assert error.metadata == {"extensions": REQUIRED}
    assert extensions.activate(parse_extensions(f"{REQUIRED},{A}")) == {REQUIRED, A}


def test_the_headers_are_read_under_both_names_and_echoed_as_the_client_spoke() -> None:
    extensions = Extensions([AgentExtension(uri=A), AgentExtension(uri=B)])
    headers = [("A2A-Extensions", f"{A}, urn:x"), ("x-a2a-extensions", B)]
    context = CallContext.from_request(httpx.Headers(headers), activate=extensions.activate)
    assert context.requested_extensions == {A, B, "urn:x"}
    assert context.activated_extensions == {A, B}
    both = ", ".join(sorted([A, B]))
    assert echo_headers(context) == {"A2A-Extensions": both, "X-A2A-Extensions": both}
    plain = CallContext.from_request({"A2A-Extensions": B}, activate=extensions.activate)
    assert echo_headers(plain) == {"A2A-Extensions": B}
    assert echo_headers(CallContext.from_request({}, activate=extensions.activate)) == {}


async def test_the_edge_activates_them_for_a_grpc_binding_from_its_metadata() -> None:
    required = Extensions([AgentExtension(uri=REQUIRED, required=True), AgentExtension(uri=A)])
    edge = Edge(Authenticator(), extensions=required)
    metadata = {"a2a-extensions": f"{REQUIRED}, urn:x", "x-a2a-extensions": A}
    context = await edge.context_of(metadata)
    assert context.activated_extensions == {REQUIRED, A}
    assert echoed(context.activated_extensions) == f"{A}, {REQUIRED}"
    with pytest.raises(ExtensionSupportRequiredError):
        await edge.context_of({"a2a-extensions": A})


def test_the_operator_declaration_wins_over_a_plugins_and_a_bad_one_is_refused() -> None:
    class Declaring(Hooks):
        def __init__(self, *declared: Any) -> None:
            self.declared = list(declared)

        def extensions(self) -> list[Any]:
            return self.declared

    configured = [AgentExtension(uri=A, required=True)]
    # Declarations may be ours, mappings, or another library's objects with the same members.
    another = SimpleNamespace(uri=REQUIRED, description="theirs", required=False, params=None)
    gathered = Extensions.gathered(
        configured,
        sources=[Declaring(AgentExtension(uri=A), {"uri": B}), object(), Declaring(another)],
    )
    assert [(ext.uri, ext.required) for ext in gathered.declared] == [
        (A, True),
        (B, False),
        (REQUIRED, False),
    ]
    assert gathered.declared[2].description == "theirs"
    as_attribute = SimpleNamespace(extensions=[{"uri": B, "required": True}])
    assert Extensions.gathered([], sources=[as_attribute]).declared == (
        AgentExtension(uri=B, required=True),
    )
    with pytest.raises(ExtensionDeclarationError, match=r"Declaring.extensions\(\)\[0\]"):
        Extensions.gathered([], sources=[Declaring({"description": "no uri"})])


# --- a turn keeps its extensions -----------------------------------------------------------------


class SeenExtensions(Hooks):
    def __init__(self) -> None:
        self.seen: list[frozenset[str]] = []

    async def on_turn_start(self, turn: TurnContext) -> None:
        self.seen.append(turn.extensions)

    async def after_llm_call(self, turn: TurnContext, response: Any) -> None:
        self.seen.append(turn.extensions)


async def test_a_turn_taken_over_from_its_checkpoint_keeps_its_extensions(llm: ScriptedLLM) -> None:
    stores = Stores()
    step = blocked()
    llm.script(tools(call("c1", "nothing", {}), chunks=["Looking."]), step)
    dead = stores.runner(make_loop(llm), holder="process-1")
    task = await stores.submit(dead, "go", extensions=frozenset({A}))
    await asyncio.wait_for(step.entered.wait(), 2)
    await dead.shutdown()  # the process dies mid-turn, after a checkpoint

    seen = SeenExtensions()
    runner = stores.runner(make_loop(ScriptedLLM(text("Done.")), hooks=[seen]), holder="p-2")
    supervisor = TurnSupervisor(
        runner, tasks=stores.tasks, checkpoints=stores.checkpoints, leases=stores.leases
    )
    try:
        await supervisor.recover_orphans()
        tail = await stores.journal_until_end(task.id)
    finally:
        await runner.shutdown()
    assert status_updates(tail)[-1].status.state.value == "TASK_STATE_COMPLETED"
    assert seen.seen == [frozenset({A})]


# --- tool sources --------------------------------------------------------------------------------


class Recorder(ToolProvider):
    """A tool source that implements extension B: declares it, and records what its calls see."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[frozenset[str]] = []

    def extensions(self) -> list[AgentExtension]:
        return [AgentExtension(uri=B, description="recorded")]

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return [ToolSpec(name="record", description="Record the call's extensions.")]

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        assert turn is not None
        self.seen.append(turn.extensions)
        return "recorded"


def send(text_: str, *, task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": f"m-{text_}",
        "role": "ROLE_USER",
        "parts": [{"text": text_}],
    }
    if task_id:
        message["taskId"] = task_id
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_a_tool_source_declares_its_extension_and_its_calls_see_the_active_ones(
    llm: ScriptedLLM,
) -> None:
    recorder = Recorder()
    settings = Settings(llm_model="openai/not-called", a2a_extensions=[{"uri": A}])  # type: ignore[list-item]
    app = create_app(settings, llm=llm, tool_providers=[recorder])
    llm.script(
        tools(call("c1", "record", {})),
        tools(call("c2", "ask_user", {"question": "More?"})),
        tools(call("c3", "record", {})),
        text("Done."),
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        card = (await client.get("/.well-known/agent-card.json")).json()
        first = await client.post("/", json=send("one"), headers={"A2A-Extensions": f"{A},{B}"})
        task = first.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        # The answer's request activates B only: the rest of the turn has B only.
        answer = await client.post(
            "/", json=send("two", task_id=task["id"]), headers={"A2A-Extensions": B}
        )
        assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert card["capabilities"]["extensions"] == [
        {"uri": A, "required": False},
        {"uri": B, "description": "recorded", "required": False},
    ]
    assert first.headers["A2A-Extensions"] == f"{A}, {B}"
    assert answer.headers["A2A-Extensions"] == B
    assert recorder.seen == [frozenset({A, B}), frozenset({B})]
