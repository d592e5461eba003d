"""Bearer JWTs checked against a JWKS served on 127.0.0.1 by a fake identity provider."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from starlette.datastructures import Headers

from app.call_context import Principal
from app.http.auth import Authenticator, build_authenticator
from app.http.errors import AuthenticationUnavailableError, UnauthenticatedError
from app.http.jwks import JwksCache, JwtVerifier
from app.settings import Settings
from tests.fakes.identity_provider import IdentityProvider, SigningKey


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def provider() -> Iterator[IdentityProvider]:
    with IdentityProvider() as idp:
        yield idp


@pytest.fixture
def idp(provider: IdentityProvider) -> IdentityProvider:
    """The module's provider, back to its two published keys and no failures."""
    provider.published = [provider.rsa, provider.ec]
    provider.status = 200
    provider.body_override = None
    provider.jwks_requests = 0
    return provider


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def verifier(idp: IdentityProvider, clock: FakeClock) -> AsyncIterator[JwtVerifier]:
    cache = JwksCache(idp.jwks_url, min_refresh_interval_s=10, max_age_s=3600, clock=clock)
    yield JwtVerifier(cache, issuer=idp.issuer, audience=idp.audience)
    await cache.aclose()


async def refused(verifier: JwtVerifier, token: str) -> UnauthenticatedError:
    with pytest.raises(UnauthenticatedError) as caught:
        await verifier.verify(token)
    error = caught.value
    assert error.http_status == 401
    assert error.bearer_error == "invalid_token"
    assert error.http_headers()["WWW-Authenticate"].startswith(
        'Bearer realm="a2a", error="invalid_token"'
    )
    assert token not in error.message and token not in str(error.http_headers())
    return error


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# --- accepted --------------------------------------------------------------------------------


async def test_an_rsa_signed_token_gives_its_subject_and_scopes(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    principal = await verifier.verify(idp.token(sub="alice", scope="tasks.read tasks.write"))
    assert principal == Principal(
        id="alice", scheme="jwt", scopes=frozenset({"tasks.read", "tasks.write"})
    )
    assert principal.owner == "jwt:alice"


async def test_an_ec_signed_token_with_scp_scopes(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    principal = await verifier.verify(idp.token(idp.ec, sub="svc-7", scp=["a", "b"]))
    assert principal == Principal(id="svc-7", scheme="jwt", scopes=frozenset({"a", "b"}))


async def test_an_audience_list_containing_ours_is_accepted(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    principal = await verifier.verify(idp.token(aud=["other-api", idp.audience]))
    assert principal.id == "alice"


# --- refused ---------------------------------------------------------------------------------


async def test_a_wrong_issuer_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    error = await refused(verifier, idp.token(iss="https://evil.example.test"))
    assert "issuer" in error.message


async def test_a_missing_issuer_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    await refused(verifier, idp.token(iss=None))


async def test_a_wrong_audience_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    error = await refused(verifier, idp.token(aud="some-other-api"))
    assert "audience" in error.message


async def test_a_missing_audience_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    await refused(verifier, idp.token(aud=None))


async def test_an_expired_token_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    error = await refused(verifier, idp.token(exp=int(time.time()) - 120))
    assert "expired" in error.message


async def test_a_token_without_expiry_is_refused(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    await refused(verifier, idp.token(exp=None))


async def test_a_token_not_valid_yet_is_refused(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    await refused(verifier, idp.token(nbf=int(time.time()) + 600))


async def test_a_token_without_subject_is_refused(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    await refused(verifier, idp.token(sub=None))


async def test_a_forged_signature_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    """Signed by a key of the attacker's that claims the provider's kid."""
    forger = SigningKey("RS256", kid=idp.rsa.kid)
    error = await refused(verifier, forger.sign(idp.claims()))
    assert "signature" in error.message


async def test_a_tampered_payload_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    header, _, signature = idp.token(sub="alice").split(".")
    tampered = f"{header}.{b64(idp.claims(sub='admin'))}.{signature}"
    await refused(verifier, tampered)


async def test_alg_none_is_refused(verifier: JwtVerifier, idp: IdentityProvider) -> None:
    token = f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': idp.rsa.kid})}.{b64(idp.claims())}."
    error = await refused(verifier, token)
    assert "algorithm" in error.message


async def test_hmac_signed_with_the_public_key_is_refused(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    """The classic key-confusion attack: HS256 keyed with the provider's public RSA key."""
    public_pem = idp.rsa.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": idp.rsa.kid}
    import hashlib
    import hmac

    signing_input = f"{b64(header)}.{b64(idp.claims(sub='admin'))}"
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    token = signing_input + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    await refused(verifier, token)


async def test_an_algorithm_that_does_not_match_the_key_is_refused(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    """An ES256 token naming the RSA key's kid."""
    claims = idp.claims()
    token = jwt.encode(claims, idp.ec.private, algorithm="ES256", headers={"kid": idp.rsa.kid})
    await refused(verifier, token)


async def test_a_key_is_used_only_with_its_declared_algorithm(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    """The RSA key is published for RS256: a PS256 signature by the same key is refused."""
    token = jwt.encode(
        idp.claims(), idp.rsa.private, algorithm="PS256", headers={"kid": idp.rsa.kid}
    )
    error = await refused(verifier, token)
    assert "match" in error.message


async def test_an_unknown_kid_is_refused_after_one_refresh(
    verifier: JwtVerifier, idp: IdentityProvider, clock: FakeClock
) -> None:
    await verifier.verify(idp.token())  # keys cached
    assert idp.jwks_requests == 1
    clock.now += 60
    stranger = SigningKey("RS256")
    error = await refused(verifier, stranger.sign(idp.claims()))
    assert "key" in error.message
    assert idp.jwks_requests == 2


@pytest.mark.parametrize(
    "token", ["", "not-a-jwt", "a.b.c", "a.b", "..", "eyJhbGciOiJSUzI1NiJ9..."]
)
async def test_garbage_is_refused(verifier: JwtVerifier, token: str) -> None:
    with pytest.raises(UnauthenticatedError) as caught:
        await verifier.verify(token)
    assert caught.value.bearer_error == "invalid_token"


# --- the key cache ---------------------------------------------------------------------------


async def test_keys_are_fetched_once_and_cached(
    verifier: JwtVerifier, idp: IdentityProvider
) -> None:
    for index in range(5):
        await verifier.verify(idp.token(sub=f"user-{index}"))
        await verifier.verify(idp.token(idp.ec, sub=f"user-{index}"))
    assert idp.jwks_requests == 1


async def test_a_rotated_key_is_picked_up_by_a_refresh(
    verifier: JwtVerifier, idp: IdentityProvider, clock: FakeClock
) -> None:
    await verifier.verify(idp.token())
    rotated = SigningKey("RS256")
    idp.published = [rotated, idp.ec]
    clock.now += 60
    assert (await verifier.verify(rotated.sign(idp.claims(sub="bob")))).id == "bob"
    assert idp.jwks_requests == 2


async def test_a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval(
    verifier: JwtVerifier, idp: IdentityProvider, clock: FakeClock
) -> None:
    await verifier.verify(idp.token())
    clock.now += 60
    for index in range(50):
        token = idp.rsa.sign(idp.claims(), headers={"kid": f"bogus-{index}"})
        await refused(verifier, token)
        clock.now += 0.1  # 50 tokens over 5 s: within one refresh interval
    assert idp.jwks_requests == 2  # the first fetch, then one refresh
    clock.now += 10
    await refused(verifier, idp.rsa.sign(idp.claims(), headers={"kid": "bogus-late"}))
    assert idp.jwks_requests == 3


async def test_keys_older_than_max_age_are_fetched_again(
    idp: IdentityProvider, clock: FakeClock
) -> None:
    cache = JwksCache(idp.jwks_url, max_age_s=300, clock=clock)
    verifier = JwtVerifier(cache, issuer=idp.issuer, audience=idp.audience)
    try:
        await verifier.verify(idp.token())
        idp.published = [idp.ec]  # the RSA key is withdrawn
        clock.now += 301
        await refused(verifier, idp.token())
        assert idp.jwks_requests == 2
    finally:
        await cache.aclose()


async def test_an_unreachable_jwks_is_unavailable_not_unauthenticated(
    idp: IdentityProvider, clock: FakeClock
) -> None:
    idp.status = 500
    cache = JwksCache(idp.jwks_url, clock=clock)
    verifier = JwtVerifier(cache, issuer=idp.issuer, audience=idp.audience)
    try:
        with pytest.raises(AuthenticationUnavailableError) as caught:
            await verifier.verify(idp.token())
        assert caught.value.http_status == 503
        # Retried only after the refresh interval, then it works.
        idp.status = 200
        with pytest.raises(AuthenticationUnavailableError):
            await verifier.verify(idp.token())
        assert idp.jwks_requests == 1
        clock.now += 10
        assert (await verifier.verify(idp.token())).id == "alice"
    finally:
        await cache.aclose()


async def test_a_failed_refresh_keeps_the_cached_keys(
    verifier: JwtVerifier, idp: IdentityProvider, clock: FakeClock
) -> None:
    await verifier.verify(idp.token())
    idp.status = 503
    clock.now += 4000  # past max age: a refresh is attempted and fails
    assert (await verifier.verify(idp.token(sub="bob"))).id == "bob"
    assert idp.jwks_requests == 2


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"nokeys": []}',
        b'{"keys": "x"}',
        b"[1,2]",
        b'{"keys": [' + b'{"kty":"RSA","n":"' + b"A" * 2_000_000 + b'"}]}',
    ],
)
async def test_a_malformed_or_huge_jwks_is_unavailable(
    idp: IdentityProvider, clock: FakeClock, body: bytes
) -> None:
    idp.body_override = body
    cache = JwksCache(idp.jwks_url, clock=clock, max_bytes=1_000_000)
    try:
        with pytest.raises(AuthenticationUnavailableError):
            await JwtVerifier(cache, issuer=idp.issuer, audience=idp.audience).verify(idp.token())
    finally:
        await cache.aclose()


async def test_symmetric_and_encryption_keys_in_the_jwks_are_ignored(
    idp: IdentityProvider, clock: FakeClock
) -> None:
    secret = b"0123456789abcdef0123456789abcdef"
    oct_jwk = {
        "kty": "oct",
        "kid": "shared",
        "k": base64.urlsafe_b64encode(secret).rstrip(b"=").decode(),
    }
    enc_key = SigningKey("RS256")
    idp.body_override = json.dumps(
        {"keys": [oct_jwk, {**enc_key.public_jwk, "use": "enc"}]}
    ).encode()
    cache = JwksCache(idp.jwks_url, clock=clock)
    verifier = JwtVerifier(cache, issuer=idp.issuer, audience=idp.audience)
    try:
        hs_token = jwt.encode(idp.claims(), secret, algorithm="HS256", headers={"kid": "shared"})
        await refused(verifier, hs_token)
        # An accepted algorithm naming those keys: they are not signing keys, so not known.
        rs_token = SigningKey("RS256", kid="shared").sign(idp.claims())
        assert "signing key is not known" in (await refused(verifier, rs_token)).message
        error = await refused(verifier, enc_key.sign(idp.claims()))
        assert "signing key is not known" in error.message
    finally:
        await cache.aclose()


# --- through the Authenticator, as a binding will call it --------------------------------------


@pytest.fixture
async def authenticator(idp: IdentityProvider) -> AsyncIterator[Authenticator]:
    settings = Settings(
        a2a_jwt_jwks_url=idp.jwks_url, a2a_jwt_issuer=idp.issuer, a2a_jwt_audience=idp.audience
    )
    auth = build_authenticator(settings)
    yield auth
    await auth.aclose()


async def test_the_authenticator_accepts_a_bearer_jwt(
    authenticator: Authenticator, idp: IdentityProvider
) -> None:
    headers = Headers({"Authorization": f"Bearer {idp.token(sub='carol')}"})
    assert await authenticator.authenticate(headers) == Principal(id="carol", scheme="jwt")


async def test_the_authenticator_refuses_a_bad_jwt_with_invalid_token(
    authenticator: Authenticator, idp: IdentityProvider
) -> None:
    headers = Headers({"Authorization": f"Bearer {idp.token(aud='elsewhere')}"})
    with pytest.raises(UnauthenticatedError) as caught:
        await authenticator.authenticate(headers)
    assert 'error="invalid_token"' in caught.value.http_headers()["WWW-Authenticate"]


async def test_with_only_jwts_configured_an_api_key_header_is_refused(
    authenticator: Authenticator,
) -> None:
    with pytest.raises(UnauthenticatedError):
        await authenticator.authenticate(Headers({"X-API-Key": "anything"}))


async def test_the_outbound_limits_bound_the_jwks_fetch(idp: IdentityProvider) -> None:
    """A2A_OUTBOUND_MAX_RESPONSE_BYTES caps the JWKS the server fetches: a larger one cannot be
    used (credentials cannot be checked), the same one under a larger cap verifies."""
    settings = {
        "a2a_jwt_jwks_url": idp.jwks_url,
        "a2a_jwt_issuer": idp.issuer,
        "a2a_jwt_audience": idp.audience,
    }
    small = build_authenticator(Settings(**settings, a2a_outbound_max_response_bytes=100))
    headers = {"authorization": f"Bearer {idp.token()}"}
    try:
        with pytest.raises(AuthenticationUnavailableError):
            await small.authenticate(headers)
    finally:
        await small.aclose()
    large = build_authenticator(Settings(**settings, a2a_outbound_timeout_s=2.5))
    try:
        assert (await large.authenticate(headers)).id
    finally:
        await large.aclose()
