"""Which interface of a card the client talks to (app.client.endpoints): the CLI's `--binding`,
its default (the card's first interface it speaks, 1.0 before 0.3), the remote-agent tools'
(JSON-RPC before HTTP+JSON, never gRPC), and a clear refusal when the card has none."""

from __future__ import annotations

import pytest

from app.client.endpoints import NoInterface, choose_endpoint
from app.client.grpc_wire import target_of


def interface(binding: str, version: str = "1.0", url: str = "http://a") -> dict[str, str]:
    return {"url": url, "protocolBinding": binding, "protocolVersion": version}


CARD = {
    "name": "a",
    "supportedInterfaces": [
        interface("HTTP+JSON", "0.3"),
        interface("HTTP+JSON"),
        interface("JSONRPC"),
        {**interface("GRPC", url="127.0.0.1:50051"), "tenant": "t"},
    ],
}


def test_the_cli_takes_the_cards_first_1_0_interface_or_the_binding_named() -> None:
    assert choose_endpoint(CARD, card_order=True).binding == "HTTP+JSON"
    grpc = choose_endpoint(CARD, binding="GRPC")
    assert (grpc.url, grpc.generation, grpc.tenant) == ("127.0.0.1:50051", "1.0", "t")
    assert choose_endpoint(CARD, binding="JSONRPC").binding == "JSONRPC"


def test_the_remote_agent_tools_keep_json_rpc_first_and_never_grpc() -> None:
    assert choose_endpoint(CARD).binding == "JSONRPC"
    only_grpc = {"name": "a", "supportedInterfaces": [interface("GRPC", url="h:1")]}
    with pytest.raises(NoInterface, match="no JSON-RPC or HTTP\\+JSON interface"):
        choose_endpoint(only_grpc)
    assert choose_endpoint(only_grpc, card_order=True).binding == "GRPC"


def test_a_binding_the_card_lacks_is_named_with_what_it_offers() -> None:
    v03_grpc = {
        "name": "a",
        "supportedInterfaces": [interface("GRPC", "0.3"), interface("JSONRPC")],
    }
    with pytest.raises(
        NoInterface, match=r"no grpc interface in A2A 1.0 \(it offers: GRPC 0.3, JSONRPC 1.0\)"
    ):
        choose_endpoint(v03_grpc, binding="GRPC")


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("127.0.0.1:50051", ("127.0.0.1:50051", False)),
        ("grpc://h:7", ("h:7", False)),
        ("grpcs://h", ("h:443", True)),
        ("https://h:8443/", ("h:8443", True)),
    ],
)
def test_a_grpc_url_is_a_target_and_whether_it_is_tls(url: str, target: tuple[str, bool]) -> None:
    assert target_of(url) == target
