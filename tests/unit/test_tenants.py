"""Tenants: the names a request may give, the owner they scope, and the settings that restrict them.

End to end (both bindings, isolation, rate buckets): tests/e2e/test_tenants.py."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError
from starlette.routing import Route

from app.call_context import CallContext, Principal
from app.errors import InvalidParamsError
from app.http.errors import TenantNotFoundError
from app.http.tenants import Tenants
from app.main import create_app
from app.settings import Settings
from stores.base import ANONYMOUS
from stores.tenants import (
    MAX_TENANT_LENGTH,
    ROUTE_NAMES,
    is_tenant_name,
    tenant_of,
    tenant_owner,
)

PRINCIPALS = [
    Principal(id=ANONYMOUS, scheme="none"),
    Principal(id="alice", scheme="api-key"),
    Principal(id="alice", scheme="jwt"),
    # ids a JWT `sub` may hold: separators, a tenant-like head, the anonymous name
    Principal(id="acme/jwt:alice", scheme="jwt"),
    Principal(id="a/b", scheme="api-key"),
    Principal(id="anonymous", scheme="jwt"),
    Principal(id="", scheme="jwt"),
]
TENANTS = [None, "acme", "beta", "a", "A-1.b_c~d", "x" * MAX_TENANT_LENGTH]
BAD_NAMES = ["a/b", "bad:x", " acme", "acme ", ".well-known", ".", "..", "-a", "_a", "é", "a%2F"]


def test_every_principal_within_every_tenant_is_an_owner_of_its_own() -> None:
    pairs = list(itertools.product(TENANTS, PRINCIPALS))
    owners = [tenant_owner(tenant, principal.owner) for tenant, principal in pairs]
    assert len(set(owners)) == len(pairs), "two (tenant, principal) pairs share an owner"
    for (tenant, principal), owner in zip(pairs, owners, strict=True):
        # The owner alone gives both back: a replica taking a turn over knows its tenant.
        assert tenant_of(owner) == tenant, owner
        assert owner.endswith(principal.owner), owner


def test_an_owner_outside_every_tenant_is_the_principals_own() -> None:
    for principal in PRINCIPALS:
        assert tenant_owner(None, principal.owner) == principal.owner
        assert tenant_of(principal.owner) is None, principal.owner
    assert tenant_owner("acme", "api-key:alice") == "acme/api-key:alice"


@pytest.mark.parametrize("name", [*BAD_NAMES, "", "x" * (MAX_TENANT_LENGTH + 1)])
def test_a_malformed_name_scopes_nothing(name) -> None:
    assert not is_tenant_name(name)
    with pytest.raises(ValueError, match="not a tenant name"):
        tenant_owner(name, "api-key:alice")


def test_the_call_context_owner_is_the_principal_within_the_tenant() -> None:
    alice = Principal(id="alice", scheme="api-key")
    assert CallContext(principal=alice).owner == "api-key:alice"
    assert CallContext(principal=alice, tenant="acme").owner == "acme/api-key:alice"
    assert CallContext(tenant="acme").owner == f"acme/{ANONYMOUS}"
    built = CallContext.from_request({}, principal=alice, tenant="acme")
    assert (built.tenant, built.owner) == ("acme", "acme/api-key:alice")


# ---- what a request may name ----------------------------------------------------------------


def test_no_tenant_and_the_empty_string_are_none() -> None:
    """proto3's default: a client that writes defaults out sends "", gRPC cannot tell it apart."""
    assert Tenants().check(None) is None
    assert Tenants().check("") is None
    assert Tenants(["acme"]).check("") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, "tenant must be a string"),
        (["acme"], "tenant must be a string"),
        ("x" * (MAX_TENANT_LENGTH + 1), f"longer than {MAX_TENANT_LENGTH} characters"),
        *((name, "is not a tenant name") for name in BAD_NAMES),
        *((name, "is reserved: /" + name + "/ is a route") for name in sorted(ROUTE_NAMES)),
    ],
)
def test_a_bad_tenant_is_invalid_params_naming_the_field(value, message) -> None:
    with pytest.raises(InvalidParamsError, match=message) as refused:
        Tenants().check(value)
    assert (refused.value.code, refused.value.http_status) == (-32602, 400)
    assert refused.value.metadata == {"field": "tenant"}


def test_unrestricted_any_name_is_served_restricted_only_those_and_the_cards() -> None:
    assert Tenants().check("anything-1") == "anything-1"
    restricted = Tenants(["acme", "beta"], card_tenant="main")
    assert [restricted.check(name) for name in ("acme", "beta", "main")] == ["acme", "beta", "main"]
    with pytest.raises(TenantNotFoundError, match="'gamma'") as refused:
        restricted.check("gamma")
    assert (refused.value.http_status, refused.value.reason) == (404, "TENANT_NOT_FOUND")
    # The card's tenant alone restricts nothing: it is what the card names, not what is served.
    assert Tenants(card_tenant="main").check("other") == "other"


@pytest.mark.parametrize(
    "environment",
    [
        {"A2A_TENANTS": "acme,tasks"},
        {"A2A_TENANTS": "acme, bad:name"},
        {"A2A_TENANT": "v1"},
        {"A2A_TENANT": "x" * (MAX_TENANT_LENGTH + 1)},
    ],
)
def test_settings_refuse_a_tenant_name_no_request_could_give(monkeypatch, environment) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match="tenant"):
        Settings()


def test_settings_read_the_served_tenants_as_a_list(monkeypatch) -> None:
    monkeypatch.setenv("A2A_TENANTS", "acme, beta,,")
    monkeypatch.setenv("A2A_TENANT", "acme")
    settings = Settings()
    assert (settings.a2a_tenants, settings.a2a_tenant) == (["acme", "beta"], "acme")


def test_route_names_are_exactly_the_routes_a_tenant_could_meet() -> None:
    """Every first path segment of the app's routes that is a tenant name is reserved (else
    `/{tenant}/...` could meet a route), and nothing else is."""
    app = create_app(Settings(redis_url=None, a2a_console=True))
    paths = [route.path for route in app.router.routes if isinstance(route, Route)]
    first = {path.split("/")[1] for path in paths if not path.startswith("/{")}
    assert {name for name in first if is_tenant_name(name)} == ROUTE_NAMES
