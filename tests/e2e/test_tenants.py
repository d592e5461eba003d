"""Tenants end to end on a real server: every HTTP+JSON route under `/{tenant}/`, `params.tenant`
on every JSON-RPC method, a task made over one binding read over the other, isolation (what one
tenant made is not found under another or under none; one tenant's list; one conversation per
tenant for the same contextId), the card's tenant, 0.3 within it, the official SDK client
following the card, bad names, and (a second server) restricted tenants and per-tenant rate limits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest

from app.client.a2a_client import A2AClient
from stores.tenants import ROUTE_NAMES
from tests.e2e.harness import (
    A2A_HEADERS,
    TERMINAL_STATES,
    ServerProcess,
    SSEStream,
    check_error_object,
    kind_of,
    send_params,
    state_of,
    stream_results,
)
from tests.e2e.webhook import WebhookReceiver
from tests.e2e.wire import artifact_text, assert_valid
from tests.fakes.fake_llm import message_text, text

pytestmark = pytest.mark.timeout(90)

SKILL = {"id": "billing", "name": "Billing", "description": "Invoices.", "tags": ["x"]}
ALICE, BOB = "alice-key-0c6f2b9e41d7", "bob-key-7e1a4c0d93b2"
CARD_TENANT = "acme"
SERVER_ENV = {
    "A2A_API_KEYS": f"alice:{ALICE},bob:{BOB}",
    "A2A_TENANT": CARD_TENANT,
    "A2A_EXTENDED_CARD": json.dumps({"skills": [SKILL]}),
    "A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1",
    "A2A_PUSH_BACKOFF_S": "0.1",
}


class Caller:
    """One principal within one tenant (None: within none), on both bindings."""

    def __init__(self, http: httpx.Client, tenant: str | None, key: str = ALICE) -> None:
        self.http, self.tenant = http, tenant
        self.headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {key}"}

    def within(self, tenant: str | None, key: str = ALICE) -> Caller:
        return Caller(self.http, tenant, key)

    # ---- JSON-RPC: the tenant in params ----

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        params = {**(params or {}), **({"tenant": self.tenant} if self.tenant else {})}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = self.http.post("/", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        answer = self.rpc(method, params)
        assert "result" in answer, f"{method} within {self.tenant!r}: {answer}"
        return answer["result"]

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.rpc(method, params)
        assert "error" in answer, f"{method} within {self.tenant!r} succeeded: {answer}"
        check_error_object(answer["error"])
        return answer["error"]

    def rpc_stream(self, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        params = {**params, **({"tenant": self.tenant} if self.tenant else {})}
        body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
        with self.http.stream("POST", "/", json=body, headers=self.headers) as response:
            return stream_results(list(SSEStream(response, 9).sse_events()), 9)

    def send(self, message: str, **fields: Any) -> dict[str, Any]:
        return self.result("SendMessage", send_params(message, **fields))["task"]

    # ---- HTTP+JSON: the tenant in the path ----

    def path(self, path: str) -> str:
        return f"/{self.tenant}{path}" if self.tenant else path

    def rest(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, self.path(path), headers=self.headers, **kwargs)

    def rest_ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.rest(method, path, **kwargs)
        assert response.status_code == 200, f"{method} {self.path(path)}: {response.text}"
        return response.json()

    def rest_stream(self, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        with self.http.stream(method, self.path(path), headers=self.headers, **kwargs) as response:
            assert response.status_code == 200, response.read()
            events = list(SSEStream(response, None).sse_events())
        for event in events:
            assert_valid("stream_response", event.data)
        return [event.data for event in events]


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture
def tenant(marker) -> str:
    """A tenant of the test's own: its lists hold only the test's tasks."""
    return f"t-{marker[-8:]}"


@pytest.fixture
def caller(http, tenant) -> Caller:
    return Caller(http, tenant)


def not_found_everywhere_else(caller: Caller, task_id: str) -> None:
    """The task is not found under another tenant, under none, nor for another principal in
    its own tenant, on either binding."""
    for other in (
        caller.within("other"),
        caller.within(None),
        caller.within(caller.tenant, key=BOB),
    ):
        assert other.error("GetTask", {"id": task_id})["code"] == -32001
        assert other.rest("GET", f"/tasks/{task_id}").status_code == 404
        assert task_id not in [task["id"] for task in other.result("ListTasks")["tasks"]]


# ---- every HTTP+JSON route under /{tenant}/ -----------------------------------------------------


def test_send_get_and_list_under_the_tenants_path(caller, fake_llm, marker):
    fake_llm.script(text("Within the tenant.", when_user_contains=marker))
    task = caller.rest_ok("POST", "/message:send", json=send_params(f"hi {marker}"))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert artifact_text(task) == "Within the tenant."
    got = caller.rest_ok("GET", f"/tasks/{task['id']}", params={"historyLength": 1})
    assert (got["id"], len(got["history"])) == (task["id"], 1)
    listed = caller.rest_ok("GET", "/tasks", params={"contextId": task["contextId"]})
    assert [item["id"] for item in listed["tasks"]] == [task["id"]]
    not_found_everywhere_else(caller, task["id"])


def test_stream_subscribe_and_cancel_under_the_tenants_path(caller, fake_llm, marker):
    fake_llm.script(text("Streamed.", when_user_contains=f"{marker}-s"))
    events = caller.rest_stream("POST", "/message:stream", json=send_params(f"{marker}-s"))
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED", events
    streamed_id = events[0]["task"]["id"]
    assert caller.rest_ok("GET", f"/tasks/{streamed_id}")["status"]["state"] in TERMINAL_STATES

    fake_llm.script(text("never", delay=5.0, when_user_contains=f"{marker}-c"))
    body = send_params(f"{marker}-c", configuration={"returnImmediately": True})
    task_id = caller.rest_ok("POST", "/message:send", json=body)["task"]["id"]
    fake_llm.wait_for_requests(f"{marker}-c", 1, timeout=10)
    # Not cancelable, nor to be subscribed to, from anywhere else.
    for other in (caller.within("other"), caller.within(None)):
        assert other.rest("POST", f"/tasks/{task_id}:cancel", json={}).status_code == 404
        assert other.rest("GET", f"/tasks/{task_id}:subscribe").status_code == 404
    with caller.http.stream(
        "GET", caller.path(f"/tasks/{task_id}:subscribe"), headers=caller.headers
    ) as response:
        assert response.status_code == 200, response.read()
        stream = SSEStream(response, None).sse_events()
        assert kind_of(next(stream).data) == "task"
        canceled = caller.rest_ok("POST", f"/tasks/{task_id}:cancel", json={})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED", canceled
        last = [event.data for event in stream][-1]
    assert state_of(last) == "TASK_STATE_CANCELED", last
    # POST :subscribe is the same route (a terminal task: unsupported, but found).
    refused = caller.rest("POST", f"/tasks/{task_id}:subscribe")
    assert refused.status_code == 400, refused.text


def test_push_configs_and_the_extended_card_under_the_tenants_path(caller, fake_llm, marker):
    task = caller.rest_ok("POST", "/message:send", json=send_params(f"push {marker}"))["task"]
    configs = f"/tasks/{task['id']}/pushNotificationConfigs"
    config = {"url": "http://127.0.0.1:9/hook", "id": "cfg-1"}
    created = caller.rest_ok("POST", configs, json=config)
    assert (created["id"], created["taskId"]) == ("cfg-1", task["id"])
    assert caller.rest_ok("GET", f"{configs}/cfg-1")["url"] == config["url"]
    assert [item["id"] for item in caller.rest_ok("GET", configs)["configs"]] == ["cfg-1"]
    for other in (caller.within("other"), caller.within(None)):
        assert other.rest("GET", configs).status_code == 404
        assert other.rest("GET", f"{configs}/cfg-1").status_code == 404
        assert other.rest("POST", configs, json=config).status_code == 404
    assert caller.rest_ok("DELETE", f"{configs}/cfg-1") == {}
    assert caller.rest_ok("GET", configs)["configs"] == []

    card = caller.rest_ok("GET", "/extendedAgentCard")
    assert SKILL in card["skills"], card["skills"]


def test_a_webhook_registered_within_a_tenant_gets_the_tasks_events(caller, fake_llm, marker):
    receiver = WebhookReceiver().start()
    try:
        fake_llm.script(text("Pushed.", delay=1.0, when_user_contains=marker))
        body = send_params(f"push me {marker}", configuration={"returnImmediately": True})
        task_id = caller.rest_ok("POST", "/message:send", json=body)["task"]["id"]
        hook = {"url": receiver.url("/tenant-hook")}
        caller.rest_ok("POST", f"/tasks/{task_id}/pushNotificationConfigs", json=hook)
        received = receiver.wait_for(
            "/tenant-hook",
            lambda got: any(state_of(item.body) == "TASK_STATE_COMPLETED" for item in got),
        )
        for item in received:
            assert_valid("stream_response", item.body)
            (event,) = item.body.values()
            assert event.get("taskId", event.get("id")) == task_id, item.body
    finally:
        receiver.stop()


# ---- params.tenant on every JSON-RPC method -----------------------------------------------------


def test_every_jsonrpc_method_within_the_tenant(caller, fake_llm, marker):
    fake_llm.script(text("Over JSON-RPC.", when_user_contains=f"{marker}-1"))
    task = caller.send(f"{marker}-1")
    assert artifact_text(task) == "Over JSON-RPC."
    assert caller.result("GetTask", {"id": task["id"]})["id"] == task["id"]
    assert [t["id"] for t in caller.result("ListTasks")["tasks"]] == [task["id"]]
    not_found_everywhere_else(caller, task["id"])

    results = caller.rpc_stream("SendStreamingMessage", send_params(f"{marker}-2"))
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED"
    assert len(caller.result("ListTasks")["tasks"]) == 2

    fake_llm.script(text("never", delay=5.0, when_user_contains=f"{marker}-3"))
    slow = caller.send(f"{marker}-3", configuration={"returnImmediately": True})
    assert caller.within("other").error("CancelTask", {"id": slow["id"]})["code"] == -32001
    assert caller.within(None).error("SubscribeToTask", {"id": slow["id"]})["code"] == -32001
    canceled = caller.result("CancelTask", {"id": slow["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    refused = caller.error("SubscribeToTask", {"id": slow["id"]})  # found, but terminal
    assert refused["code"] == -32004, refused

    reference = {"taskId": task["id"], "id": "cfg-rpc"}
    config = {**reference, "url": "http://127.0.0.1:9/hook"}
    assert caller.result("CreateTaskPushNotificationConfig", config)["id"] == "cfg-rpc"
    assert caller.result("GetTaskPushNotificationConfig", reference)["url"] == config["url"]
    listed = caller.result("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert [item["id"] for item in listed["configs"]] == ["cfg-rpc"]
    for other in (caller.within("other"), caller.within(None)):
        assert other.error("GetTaskPushNotificationConfig", reference)["code"] == -32001
        assert other.error("CreateTaskPushNotificationConfig", config)["code"] == -32001
    caller.result("DeleteTaskPushNotificationConfig", reference)
    assert caller.result("ListTaskPushNotificationConfigs", {"taskId": task["id"]})["configs"] == []

    assert SKILL in caller.result("GetExtendedAgentCard")["skills"]


# ---- one tenant, two bindings --------------------------------------------------------------------


def test_a_task_made_over_one_binding_is_read_over_the_other(caller, fake_llm, marker):
    over_rpc = caller.send(f"over JSON-RPC {marker}")
    assert caller.rest_ok("GET", f"/tasks/{over_rpc['id']}")["id"] == over_rpc["id"]
    over_rest = caller.rest_ok("POST", "/message:send", json=send_params(f"over REST {marker}"))
    assert (
        caller.result("GetTask", {"id": over_rest["task"]["id"]})["id"] == over_rest["task"]["id"]
    )
    listed = {t["id"] for t in caller.rest_ok("GET", "/tasks")["tasks"]}
    assert listed == {over_rpc["id"], over_rest["task"]["id"]}
    assert {t["id"] for t in caller.result("ListTasks")["tasks"]} == listed

    # A conversation started over one binding goes on over the other, within the tenant.
    follow_up = caller.rest_ok(
        "POST",
        "/message:send",
        json=send_params(f"again {marker}", context_id=over_rpc["contextId"]),
    )["task"]
    assert follow_up["contextId"] == over_rpc["contextId"]
    (request,) = fake_llm.requests_for(f"again {marker}")
    seen = [message_text(message) for message in request["messages"]]
    assert f"over JSON-RPC {marker}" in seen, seen


# ---- isolation of conversations ------------------------------------------------------------------


def test_the_same_context_id_in_two_tenants_is_two_conversations(http, fake_llm, marker):
    acme_like, beta_like = Caller(http, f"a-{marker[-8:]}"), Caller(http, f"b-{marker[-8:]}")
    context_id = f"ctx-{marker}"
    first_a = acme_like.send(f"{marker}-a1", context_id=context_id)
    first_b = beta_like.send(f"{marker}-b1", context_id=context_id)
    assert first_a["contextId"] == first_b["contextId"] == context_id
    acme_like.send(f"{marker}-a2", context_id=context_id)

    def seen(step: str) -> list[str]:
        (request,) = fake_llm.requests_for(f"{marker}-{step}")
        return [message_text(m) for m in request["messages"] if m["role"] != "system"]

    assert seen("b1") == [f"{marker}-b1"], "tenant b saw tenant a's conversation"
    assert seen("a2") == [f"{marker}-a1", f"echo: {marker}-a1", f"{marker}-a2"]
    # A task of one tenant cannot be continued from another.
    refused = beta_like.error("SendMessage", send_params("x", task_id=first_a["id"]))
    assert refused["code"] == -32001, refused


def test_a_busy_context_in_one_tenant_is_free_in_another(http, fake_llm, marker):
    busy, free = Caller(http, f"a-{marker[-8:]}"), Caller(http, f"b-{marker[-8:]}")
    context_id = f"ctx-{marker}"
    fake_llm.script(text("slow", delay=5.0, when_user_contains=f"{marker}-slow"))
    running = busy.send(
        f"{marker}-slow", context_id=context_id, configuration={"returnImmediately": True}
    )
    fake_llm.wait_for_requests(f"{marker}-slow", 1, timeout=10)
    # The context runs one turn at a time within its tenant; another tenant's is another context.
    assert busy.error("SendMessage", send_params("x", context_id=context_id))["code"] == -32004
    done = free.send(f"{marker}-free", context_id=context_id)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    busy.result("CancelTask", {"id": running["id"]})


def test_list_tasks_lists_one_tenants_tasks(http, marker):
    tenants = {name: Caller(http, f"{name}-{marker[-8:]}") for name in ("x", "y")}
    made = {
        name: {c.send(f"{name} {n} {marker}")["id"] for n in range(2)}
        for name, c in tenants.items()
    }
    untenanted = Caller(http, None).send(f"none {marker}")["id"]
    for name, c in tenants.items():
        assert {t["id"] for t in c.result("ListTasks")["tasks"]} == made[name]
        assert {t["id"] for t in c.rest_ok("GET", "/tasks")["tasks"]} == made[name]
    everything = {
        t["id"] for t in Caller(http, None).result("ListTasks", {"pageSize": 100})["tasks"]
    }
    assert untenanted in everything and not everything & (made["x"] | made["y"])


# ---- the card's tenant, 0.3, the SDK client -------------------------------------------------------


def test_every_interface_of_the_card_names_the_tenant(http):
    card = http.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}).json()
    assert_valid("agent_card", card)
    assert {i["tenant"] for i in card["supportedInterfaces"]} == {CARD_TENANT}, card


def test_03_requests_are_served_within_the_cards_tenant(http, marker):
    in_card_tenant, untenanted = Caller(http, CARD_TENANT), Caller(http, None)
    message = {
        "kind": "message",
        "messageId": f"m-{marker}",
        "role": "user",
        "parts": [{"kind": "text", "text": f"0.3 {marker}"}],
    }
    body = {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": message}}
    answer = http.post("/", json=body, headers={"Authorization": f"Bearer {ALICE}"}).json()
    task_id = answer["result"]["id"]
    assert in_card_tenant.result("GetTask", {"id": task_id})["id"] == task_id
    assert untenanted.error("GetTask", {"id": task_id})["code"] == -32001
    made = in_card_tenant.send(f"1.0 {marker}")["id"]
    got = http.get(f"/v1/tasks/{made}", headers={"Authorization": f"Bearer {ALICE}"})
    assert got.status_code == 200 and got.json()["id"] == made, got.text


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_the_sdk_client_follows_the_cards_tenant(server, binding, marker):
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {ALICE}"}
    async with httpx.AsyncClient(trust_env=False, timeout=30, headers=headers) as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        config = ClientConfig(
            httpx_client=http, supported_protocol_bindings=[binding], streaming=False
        )
        client = ClientFactory(config).create(card)
        message = Message(
            message_id=f"m-{marker}", role=Role.ROLE_USER, parts=[Part(text=f"sdk {marker}")]
        )
        responses = [r async for r in client.send_message(SendMessageRequest(message=message))]
        task_id = responses[-1].task.id
        assert (await client.get_task(GetTaskRequest(id=task_id))).id == task_id
        # It sent the card's tenant: the task is the tenant's, not outside every tenant.
        assert (await http.get(f"{server.url}/{CARD_TENANT}/tasks/{task_id}")).status_code == 200
        assert (await http.get(f"{server.url}/tasks/{task_id}")).status_code == 404


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_our_own_client_follows_the_cards_tenant(server, binding, marker):
    """`a2a` and the remote-agent tools reach an agent through app/client: it sends the tenant
    the chosen interface names, on every call."""
    headers = {"Authorization": f"Bearer {ALICE}"}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        client = await A2AClient.connect(http, server.url, headers=headers)
        assert client.endpoint.tenant == CARD_TENANT
        client.endpoint = replace(client.endpoint, binding=binding)
        events = [event async for event in client.stream(client.message(f"ours {marker}"))]
        task_id = events[0].payload["id"]
        assert (await client.get_task(task_id))["id"] == task_id
        assert task_id in [task["id"] for task in await client.list_tasks()]
        got = await http.get(f"{server.url}/tasks/{task_id}", headers={**headers, **A2A_HEADERS})
        assert got.status_code == 404, "the task was made outside the card's tenant"


# ---- bad tenants -----------------------------------------------------------------------------------

BAD = [
    "x" * 65,
    "bad:name",
    "a b",
    ".hidden",
    "-dash",
    "tasks",
    "v1",
    "healthz",
    "extendedAgentCard",
]


@pytest.mark.parametrize("name", BAD)
def test_a_bad_tenant_is_refused_naming_the_field(http, name):
    error = Caller(http, name).error("ListTasks")
    assert error["code"] == -32602 and error["data"][0]["metadata"] == {"field": "tenant"}, error
    assert "tenant" in error["message"], error


@pytest.mark.parametrize("name", [n for n in BAD if n not in ROUTE_NAMES and n != "a b"])
def test_a_bad_tenant_in_the_path_is_400(http, name):
    response = Caller(http, name).rest("GET", "/tasks")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "tenant" in error["message"], error


def test_a_route_named_tenant_never_shadows_the_route(http):
    """Under a route's own name a path stays what it was before tenants: `/tasks/tasks` is the
    task `tasks`, `/v1/tasks/x` a 0.3 read, `/v1/tasks` and `/healthz/tasks` no route at all."""
    caller = Caller(http, None)
    assert caller.rest("GET", "/tasks/tasks").json()["error"]["status"] == "NOT_FOUND"
    v03 = http.get("/v1/tasks/x", headers={"Authorization": f"Bearer {ALICE}"})
    assert v03.status_code == 404 and "Task" in v03.text, v03.text
    for path in ("/v1/tasks", "/healthz/tasks", "/metrics/message:send", "/console/tasks/x"):
        method = "POST" if path.endswith(":send") else "GET"
        response = http.request(method, path, headers=caller.headers, json={})
        assert response.status_code == 404, (path, response.text)
        reason = response.json()["error"]["details"][0]["reason"]
        assert reason == "METHOD_NOT_FOUND", (path, response.text)


def test_a_non_string_or_empty_tenant(http, marker):
    assert Caller(http, None).error("ListTasks", {"tenant": 7})["code"] == -32602
    # "" is proto3's default: no tenant, the same as leaving it out.
    task_id = Caller(http, None).send(f"no tenant {marker}")["id"]
    assert Caller(http, None).result("GetTask", {"id": task_id, "tenant": ""})["id"] == task_id


# ---- restricted tenants and per-tenant rate limits (a second server) ---------------------------------


@pytest.fixture(scope="module")
def restricted(fake_llm) -> Iterator[ServerProcess]:
    env = {
        "A2A_API_KEYS": f"alice:{ALICE},bob:{BOB}",
        "A2A_TENANTS": "acme,beta",
        "A2A_RATE_LIMIT": "3/minute",
    }
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


def test_an_unknown_tenant_is_404_on_both_bindings(restricted):
    with httpx.Client(base_url=restricted.url, trust_env=False, timeout=30) as http:
        alice = Caller(http, "gamma")
        response = alice.rest("GET", "/tasks")
        assert response.status_code == 404, response.text
        assert response.json()["error"]["details"][0]["reason"] == "TENANT_NOT_FOUND"
        body = {"jsonrpc": "2.0", "id": 4, "method": "ListTasks", "params": {"tenant": "gamma"}}
        response = http.post("/", json=body, headers=alice.headers)
        assert response.status_code == 404, response.text
        assert response.json()["id"] == 4
        assert response.json()["error"]["data"][0]["reason"] == "TENANT_NOT_FOUND"
        assert alice.within("acme").rest("GET", "/tasks").status_code == 200


def test_each_tenant_has_its_own_rate_limit_bucket(restricted):
    with httpx.Client(base_url=restricted.url, trust_env=False, timeout=30) as http:
        bob = Caller(http, "acme", key=BOB)
        assert [bob.rest("GET", "/tasks").status_code for _ in range(3)] == [200] * 3
        refused = bob.rest("GET", "/tasks")
        assert refused.status_code == 429 and "retry-after" in refused.headers, refused.text
        body = {"jsonrpc": "2.0", "id": 5, "method": "ListTasks", "params": {"tenant": "acme"}}
        refused = http.post("/", json=body, headers=bob.headers)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["data"][0]["reason"] == "RATE_LIMITED"
        # The same principal in another tenant, and outside every tenant: buckets of their own.
        assert [bob.within("beta", BOB).rest("GET", "/tasks").status_code for _ in range(3)] == [
            200
        ] * 3
        assert bob.within(None, BOB).rest("GET", "/tasks").status_code == 200
