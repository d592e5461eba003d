"""The extended agent card (A2A_EXTENDED_CARD): declared in the public card, served to
authenticated callers on both bindings and both generations, refused clearly when absent."""

from __future__ import annotations

import json

import httpx
import pytest

from app.main import create_app
from app.settings import Settings

SKILL = {"id": "billing", "name": "Billing", "description": "Invoices.", "tags": ["money"]}
KEY = "k-" + "a" * 30
HEADERS = {"X-API-Key": KEY, "A2A-Version": "1.0"}


def client_for(settings: Settings) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(settings))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


def rpc(method: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method}


async def test_declared_and_served_to_authenticated_callers_only(tmp_path) -> None:
    card_file = tmp_path / "extended.json"
    card_file.write_text(json.dumps({"description": "For customers.", "skills": [SKILL]}))
    settings = Settings(a2a_api_keys=f"alice:{KEY}", a2a_extended_card=str(card_file))
    async with client_for(settings) as client:
        public = (await client.get("/.well-known/agent-card.json")).json()
        assert public["capabilities"]["extendedAgentCard"] is True
        assert public["supportsAuthenticatedExtendedCard"] is True
        assert "Billing" not in [skill["name"] for skill in public["skills"]]

        assert (await client.get("/extendedAgentCard")).status_code == 401
        extended = (await client.get("/extendedAgentCard", headers=HEADERS)).json()
        assert extended["description"] == "For customers."
        names = [skill["name"] for skill in extended["skills"]]
        assert names[0] == "Conversation" and names[-1] == "Billing"
        assert extended["supportedInterfaces"] == public["supportedInterfaces"]

        over_rpc = await client.post("/", json=rpc("GetExtendedAgentCard"), headers=HEADERS)
        assert over_rpc.json()["result"] == extended
        v03 = await client.post(
            "/", json=rpc("agent/getAuthenticatedExtendedCard"), headers={"X-API-Key": KEY}
        )
        # A 0.3 caller gets the same card with the 0.3 members (`url`, ...) beside the 1.0 ones.
        extended_v03 = v03.json()["result"]
        merged = ("securitySchemes",)  # each scheme also holds its 0.3 `type`
        assert {key: extended_v03[key] for key in extended if key not in merged} == {
            key: value for key, value in extended.items() if key not in merged
        }
        assert extended_v03["url"] == "http://127.0.0.1:8000"
        assert extended_v03["supportsAuthenticatedExtendedCard"] is True
        assert (await client.get("/v1/card", headers={"X-API-Key": KEY})).json() == extended_v03


async def test_without_one_each_generation_says_so() -> None:
    async with client_for(Settings()) as client:
        public = (await client.get("/.well-known/agent-card.json")).json()
        assert public["capabilities"]["extendedAgentCard"] is False
        assert "supportsAuthenticatedExtendedCard" not in public
        v1 = await client.post("/", json=rpc("GetExtendedAgentCard"), headers=HEADERS)
        assert v1.json()["error"]["code"] == -32004
        v03 = await client.post("/", json=rpc("agent/getAuthenticatedExtendedCard"))
        assert v03.json()["error"]["code"] == -32007
        rest = await client.get("/v1/card")
        assert rest.status_code == 400
        assert rest.json()["error"]["details"][0]["reason"] == "EXTENDED_AGENT_CARD_NOT_CONFIGURED"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("/no/such/extended-card.json", "cannot read the extended card file"),
    ],
)
def test_a_bad_setting_is_refused_at_startup_saying_why(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Settings(a2a_extended_card=value)


async def test_a_10_card_request_gets_the_10_card_alone() -> None:
    async with client_for(Settings()) as client:
        both = await client.get("/.well-known/agent-card.json")
        v1 = await client.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
    assert "url" in both.json() and "url" not in v1.json()
    assert set(both.json()) - set(v1.json()) == {
        "protocolVersion",
        "url",
        "preferredTransport",
        "additionalInterfaces",
    }
    assert v1.json()["supportedInterfaces"] == both.json()["supportedInterfaces"]
    assert "A2A-Version" in v1.headers["vary"] and both.headers["etag"] != v1.headers["etag"]


async def test_a2a_card_v03_false_gives_a_strict_10_card_and_still_serves_03() -> None:
    async with client_for(Settings(a2a_card_v03=False)) as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
        assert "url" not in card and "protocolVersion" not in card
        v03 = await client.post("/", json=rpc("tasks/get") | {"params": {"id": "nope"}})
    assert v03.json()["error"]["code"] == -32001  # the 0.3 method is served all the same


def versions(card: dict) -> list[tuple[str, str]]:
    return [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]


async def test_asked_for_in_11_it_lists_the_11_interfaces_as_the_public_card_does(
    tmp_path,
) -> None:
    card_file = tmp_path / "extended.json"
    card_file.write_text(json.dumps({"description": "For customers.", "skills": [SKILL]}))
    settings = Settings(a2a_api_keys=f"alice:{KEY}", a2a_extended_card=str(card_file))
    v11 = HEADERS | {"A2A-Version": "1.1"}
    async with client_for(settings) as client:
        public = (await client.get("/.well-known/agent-card.json", headers=v11)).json()
        rest = (await client.get("/extendedAgentCard", headers=v11)).json()
        over_rpc = (await client.post("/", json=rpc("GetExtendedAgentCard"), headers=v11)).json()
        rest_10 = (await client.get("/extendedAgentCard", headers=HEADERS)).json()
        rpc_10 = await client.post("/", json=rpc("GetExtendedAgentCard"), headers=HEADERS)
        unversioned = await client.post(
            "/", json=rpc("GetExtendedAgentCard"), headers={"X-API-Key": KEY}
        )
        v03 = await client.post(
            "/", json=rpc("agent/getAuthenticatedExtendedCard"), headers={"X-API-Key": KEY}
        )
    assert ("JSONRPC", "1.1") in versions(public) and ("HTTP+JSON", "1.1") in versions(public)
    assert rest["supportedInterfaces"] == public["supportedInterfaces"]
    assert over_rpc["result"] == rest and rest["description"] == "For customers."
    # Not asked for in 1.1 (1.0, no version, or the 0.3 method): the card 1.0 clients have read.
    for card in (
        rest_10,
        rpc_10.json()["result"],
        unversioned.json()["result"],
        v03.json()["result"],
    ):
        assert "1.1" not in {version for _, version in versions(card)}, card["supportedInterfaces"]
    assert {key: value for key, value in rest.items() if key != "supportedInterfaces"} == {
        key: value for key, value in rest_10.items() if key != "supportedInterfaces"
    }
