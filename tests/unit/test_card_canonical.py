"""The canonical card (app.client.card_canonical) is the official SDK's: for any card, the bytes
we sign are the bytes its verifier canonicalizes after its own parse (its card resolver's, which
maps 0.3 members, and a plain 1.0 parse when the card says nothing else in 0.3), and a card its
parser refuses we refuse too. The cards are drawn from the 1.0 schema, with what a parser drops
or maps mixed in: unknown members, nulls, empty values, `false`, proto names, 0.3 members."""

from __future__ import annotations

import copy
import string
import warnings
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from a2a.utils.signing import _canonicalize_agent_card
from google.protobuf.json_format import ParseDict, ParseError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.a2a.card import build_card, build_extended_card
from app.client.card_canonical import ONE_OF, SCHEMA, CardFormatError, canonical_card
from app.settings import Settings

TEXT = st.one_of(st.just(""), st.text(string.ascii_letters + 'é 😀\n"\\', max_size=6))
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT, st.integers(-(2**40), 2**40), st.floats(-1e6, 1e6)
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(TEXT.filter(bool), inner, max_size=3)
    ),
    max_leaves=6,
)


def value_of(kind: str, depth: int) -> st.SearchStrategy[Any]:
    if kind.startswith("["):
        return st.lists(value_of(kind[1:-1], depth), max_size=2)
    if kind.startswith("{"):
        return st.dictionaries(TEXT.filter(bool), value_of(kind[1:-1], depth), max_size=2)
    if kind == "string":
        return TEXT
    if kind in ("bool", "bool?"):
        return st.booleans()
    if kind == "struct":
        return st.dictionaries(TEXT.filter(bool), JSON, max_size=3)
    return message_of(kind, depth + 1)


def message_of(name: str, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    members = SCHEMA[name]
    if depth > 4:
        return st.just({})
    if name in ONE_OF:  # one member of the oneof, as a valid card has
        return st.sampled_from(sorted(members)).flatmap(
            lambda member: st.builds(lambda v: {member: v}, value_of(members[member], depth))
        )
    optional = {member: value_of(kind, depth) for member, kind in members.items()}
    noise = st.dictionaries(st.sampled_from(["extra", "kind", "x-note"]), JSON, max_size=1)
    return st.builds(
        lambda card, more: card | more, st.fixed_dictionaries({}, optional=optional), noise
    )


def sdk_canonical(card: dict[str, Any], *, resolver: bool) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK warns of missing required members
        parsed = (
            parse_agent_card(copy.deepcopy(card))
            if resolver
            else ParseDict(copy.deepcopy(card), AgentCard(), ignore_unknown_fields=True)
        )
        return _canonicalize_agent_card(parsed)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_of("AgentCard"))
def test_any_1_0_card_canonicalizes_as_the_sdks_parse_of_it(card: dict[str, Any]) -> None:
    ours = canonical_card(card).decode()
    assert ours == sdk_canonical(card, resolver=False)
    assert ours == sdk_canonical(card, resolver=True)


def test_0_3_members_are_mapped_as_the_sdks_resolver_maps_them() -> None:
    card = {
        "name": "Old",
        "url": "http://agent",
        "preferredTransport": "HTTP+JSON",
        "additionalInterfaces": [{"url": "http://agent/rpc", "transport": "JSONRPC"}],
        "supportsAuthenticatedExtendedCard": True,
        "security": [{"key": []}],
        "securitySchemes": {"key": {"type": "apiKey", "in": "query", "name": "k"}},
        "skills": [{"id": "s", "name": "S", "security": [{"key": ["read"]}]}],
    }
    assert canonical_card(card).decode() == sdk_canonical(card, resolver=True)


@pytest.mark.parametrize(
    "card",
    [
        {"name": 5},
        {"skills": {"id": "s"}},
        {"capabilities": {"streaming": "yes"}},
        {"securitySchemes": {"a": {"apiKeySecurityScheme": {}, "mtlsSecurityScheme": {}}}},
        {"capabilities": {"extensions": [{"params": [1]}]}},
        {"capabilities": {"streaming": "true"}},
        {"skills": [None]},
        {"securitySchemes": {"a": None}},
        {"icon_url": "a", "iconUrl": "b"},
        {"securitySchemes": {"a": {"apiKeySecurityScheme": {}, "api_key_security_scheme": {}}}},
    ],
)
def test_a_card_the_sdk_refuses_is_refused(card: dict[str, Any]) -> None:
    with pytest.raises(ParseError):
        sdk_canonical(card, resolver=False)
    with pytest.raises(CardFormatError):
        canonical_card(card)


@pytest.mark.parametrize(
    "card",
    [
        {"supported_interfaces": [{"url": "a"}], "supportedInterfaces": [{"url": "b"}]},
        {"supportedInterfaces": [{"url": "b"}], "supported_interfaces": [{"url": "a"}]},
        {"skills": [{"id": "x", "input_modes": ["a"], "inputModes": ["b"]}]},
        {"securitySchemes": {"a": {"apiKeySecurityScheme": None, "mtlsSecurityScheme": {}}}},
        {"capabilities": {"extensions": [{"params": None, "required": False}]}},
    ],
)
def test_proto_names_and_nulls_are_read_as_the_sdk_reads_them(card: dict[str, Any]) -> None:
    assert canonical_card(card).decode() == sdk_canonical(card, resolver=False)


@pytest.mark.parametrize("auth", [{}, {"a2a_api_keys": "alice:k"}, {"a2a_jwt_jwks_url": "j"}])
def test_our_cards_say_the_same_in_both_generations(auth: dict[str, str]) -> None:
    """The 0.3 members never contradict the 1.0 ones: a plain 1.0 parse and the SDK's resolver
    (which maps the 0.3 members) read the same card, with the 0.3 members or without them."""
    settings_ = Settings(
        redis_url=None,
        a2a_jwt_issuer="https://idp" if auth.get("a2a_jwt_jwks_url") else None,
        a2a_jwt_audience="me" if auth.get("a2a_jwt_jwks_url") else None,
        a2a_extended_card='{"capabilities": {"streaming": true}, "skills": []}',
        **auth,  # type: ignore[arg-type]
    )
    for build in (
        lambda v03: build_card(settings_, [], url="http://h", with_v03=v03),
        lambda v03: build_extended_card(settings_, [], "http://h", v03),
    ):
        strict, both = build(False), build(True)
        assert both != strict
        canonical = sdk_canonical(strict, resolver=False)
        assert canonical_card(both).decode() == canonical
        assert sdk_canonical(both, resolver=True) == canonical
        assert sdk_canonical(both, resolver=False) == canonical
