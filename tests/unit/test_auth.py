"""API keys, the Authenticator's header rules, the fail-closed start-up check and the card's
security declaration."""

from __future__ import annotations

import hashlib
import hmac
import pickle

import pytest
from starlette.datastructures import Headers

import app.http.auth
from app.a2a.card import build_card
from app.call_context import ANONYMOUS_PRINCIPAL, Principal
from app.http.auth import (
    ApiKeys,
    AuthConfigurationError,
    Authenticator,
    build_authenticator,
    card_security,
    check_configuration,
    is_loopback_host,
)
from app.http.errors import UnauthenticatedError
from app.settings import Settings
from tests.e2e.wire import assert_valid

ALICE_KEY = "alice-key-0123456789abcdef"
BOB_KEY = "bob-key-fedcba9876543210"
CAROL_KEY = "carol-key-hashed-only-0000"
CAROL_DIGEST = hashlib.sha256(CAROL_KEY.encode()).hexdigest()
KEYS = f"alice:{ALICE_KEY}, bob:{BOB_KEY},carol:sha256:{CAROL_DIGEST}"


@pytest.fixture
def authenticator() -> Authenticator:
    return build_authenticator(Settings(a2a_api_keys=KEYS))


async def refused(authenticator: Authenticator, headers: dict[str, str]) -> UnauthenticatedError:
    with pytest.raises(UnauthenticatedError) as caught:
        await authenticator.authenticate(Headers(headers))
    assert caught.value.http_status == 401
    assert caught.value.http_headers()["WWW-Authenticate"].startswith('Bearer realm="a2a"')
    return caught.value


# --- API keys --------------------------------------------------------------------------------


def test_plain_and_hashed_keys_name_their_principals() -> None:
    keys = ApiKeys.parse(KEYS)
    assert keys.match(ALICE_KEY) == Principal(id="alice", scheme="api-key")
    assert keys.match(BOB_KEY) == Principal(id="bob", scheme="api-key")
    assert keys.match(CAROL_KEY) == Principal(id="carol", scheme="api-key")
    assert keys.match(CAROL_DIGEST) is None  # the digest is not the key
    assert keys.match(ALICE_KEY + "x") is None
    assert keys.match("") is None
    assert keys.principals == {"alice", "bob", "carol"}


def test_a_principal_may_hold_several_keys() -> None:
    keys = ApiKeys.parse(f"alice:{ALICE_KEY},alice:{BOB_KEY}")
    assert keys.match(ALICE_KEY) == keys.match(BOB_KEY) == Principal(id="alice", scheme="api-key")


def test_no_plain_key_is_kept_in_memory() -> None:
    keys = ApiKeys.parse(KEYS)
    state = pickle.dumps(keys)
    assert ALICE_KEY.encode() not in state
    assert BOB_KEY.encode() not in state


def test_every_entry_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real_compare = hmac.compare_digest

    def recording_compare(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(app.http.auth.hmac, "compare_digest", recording_compare)
    keys = ApiKeys.parse(KEYS)
    assert keys.match(ALICE_KEY) is not None  # the first entry matches...
    assert len(calls) == 3  # ...and every entry is still compared
    calls.clear()
    assert keys.match("wrong") is None
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ("alice", "entry 1 is not `principal:key`"),
        (f"alice:{ALICE_KEY},bob:", "entry 2 is not `principal:key`"),
        (f":{ALICE_KEY}", "the principal must be"),
        (f"al ice:{ALICE_KEY}", "the principal must be"),
        ("alice:sha256:abc123", "64 hex digits"),
        (f"alice:sha256:{'z' * 64}", "64 hex digits"),
        (f"alice:{ALICE_KEY},bob:{ALICE_KEY}", "entries 1 and 2 give one key to two principals"),
        (
            f"alice:{CAROL_KEY},carol:sha256:{CAROL_DIGEST}",
            "entries 1 and 2 give one key to two principals",
        ),
        (" , ", "no entries"),
    ],
)
def test_malformed_keys_refuse_to_start_without_quoting_a_key(entries: str, problem: str) -> None:
    with pytest.raises(AuthConfigurationError, match=problem) as caught:
        build_authenticator(Settings(a2a_api_keys=entries))
    for secret in (ALICE_KEY, CAROL_KEY, CAROL_DIGEST, "abc123"):
        assert secret not in str(caught.value)


def test_the_keys_setting_is_a_secret() -> None:
    settings = Settings(a2a_api_keys=KEYS)
    assert ALICE_KEY not in repr(settings)
    assert ALICE_KEY not in str(settings.model_dump())


# --- the Authenticator: which headers, which errors --------------------------------------------


async def test_a_bearer_api_key_authenticates(authenticator: Authenticator) -> None:
    principal = await authenticator.authenticate(Headers({"Authorization": f"Bearer {ALICE_KEY}"}))
    assert principal == Principal(id="alice", scheme="api-key")
    assert principal.owner == "api-key:alice"


async def test_the_bearer_scheme_is_case_insensitive(authenticator: Authenticator) -> None:
    principal = await authenticator.authenticate(Headers({"authorization": f"bearer  {BOB_KEY} "}))
    assert principal.id == "bob"


async def test_an_x_api_key_header_authenticates(authenticator: Authenticator) -> None:
    principal = await authenticator.authenticate(Headers({"X-API-Key": CAROL_KEY}))
    assert principal == Principal(id="carol", scheme="api-key")


async def test_both_headers_naming_the_same_principal_authenticate(
    authenticator: Authenticator,
) -> None:
    headers = {"X-API-Key": ALICE_KEY, "Authorization": f"Bearer {ALICE_KEY}"}
    assert (await authenticator.authenticate(Headers(headers))).id == "alice"


async def test_no_credentials_get_a_challenge_without_an_error_code(
    authenticator: Authenticator,
) -> None:
    error = await refused(authenticator, {})
    assert error.http_headers() == {"WWW-Authenticate": 'Bearer realm="a2a"'}
    assert "X-API-Key" in error.message
    assert error.code == -32040 and error.reason == "UNAUTHENTICATED"


async def test_a_wrong_bearer_key_is_an_invalid_token(authenticator: Authenticator) -> None:
    error = await refused(authenticator, {"Authorization": "Bearer not-a-key"})
    assert 'error="invalid_token"' in error.http_headers()["WWW-Authenticate"]
    assert "not-a-key" not in error.message


async def test_a_wrong_x_api_key_is_refused(authenticator: Authenticator) -> None:
    error = await refused(authenticator, {"X-API-Key": "not-a-key"})
    assert "not-a-key" not in error.message


async def test_a_valid_key_does_not_excuse_an_invalid_one(authenticator: Authenticator) -> None:
    await refused(authenticator, {"X-API-Key": "not-a-key", "Authorization": f"Bearer {ALICE_KEY}"})
    await refused(authenticator, {"X-API-Key": ALICE_KEY, "Authorization": "Bearer not-a-key"})


async def test_credentials_naming_two_principals_are_refused(authenticator: Authenticator) -> None:
    error = await refused(
        authenticator, {"X-API-Key": ALICE_KEY, "Authorization": f"Bearer {BOB_KEY}"}
    )
    assert 'error="invalid_request"' in error.http_headers()["WWW-Authenticate"]


@pytest.mark.parametrize(
    "value", [f"Basic {ALICE_KEY}", ALICE_KEY, "Bearer", "Bearer ", f"Bearer {ALICE_KEY} extra"]
)
async def test_a_malformed_authorization_header_is_refused(
    authenticator: Authenticator, value: str
) -> None:
    error = await refused(authenticator, {"Authorization": value})
    assert error.bearer_error == "invalid_request"


async def test_with_authentication_off_everyone_is_anonymous() -> None:
    authenticator = build_authenticator(Settings())
    assert not authenticator.required
    for headers in ({}, {"Authorization": "Bearer whatever"}, {"X-API-Key": "x"}):
        assert await authenticator.authenticate(Headers(headers)) == ANONYMOUS_PRINCIPAL


def test_the_description_names_schemes_not_keys() -> None:
    text = build_authenticator(Settings(a2a_api_keys=KEYS)).describe()
    assert text == "authentication=<api-keys (3 principals)>"
    assert build_authenticator(Settings()).describe() == "authentication=<none>"


# --- fail closed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)
    check_configuration(Settings(a2a_host=host))  # no authentication needed


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "", "10.0.0.5", "192.168.1.10", "example.com", "::ffff:10.0.0.1"]
)
def test_a_non_loopback_bind_without_authentication_refuses_to_start(host: str) -> None:
    assert not is_loopback_host(host)
    with pytest.raises(AuthConfigurationError) as caught:
        build_authenticator(Settings(a2a_host=host))
    message = str(caught.value)
    assert "without authentication" in message
    for how in ("A2A_API_KEYS", "A2A_JWT_JWKS_URL", "A2A_AUTH=none"):
        assert how in message


def test_a_non_loopback_bind_starts_with_keys_or_an_explicit_none() -> None:
    assert build_authenticator(Settings(a2a_host="0.0.0.0", a2a_api_keys=KEYS)).required
    assert not build_authenticator(Settings(a2a_host="0.0.0.0", a2a_auth="none")).required
    jwt_settings = Settings(
        a2a_host="0.0.0.0",
        a2a_jwt_jwks_url="http://127.0.0.1:1/jwks.json",
        a2a_jwt_issuer="https://idp.example.test",
        a2a_jwt_audience="agents",
    )
    check_configuration(jwt_settings)


@pytest.mark.parametrize("missing", ["a2a_jwt_issuer", "a2a_jwt_audience"])
def test_a_jwks_without_issuer_and_audience_refuses_to_start(missing: str) -> None:
    values = {
        "a2a_jwt_jwks_url": "http://127.0.0.1:1/jwks.json",
        "a2a_jwt_issuer": "https://idp.example.test",
        "a2a_jwt_audience": "agents",
    }
    del values[missing]
    with pytest.raises(AuthConfigurationError, match="A2A_JWT_ISSUER and A2A_JWT_AUDIENCE"):
        check_configuration(Settings(**values))


def test_auth_none_with_credentials_is_a_contradiction() -> None:
    with pytest.raises(AuthConfigurationError, match="contradicts"):
        check_configuration(Settings(a2a_auth="none", a2a_api_keys=KEYS))


def test_a2a_auth_is_a_closed_set() -> None:
    with pytest.raises(ValueError, match="auto"):
        Settings(a2a_auth="off")


# --- the card says what is enforced ------------------------------------------------------------


def card_for(settings: Settings) -> dict:
    card = {**build_card(settings, [], url="http://localhost"), **card_security(settings)}
    assert_valid("agent_card", card)
    return card


def test_no_authentication_declares_no_security() -> None:
    card = card_for(Settings())
    assert "securitySchemes" not in card and "securityRequirements" not in card
    assert card_security(Settings(a2a_host="0.0.0.0", a2a_auth="none")) == {}


def test_api_keys_declare_the_header_and_the_bearer_scheme() -> None:
    card = card_for(Settings(a2a_api_keys=KEYS))
    assert card["securitySchemes"] == {
        "apiKey": {
            "apiKeySecurityScheme": {
                "location": "header",
                "name": "X-API-Key",
                "description": "An API key issued by the operator of this agent.",
            }
        },
        "bearer": {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "An API key, in `Authorization: Bearer`.",
            }
        },
    }
    # Alternatives: either scheme alone suffices; no scopes are required.
    assert card["securityRequirements"] == [
        {"schemes": {"apiKey": {"list": []}}},
        {"schemes": {"bearer": {"list": []}}},
    ]
    assert ALICE_KEY not in str(card) and CAROL_DIGEST not in str(card)


def test_jwts_declare_a_bearer_jwt_and_openid_connect() -> None:
    card = card_for(
        Settings(
            a2a_jwt_jwks_url="http://127.0.0.1:1/jwks.json",
            a2a_jwt_issuer="https://idp.example.test/realms/agents/",
            a2a_jwt_audience="agents",
        )
    )
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["bearerFormat"] == "JWT"
    assert card["securitySchemes"]["oidc"] == {
        "openIdConnectSecurityScheme": {
            "openIdConnectUrl": "https://idp.example.test/realms/agents/.well-known/openid-configuration",
            "description": "Access tokens from this OpenID Connect provider, as bearer JWTs.",
        }
    }
    assert "apiKey" not in card["securitySchemes"]
    assert card["securityRequirements"] == [
        {"schemes": {"bearer": {"list": []}}},
        {"schemes": {"oidc": {"list": []}}},
    ]


def test_both_schemes_share_one_bearer_entry() -> None:
    card = card_for(
        Settings(
            a2a_api_keys=KEYS,
            a2a_jwt_jwks_url="http://127.0.0.1:1/jwks.json",
            a2a_jwt_issuer="https://idp.example.test",
            a2a_jwt_audience="agents",
        )
    )
    assert set(card["securitySchemes"]) == {"apiKey", "bearer", "oidc"}
    bearer = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
    assert "bearerFormat" not in bearer
    assert (
        bearer["description"] == "An API key or a JWT from the issuer, in `Authorization: Bearer`."
    )
