"""The public agent card at /.well-known/agent-card.json."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.e2e.harness import RpcClient
from tests.e2e.wire import assert_valid

pytestmark = pytest.mark.timeout(60)

# No model call here: do not wait for the model adapter to load.
WAIT_READY = False


@pytest.fixture(scope="module")
def card(rpc):
    r = rpc.get("/.well-known/agent-card.json")
    assert r.status_code == 200, f"agent card: HTTP {r.status_code}: {r.text[:500]}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    return r.json()


def test_card_is_a_valid_a2a_1_0_agent_card(card):
    assert_valid("agent_card", card)
    assert card["name"] and card["description"] and card["version"]
    assert card["capabilities"].get("streaming") is True, card["capabilities"]
    assert card["defaultInputModes"] and card["defaultOutputModes"]
    for skill in card["skills"]:
        assert skill["id"] and skill["name"] and skill["description"] and skill["tags"], skill


def test_first_interface_is_jsonrpc_1_0(card, server):
    iface = card["supportedInterfaces"][0]
    assert iface["protocolBinding"] == "JSONRPC", iface
    assert iface["protocolVersion"] == "1.0", iface
    url = urlparse(iface["url"])
    assert url.scheme in ("http", "https") and url.netloc, f"not an absolute URL: {iface['url']}"


def test_interface_url_serves_json_rpc(card, server):
    """The advertised URL must be the JSON-RPC endpoint (checked when it is a loopback URL)."""
    iface = card["supportedInterfaces"][0]
    url = urlparse(iface["url"])
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"card advertises a non-loopback public URL {iface['url']!r}; not contacted")
    assert url.port == server.port, f"card URL {iface['url']} does not point at this server"
    client = RpcClient(f"{url.scheme}://{url.netloc}", endpoint=url.path or "/")
    try:
        err = client.error("GetTask", {"id": "no-such-task-for-card-check"})
    finally:
        client.close()
    assert err["code"] == -32001, err
