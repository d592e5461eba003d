"""Signed agent cards (A2A_CARD_SIGNING_KEY), checked by the official SDK's verifier with the key
set its `jku` names, fetched over HTTP: the public card (with and without its 0.3 members) and
the extended one (both bindings, both generations), for each key type; a tampered card refused;
rotation; the strict 1.0 card; keys the server refuses to start with."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client.card_resolver import A2ACardResolver, parse_agent_card
from a2a.types import AgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from google.protobuf.json_format import ParseDict
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from tests.e2e.harness import ServerProcess, server_command
from tests.e2e.wire import assert_valid

pytestmark = pytest.mark.timeout(120)

API_KEY = "k" * 32
EXTENDED = {
    "description": "The members' card.",
    "skills": [{"id": "members", "name": "Members", "description": "Só membros.", "tags": ["m"]}],
}
ALGORITHMS = ["ES256", "RS256", "EdDSA"]
V03_MEMBERS = {"url", "preferredTransport", "protocolVersion", "additionalInterfaces", "security"}


def write_key(path: Path, key: Any, *, traditional: bool = False) -> str:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL
        if traditional
        else serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    return str(path)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("keys")
    return {
        # `openssl ecparam -genkey` writes the traditional "EC PRIVATE KEY" form; the rest PKCS#8.
        "ES256": write_key(
            folder / "ec.pem", ec.generate_private_key(ec.SECP256R1()), traditional=True
        ),
        "RS256": write_key(folder / "rsa.pem", rsa.generate_private_key(65537, 2048)),
        "EdDSA": write_key(folder / "ed25519.pem", ed25519.Ed25519PrivateKey.generate()),
        "old": write_key(folder / "old.pem", ec.generate_private_key(ec.SECP256R1())),
    }


def signing_server(fake_llm: Any, key: str, **env: str) -> ServerProcess:
    return ServerProcess(
        fake_llm.base_url,
        env={
            "A2A_CARD_SIGNING_KEY": key,
            "A2A_API_KEYS": f"alice:{API_KEY}",
            "A2A_EXTENDED_CARD": json.dumps(EXTENDED),
            **env,
        },
        wait_ready=False,
    )


def key_provider(kid: str | None, jku: str | None) -> PyJWK:
    """What a client knows of the keys: the JWKS at `jku`, nothing else."""
    assert jku is not None
    keys = httpx.get(jku, trust_env=False, timeout=10).raise_for_status().json()["keys"]
    for jwk in keys:
        if jwk.get("kid") == kid:
            return PyJWK(jwk)
    raise PyJWKError(f"no key {kid!r} at {jku}")


verify = create_signature_verifier(key_provider, ALGORITHMS)


def protected_header(card: dict[str, Any]) -> dict[str, Any]:
    (signature,) = card["signatures"]
    protected = signature["protected"]
    return json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))


def resolved(url: str, **headers: str) -> AgentCard:
    """The public card through the SDK's resolver, its signature checked on the way."""

    async def resolve() -> AgentCard:
        async with httpx.AsyncClient(trust_env=False) as http:
            return await A2ACardResolver(http, url).get_agent_card(
                http_kwargs={"headers": headers}, signature_verifier=verify
            )

    return asyncio.run(resolve())


def rpc(url: str, method: str, *, version: str | None) -> dict[str, Any]:
    headers = {"X-API-Key": API_KEY, **({"A2A-Version": version} if version else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}
    answer = httpx.post(url + "/", json=body, headers=headers, trust_env=False).json()
    assert "result" in answer, answer
    return answer["result"]


@pytest.fixture(scope="module", params=ALGORITHMS)
def signed(request: pytest.FixtureRequest, keys: dict[str, str], fake_llm: Any):
    with signing_server(fake_llm, keys[request.param]).running() as server:
        yield server, request.param


def test_the_public_card_verifies_with_and_without_its_03_members(signed) -> None:
    server, alg = signed
    both = httpx.get(server.url + "/.well-known/agent-card.json", trust_env=False).json()
    strict = httpx.get(
        server.url + "/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}, trust_env=False
    ).json()
    assert V03_MEMBERS <= both.keys() and not V03_MEMBERS & strict.keys()
    assert_valid("agent_card", strict)  # the 1.0 JSON Schema, `signatures` included
    assert both["signatures"] == strict["signatures"]  # one signature: the 1.0 card's
    header = protected_header(both)
    jwks = httpx.get(server.url + "/.well-known/jwks.json", trust_env=False).json()
    assert header == {
        "alg": alg,
        "kid": jwks["keys"][0]["kid"],
        "typ": "JOSE",
        "jku": server.url + "/.well-known/jwks.json",
    }
    for card in (resolved(server.url), resolved(server.url, **{"A2A-Version": "1.0"})):
        assert card.name and card.signatures
    # A 1.0 parser that maps no 0.3 member reads the same card, and the same signature holds.
    verify(ParseDict(copy.deepcopy(both), AgentCard(), ignore_unknown_fields=True))


def test_the_extended_card_verifies_on_every_binding_and_generation(signed) -> None:
    server, _ = signed
    v1 = rpc(server.url, "GetExtendedAgentCard", version="1.0")
    verify(ParseDict(v1, AgentCard()))  # strict: nothing but 1.0 members
    rest = httpx.get(
        server.url + "/extendedAgentCard",
        headers={"X-API-Key": API_KEY, "A2A-Version": "1.0"},
        trust_env=False,
    ).json()
    v03 = rpc(server.url, "agent/getAuthenticatedExtendedCard", version=None)
    assert v03["url"] == server.url and v03["securitySchemes"]["apiKey"]["type"] == "apiKey"
    for card in (rest, v03):
        verify(parse_agent_card(card))
    assert "Só membros." in json.dumps(v1, ensure_ascii=False)


def test_the_cards_asked_for_in_11_list_the_11_interfaces_and_verify(signed) -> None:
    """Asked for in 1.1, the public and the extended card (both bindings) carry the 1.1
    interfaces, and their signature covers them, as it covers the rest of the card."""
    server, _ = signed
    v11 = {"A2A-Version": "1.1"}
    public = httpx.get(server.url + "/.well-known/agent-card.json", headers=v11, trust_env=False)
    rest = httpx.get(
        server.url + "/extendedAgentCard", headers={"X-API-Key": API_KEY, **v11}, trust_env=False
    )
    cards = (public.json(), rest.json(), rpc(server.url, "GetExtendedAgentCard", version="1.1"))
    for card in cards:
        listed = [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]
        assert ("JSONRPC", "1.1") in listed and ("HTTP+JSON", "1.1") in listed, listed
        verify(ParseDict(copy.deepcopy(card), AgentCard()))  # strict: 1.0 members only
    assert cards[1] == cards[2]
    assert cards[1]["supportedInterfaces"] == cards[0]["supportedInterfaces"]
    v10 = rpc(server.url, "GetExtendedAgentCard", version="1.0")
    assert v10["signatures"] != cards[2]["signatures"]  # a card of its own, signed as it is


def test_a_card_with_one_field_changed_is_refused(signed) -> None:
    server, _ = signed
    card = httpx.get(server.url + "/.well-known/agent-card.json", trust_env=False).json()
    extended = rpc(server.url, "GetExtendedAgentCard", version="1.0")
    for tampered, change in (
        (copy.deepcopy(card), lambda c: c.update(description=c["description"] + ".")),
        (copy.deepcopy(card), lambda c: c["skills"][0].update(name="Other")),
        (copy.deepcopy(card), lambda c: c["capabilities"].update(streaming=False)),
        (copy.deepcopy(extended), lambda c: c["skills"][-1].update(description="Só.")),
    ):
        change(tampered)
        with pytest.raises(InvalidSignaturesError):
            verify(parse_agent_card(tampered))


def test_the_key_set_holds_public_keys_each_with_its_kid(signed) -> None:
    server, alg = signed
    response = httpx.get(server.url + "/.well-known/jwks.json", trust_env=False)
    assert response.status_code == 200 and "max-age" in response.headers["cache-control"]
    (jwk,) = response.json()["keys"]
    assert jwk["alg"] == alg and jwk["kid"] and jwk["use"] == "sig"
    assert not {"d", "p", "q", "dp", "dq", "qi", "k"} & jwk.keys()


def test_a_card_signed_by_the_old_key_verifies_while_the_old_key_is_listed(
    keys: dict[str, str], fake_llm: Any, tmp_path: Path
) -> None:
    """A rotation: the new key signs, the old one stays in the JWKS until cards it signed (in
    caches) are gone. The agent's URL stays the same, so the old card's `jku` names the new
    server's key set."""
    new = signing_server(fake_llm, keys["EdDSA"], A2A_CARD_SIGNING_KID="2026-11")
    with signing_server(
        fake_llm, keys["old"], A2A_PUBLIC_URL=new.url, A2A_CARD_SIGNING_KID="2026-05"
    ).running() as old:
        old_card = httpx.get(old.url + "/.well-known/agent-card.json", trust_env=False).json()
        saved = tmp_path / "old-jwks.json"  # what the runbook says: save the JWKS, then rotate
        saved.write_text(httpx.get(old.url + "/.well-known/jwks.json", trust_env=False).text)
    assert protected_header(old_card)["jku"] == new.url + "/.well-known/jwks.json"
    new.extra_env["A2A_CARD_SIGNING_EXTRA_JWKS"] = str(saved)
    with new.running():
        jwks = httpx.get(new.url + "/.well-known/jwks.json", trust_env=False).json()
        assert [key["kid"] for key in jwks["keys"]] == ["2026-11", "2026-05"]
        verify(parse_agent_card(copy.deepcopy(old_card)))
        assert (resolved(new.url)).signatures
        card = httpx.get(new.url + "/.well-known/agent-card.json", trust_env=False).json()
        assert protected_header(card)["kid"] == "2026-11"
    after = signing_server(fake_llm, keys["EdDSA"], A2A_CARD_SIGNING_KID="2026-11")
    after.port, after.url = new.port, new.url  # the same agent, the old key dropped
    with after.running():
        with pytest.raises(InvalidSignaturesError):
            verify(parse_agent_card(copy.deepcopy(old_card)))


def test_a_strict_1_0_card_a2a_card_v03_false_still_verifies(
    keys: dict[str, str], fake_llm: Any
) -> None:
    with signing_server(fake_llm, keys["ES256"], A2A_CARD_V03="false").running() as server:
        card = httpx.get(server.url + "/.well-known/agent-card.json", trust_env=False).json()
        assert not V03_MEMBERS & card.keys() and card["signatures"]
        resolved(server.url)
        verify(ParseDict(card, AgentCard()))  # strict: no member a 1.0 parser does not know


def test_keys_the_server_cannot_use_refuse_the_start(keys: dict[str, str], tmp_path: Path) -> None:
    def pem(name: str, key: Any, **kwargs: Any) -> str:
        return write_key(tmp_path / name, key, **kwargs)

    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    (tmp_path / "garbage.pem").write_text("not a key\n")
    private_jwks = json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "x"}]})
    cases = {
        str(tmp_path / "missing.pem"): "cannot read",
        str(tmp_path): "cannot read",  # a directory
        str(tmp_path / "garbage.pem"): "is not an unencrypted PEM private key",
        str(encrypted): "is not an unencrypted PEM private key",
        pem("p384.pem", ec.generate_private_key(ec.SECP384R1())): "only P-256",
        pem("rsa1024.pem", rsa.generate_private_key(65537, 1024)): "at least 2048 bits",
        pem("ed448.pem", ed448.Ed448PrivateKey.generate()): "supported: EC P-256, RSA or Ed25519",
    }
    runs = {path: _start(A2A_CARD_SIGNING_KEY=path) for path in cases} | {
        "private": _start(
            A2A_CARD_SIGNING_KEY=keys["ES256"], A2A_CARD_SIGNING_EXTRA_JWKS=private_jwks
        )
    }
    cases["private"] = "is a private key"
    for path, run in runs.items():
        out, err = run.communicate(timeout=60)
        lines = err.strip().splitlines()
        assert run.returncode == 2, (path, err)
        assert len(lines) == 1 and lines[0].startswith("a2a-server: A2A_CARD_SIGNING_"), err
        assert cases[path] in lines[0], (path, lines[0])


def _start(**env: str) -> subprocess.Popen[str]:
    """`a2a-server` with these settings (the harness's environment), expected to exit at once."""
    server = ServerProcess("http://127.0.0.1:9", env=env)  # for its port and environment
    try:
        return subprocess.Popen(
            server_command(server.port),
            env=server.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
    finally:
        server.cleanup()
