"""Remote agent tools over HTTP+JSON, in both generations: a second instance of our server, reached
through agent cards that offer only its REST interface (1.0 at `/`, 0.3 under `/v1/`)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)


def rest_only_cards(card: dict) -> dict[str, dict]:
    """The remote's own card, cut down to one REST interface per generation."""
    [rest] = [
        i
        for i in card["supportedInterfaces"]
        if i["protocolBinding"] == "HTTP+JSON" and i["protocolVersion"] == "1.0"
    ]
    v10 = {
        key: value
        for key, value in card.items()
        if key not in ("url", "preferredTransport", "additionalInterfaces", "protocolVersion")
    }
    v10 |= {"name": "Rest Ten", "supportedInterfaces": [rest]}
    v03 = {key: value for key, value in card.items() if key != "supportedInterfaces"}
    v03 |= {
        "name": "Rest Three",
        "preferredTransport": "HTTP+JSON",
        "additionalInterfaces": [{"url": card["url"], "transport": "HTTP+JSON"}],
    }
    return {"/v10.json": v10, "/v03.json": v03}


class CardServer:
    """Serves fixed agent cards on 127.0.0.1 (a card host other than the agent's)."""

    def __init__(self, cards: dict[str, dict]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(cards[self.path]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def ours(fake_llm):
    remote = ServerProcess(fake_llm.base_url)
    remote.start()
    cards = CardServer(
        rest_only_cards(httpx.get(remote.url + "/.well-known/agent-card.json").json())
    )
    server = ServerProcess(
        fake_llm.base_url,
        env={"AGENT_REMOTE_AGENTS": f"{cards.url}/v10.json,{cards.url}/v03.json"},
    )
    server.start()
    client, remote_client = RpcClient(server.url), RpcClient(remote.url)
    try:
        yield client, remote_client
    finally:
        client.close()
        remote_client.close()
        server.cleanup()
        cards.close()
        remote.cleanup()


@pytest.mark.parametrize("tool", ["rest_ten", "rest_three"])
def test_a_call_and_a_question_over_rest(ours, fake_llm, marker, tool):
    client, remote = ours
    sub = f"city {marker}-sub"
    fake_llm.script(
        tool_calls([(tool, {"message": sub})], when_user_contains=f"ask {marker}"),
        tool_calls([("ask_user", {"question": "Which city?"})], when_user_contains=sub),
        text("Sunny in Oslo.", when_user_contains=sub),
        text("Oslo will be sunny.", when_user_contains=f"ask {marker}"),
    )
    task = client.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]
    done = client.send("Oslo", task_id=task["id"], context_id=task["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert fake_llm.tool_result(f"ask {marker}") == "Sunny in Oslo."
    [sub_task] = [t for t in remote.result("ListTasks", {})["tasks"] if sub in str(t["history"])]
    assert sub_task["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_cancel_over_rest_reaches_the_sub_agent(ours, fake_llm, marker):
    client, remote = ours
    sub = f"slow {marker}-sub"
    fake_llm.script(
        tool_calls([("rest_three", {"message": sub})], when_user_contains=f"go {marker}"),
        text("late", delay=20, when_user_contains=sub),
    )
    task = client.send(f"go {marker}", configuration={"returnImmediately": True})
    fake_llm.wait_for_requests(sub, 1, timeout=15)
    client.result("CancelTask", {"id": task["id"]})
    remote_tasks = [
        t for t in remote.result("ListTasks", {})["tasks"] if sub in str(t.get("history"))
    ]
    [sub_task] = remote_tasks
    remote.wait_for_state(sub_task["id"], "TASK_STATE_CANCELED", timeout=10)
