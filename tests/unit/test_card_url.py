"""The card's URL: A2A_PUBLIC_URL, else the request's scheme and `Host` (forwarded headers only
when trusted), never the bind address; one ETag per URL."""

from __future__ import annotations

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.e2e.wire import card_url_set

CARD = "/.well-known/agent-card.json"
FORWARDED = {
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "public.example.org",
    "X-Forwarded-Prefix": "/agents/helper",
}


def client_for(settings: Settings, base_url: str = "http://testserver") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url=base_url
    )


def urls(card: dict) -> list[str]:
    """Every URL the card names, once each: its interfaces' (1.0 and 0.3) and the 0.3 `url`."""
    return sorted(card_url_set(card))


async def test_bound_to_a_wildcard_the_card_names_the_requests_host() -> None:
    settings = Settings(
        a2a_host="0.0.0.0", a2a_auth="none", a2a_allowed_hosts=["agent.example.com"]
    )
    async with client_for(settings) as client:
        response = await client.get(CARD, headers={"Host": "agent.example.com"})
        assert response.status_code == 200, response.text
        assert urls(response.json()) == ["http://agent.example.com"]
        assert "Host" in response.headers["vary"]
        with_port = await client.get(CARD, headers={"Host": "Agent.Example.com:8080"})
        assert urls(with_port.json()) == ["http://agent.example.com:8080"]
        by_address = await client.get(CARD, headers={"Host": "10.1.2.3:8000"})
        assert urls(by_address.json()) == ["http://10.1.2.3:8000"]
        # A name not served is still refused before the card (the Host allow-list).
        refused = await client.get(CARD, headers={"Host": "evil.example.net"})
        assert refused.status_code == 421


async def test_bound_to_a_wildcard_with_nothing_configured_any_hosts_card_names_it() -> None:
    async with client_for(Settings(a2a_host="0.0.0.0", a2a_auth="none")) as client:
        response = await client.get(CARD, headers={"Host": "agent.example.com"})
    assert response.status_code == 200, response.text
    assert urls(response.json()) == ["http://agent.example.com"]


async def test_the_scheme_is_the_requests() -> None:
    settings = Settings(a2a_allowed_hosts=["agent.example.com"])
    async with client_for(settings, "https://agent.example.com") as client:
        card = (await client.get(CARD)).json()
    assert urls(card) == ["https://agent.example.com"]


async def test_forwarded_headers_are_ignored_unless_trusted() -> None:
    untrusted = Settings(a2a_allowed_hosts=["agent.example.com"])
    async with client_for(untrusted, "http://agent.example.com") as client:
        card = (await client.get(CARD, headers=FORWARDED)).json()
    assert urls(card) == ["http://agent.example.com"]

    trusted = Settings(a2a_allowed_hosts=["agent.example.com"], a2a_trust_forwarded=True)
    async with client_for(trusted, "http://agent.example.com") as client:
        response = await client.get(CARD, headers=FORWARDED)
        assert urls(response.json()) == ["https://public.example.org/agents/helper"]
        assert "X-Forwarded-Host" in response.headers["vary"]
        # A proxy chain's list: the first (outermost) entry. Unusable values are ignored.
        chained = await client.get(
            CARD, headers={"X-Forwarded-Proto": "https, http", "X-Forwarded-Host": "a.example, b"}
        )
        assert urls(chained.json())[0] == "https://a.example"
        junk = await client.get(
            CARD,
            headers={
                "X-Forwarded-Proto": "gopher",
                "X-Forwarded-Host": "evil.example/path?x",
                "X-Forwarded-Prefix": "no-slash",
            },
        )
        assert urls(junk.json())[0] == "http://agent.example.com"


async def test_a_public_url_wins_over_the_request() -> None:
    settings = Settings(
        a2a_public_url="https://agents.example.com/helper/", a2a_trust_forwarded=True
    )
    async with client_for(settings, "http://agents.example.com") as client:
        response = await client.get(CARD, headers=FORWARDED)
    assert urls(response.json()) == ["https://agents.example.com/helper"]
    # The URL does not depend on the request; only the generation does (A2A-Version).
    assert response.headers["vary"] == "A2A-Version"


async def test_each_url_has_its_own_etag() -> None:
    settings = Settings(a2a_allowed_hosts=["a.example.com", "b.example.com"])
    async with client_for(settings) as client:
        a = await client.get(CARD, headers={"Host": "a.example.com"})
        b = await client.get(CARD, headers={"Host": "b.example.com"})
        assert a.headers["etag"] != b.headers["etag"]
        assert "max-age" in a.headers["cache-control"] and a.headers["last-modified"]
        fresh = await client.get(
            CARD, headers={"Host": "a.example.com", "If-None-Match": a.headers["etag"]}
        )
        assert fresh.status_code == 304 and fresh.headers["etag"] == a.headers["etag"]
        # b's card revalidated with a's ETag is not fresh: the full card for b.
        stale = await client.get(
            CARD, headers={"Host": "b.example.com", "If-None-Match": a.headers["etag"]}
        )
        assert stale.status_code == 200 and urls(stale.json())[0] == "http://b.example.com"
        again = await client.get(CARD, headers={"Host": "a.example.com"})
        assert again.headers["etag"] == a.headers["etag"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_settings_never_derive_a_url_from_the_bind_address(host: str) -> None:
    assert Settings(a2a_host=host, a2a_auth="none").public_url is None
