"""Our clients of signed cards: `a2a card URL` says whether the card's signature verifies, and a
remote agent whose entry has `require_signed_card` is used only if it does.

A forged agent is a plain HTTP server on loopback serving a signed card with one field changed,
beside the real key set; the signing server names the forger's origin (A2A_PUBLIC_URL), so the
card's `jku` points at the key set the forger serves."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.e2e.harness import ServerProcess, free_port
from tests.e2e.test_cli_client import a2a

pytestmark = pytest.mark.timeout(120)

CARD = "/.well-known/agent-card.json"
JWKS = "/.well-known/jwks.json"


class Forger:
    """Serves fixed bodies by path on a loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bodies: dict[str, bytes] = {}
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = bodies.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def agents(fake_llm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A signed agent, an unsigned one, and a forger serving the signed card tampered with."""
    key = tmp_path_factory.mktemp("key") / "ec.pem"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    forger = Forger()
    signed_env = {"A2A_CARD_SIGNING_KEY": str(key), "A2A_CARD_SIGNING_KID": "cli-key"}
    signed = ServerProcess(fake_llm.base_url, env={"AGENT_NAME": "Signed Agent", **signed_env})
    unsigned = ServerProcess(fake_llm.base_url, env={"AGENT_NAME": "Unsigned Agent"})
    # The same key, naming the forger's origin: the card the forger changes names its key set.
    source = ServerProcess(fake_llm.base_url, env={"A2A_PUBLIC_URL": forger.url, **signed_env})
    servers = [signed, unsigned, source]
    try:
        for server in servers:
            server.wait_ready = False
            server.start()
        card = httpx.get(source.url + CARD, trust_env=False).json()
        tampered = copy.deepcopy(card) | {"name": "Tampered Agent"}
        forger.bodies[CARD] = json.dumps(tampered).encode()
        forger.bodies[JWKS] = httpx.get(source.url + JWKS, trust_env=False).content
        # The untouched card, served from another origin than its key set's (plain http).
        forger.bodies["/elsewhere" + CARD] = httpx.get(signed.url + CARD, trust_env=False).content
        yield {"signed": signed, "unsigned": unsigned, "forger": forger}
    finally:
        for server in servers:
            server.cleanup()
        forger.close()


def test_a2a_card_says_the_signature_verified(agents) -> None:
    result = a2a("card", agents["signed"].url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["signatures"]  # stdout: the card alone
    assert result.stderr.strip() == "signature verified (kid=cli-key, alg=ES256)"


def test_a2a_card_says_unsigned(agents) -> None:
    result = a2a("card", agents["unsigned"].url, "--json")
    assert result.returncode == 0, result.stderr
    assert "signatures" not in json.loads(result.stdout)
    assert result.stderr.strip() == "unsigned"


def test_a2a_card_says_a_tampered_card_is_invalid(agents) -> None:
    result = a2a("card", agents["forger"].url)
    assert result.returncode == 1
    assert json.loads(result.stdout)["name"] == "Tampered Agent"
    assert result.stderr.startswith(
        "signature INVALID: the signature by 'cli-key' does not match"
    ), result.stderr


def test_a2a_card_fetches_no_plain_http_key_set_of_another_origin(agents) -> None:
    result = a2a("card", agents["forger"].url + "/elsewhere" + CARD)
    assert result.returncode == 1
    assert "neither on the card's origin nor https: not fetched" in result.stderr, result.stderr


def test_a_remote_agent_that_requires_a_signed_card_uses_only_one_that_verifies(
    agents, fake_llm: Any
) -> None:
    entries = [
        {"url": agents[name].url + CARD, "require_signed_card": True}
        for name in ("signed", "unsigned", "forger")
    ]
    # The demo model (LLM_MODEL unset): ready at once, so /readyz names the sources down.
    env = {"AGENT_REMOTE_AGENTS": json.dumps(entries), "LLM_MODEL": ""}
    ours = ServerProcess(fake_llm.base_url, env=env)
    with ours.running():
        skills = httpx.get(ours.url + CARD, trust_env=False).json()["skills"]
        tools = {skill["name"] for skill in skills if "tool" in skill["tags"]}
        assert "signed_agent" in tools
        assert not {"unsigned_agent", "tampered_agent"} & tools
        ours.settle_log()
        logs = ours.logs(limit=None)
        assert "remote_agent=<signed_agent>" in logs and "signature verified (kid=cli-key" in logs
        assert "it is unsigned (require_signed_card)" in logs, logs
        assert "its signature INVALID: the signature by 'cli-key' does not match" in logs, logs
        down = httpx.get(ours.url + "/readyz", timeout=10).json()["toolSourcesDown"]
        assert all("(require_signed_card)" in why for why in down.values()), down


def test_require_signed_card_must_be_true_or_false(fake_llm: Any) -> None:
    entry = [{"url": "http://127.0.0.1:9" + CARD, "require_signed_card": "yes"}]
    ours = ServerProcess(
        fake_llm.base_url, env={"AGENT_REMOTE_AGENTS": json.dumps(entry)}, wait_ready=False
    )
    with ours.running():
        ours.settle_log()
        assert "require_signed_card must be true or false" in ours.logs(limit=None)
