"""The card's URL on the real server bound to 0.0.0.0: the request's `Host` (and a trusted
proxy's `X-Forwarded-*`), never the wildcard address; an a2a-sdk client follows it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from tests.e2e.harness import ServerProcess
from tests.e2e.wire import card_url_set
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)

API_KEY = "card-url-test-key-0123456789abcdef"
CARD = "/.well-known/agent-card.json"
FORWARDED = {
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "public.example.org",
    "X-Forwarded-Prefix": "/helper",
}


def start(fake_llm, *, trust_forwarded: bool) -> ServerProcess:
    env = {
        "A2A_API_KEYS": f"alice:{API_KEY}",
        "A2A_ALLOWED_HOSTS": "agent.example.com,localhost",
        "A2A_TRUST_FORWARDED": "true" if trust_forwarded else "false",
    }
    return ServerProcess(fake_llm.base_url, env=env, bind_host="0.0.0.0").start()


@pytest.fixture(scope="module")
def untrusted(fake_llm) -> Iterator[ServerProcess]:
    server = start(fake_llm, trust_forwarded=False)
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def trusted(fake_llm) -> Iterator[ServerProcess]:
    server = start(fake_llm, trust_forwarded=True)
    try:
        yield server
    finally:
        server.cleanup()


def card_urls(server: ServerProcess, headers: dict[str, str]) -> list[str]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=10) as client:
        response = client.get(CARD, headers=headers)
    assert response.status_code == 200, response.text
    return sorted(card_url_set(response.json()))


def test_the_card_names_the_requests_host_not_the_wildcard(untrusted: ServerProcess) -> None:
    assert card_urls(untrusted, {"Host": "agent.example.com"}) == ["http://agent.example.com"]
    # Asked by address (what probes and bare clients do), the card says that address.
    assert card_urls(untrusted, {}) == [untrusted.url]


def test_forwarded_headers_are_ignored_when_not_trusted(untrusted: ServerProcess) -> None:
    headers = {"Host": "agent.example.com", **FORWARDED}
    assert card_urls(untrusted, headers) == ["http://agent.example.com"]


def test_forwarded_headers_name_the_url_when_trusted(trusted: ServerProcess) -> None:
    headers = {"Host": "agent.example.com", **FORWARDED}
    assert card_urls(trusted, headers) == ["https://public.example.org/helper"]


async def test_an_sdk_client_resolves_the_card_and_sends_to_its_url(
    untrusted: ServerProcess, fake_llm, marker: str
) -> None:
    fake_llm.script(text("reached through the card", when_user_contains=marker))
    base = f"http://localhost:{untrusted.port}"
    async with httpx.AsyncClient(
        headers={"X-API-Key": API_KEY}, trust_env=False, timeout=30
    ) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        assert [interface.url for interface in card.supported_interfaces] == [base] * 4
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        request = SendMessageRequest(
            message=Message(
                message_id=f"m-{marker}",
                role=Role.ROLE_USER,
                parts=[Part(text=f"hello {marker}")],
            )
        )
        replies = [reply async for reply in client.send_message(request)]
    assert replies, "no reply"
    task = replies[-1].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert "reached through the card" in str(task.artifacts)
