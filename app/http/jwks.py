"""Bearer JWTs (OAuth2 / OpenID Connect access or ID tokens) checked against the issuer's JWKS.

`JwksCache` holds the identity provider's signing keys: fetched on first use, kept for
`max_age_s`, fetched again when a token names a key id it does not know (a key rotation), but at
most once per `min_refresh_interval_s`, so a flood of tokens with made-up key ids cannot make
this server hammer the provider. `JwtVerifier` checks one token: an asymmetric algorithm (never
`none`, never an HMAC that a public key could be abused as), a known key of a matching type, the
signature, `exp`, `nbf`, `iss` and `aud`; the principal is `sub`, the scopes `scope` or `scp`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt

from agent.outbound import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S
from app.call_context import Principal
from app.http.errors import AuthenticationUnavailableError, UnauthenticatedError

logger = logging.getLogger(__name__)

ACCEPTED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Asymmetric only: a token signed with `none` or HS* is refused before any key is looked up."""

_KEY_TYPES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
MAX_SUBJECT_CHARS = 256


class UnknownSigningKey(Exception):
    """The JWKS has no key with this id, even after a refresh."""


class JwksUnavailable(Exception):
    """The JWKS could not be fetched, and no earlier copy is at hand."""


def _key_fits(jwk: dict[str, Any], algorithm: str) -> bool:
    """The key's type (and curve) can verify `algorithm`, and its own `alg`, if any, is it."""
    if jwk.get("alg") not in (None, algorithm):
        return False
    families = _KEY_TYPES.get(str(jwk.get("kty")), ())
    if not any(algorithm.startswith(family) for family in families):
        return False
    return algorithm not in _EC_CURVES or jwk.get("crv") == _EC_CURVES[algorithm]


class JwksCache:
    """The signing keys of one JWKS URL, fetched with httpx (async) and cached."""

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_age_s: float = 3600.0,
        min_refresh_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._client = client or httpx.AsyncClient(
            timeout=timeout_s, follow_redirects=False, trust_env=False
        )
        self._owns_client = client is None
        self._max_bytes = max_bytes
        self._max_age_s = max_age_s
        self._min_refresh_interval_s = min_refresh_interval_s
        self._clock = clock
        self._keys: dict[str | None, dict[str, Any]] | None = None
        self._fetched_at = 0.0
        self._attempted_at: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> dict[str, Any]:
        """The JWK for `kid` (a token without `kid` works only with a one-key JWKS)."""
        if self._keys is None or self._clock() - self._fetched_at >= self._max_age_s:
            await self._refresh()
        found = self._lookup(kid)
        if found is None and await self._refresh():
            found = self._lookup(kid)
        if found is None:
            raise UnknownSigningKey(f"no signing key {kid!r} in the JWKS")
        return found

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        keys = self._keys or {}
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        return keys.get(kid) if kid is not None else None

    async def _refresh(self) -> bool:
        """Fetch the JWKS unless another fetch was attempted too recently; True if it was fetched.

        Fetches are serialized: tokens that arrive together with a new key id cause one fetch.
        """
        async with self._lock:
            now = self._clock()
            if (
                self._attempted_at is not None
                and now - self._attempted_at < self._min_refresh_interval_s
            ):
                if self._keys is None:
                    raise JwksUnavailable("the JWKS could not be fetched; retrying shortly")
                return False
            self._attempted_at = now
            try:
                keys = await self._fetch()
            except JwksUnavailable:
                if self._keys is None:
                    raise
                logger.warning("url=<%s> | JWKS refresh failed; keeping the keys we have", self.url)
                return False
            self._keys, self._fetched_at = keys, now
            return True

    async def _fetch(self) -> dict[str | None, dict[str, Any]]:
        try:
            async with self._client.stream("GET", self.url) as response:
                if response.status_code != 200:
                    raise JwksUnavailable(f"the JWKS answered HTTP {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > self._max_bytes:
                        raise JwksUnavailable(f"the JWKS is larger than {self._max_bytes} bytes")
            document = json.loads(body)
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("url=<%s> | JWKS fetch failed: %s", self.url, type(exc).__name__)
            raise JwksUnavailable(f"the JWKS could not be fetched: {type(exc).__name__}") from exc
        raw_keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(raw_keys, list):
            raise JwksUnavailable("the JWKS has no `keys` list")
        keys: dict[str | None, dict[str, Any]] = {}
        for jwk in raw_keys:
            if (
                isinstance(jwk, dict)
                and jwk.get("kty") in _KEY_TYPES
                and jwk.get("use") in (None, "sig")
            ):
                kid = jwk.get("kid")
                keys[kid if isinstance(kid, str) else None] = jwk
        logger.info("url=<%s>, keys=<%d> | JWKS fetched", self.url, len(keys))
        return keys

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()


class JwtVerifier:
    """Checks bearer JWTs of one issuer and audience; the principal is the token's `sub`."""

    def __init__(
        self, jwks: JwksCache, *, issuer: str, audience: str, leeway_s: float = 30.0
    ) -> None:
        self.jwks = jwks
        self.issuer = issuer
        self.audience = audience
        self._leeway_s = leeway_s

    async def verify(self, token: str) -> Principal:
        """The token's principal, or UnauthenticatedError (401, `invalid_token`) saying what is
        wrong without echoing the token; AuthenticationUnavailableError if no keys can be had."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as exc:
            raise _invalid("The bearer token is not a valid API key or JWT") from exc
        algorithm = header.get("alg")
        if algorithm not in ACCEPTED_ALGORITHMS:
            raise _invalid("The token's signing algorithm is not accepted")
        kid = header.get("kid")
        try:
            jwk = await self.jwks.key(kid if isinstance(kid, str) else None)
        except UnknownSigningKey as exc:
            raise _invalid("The token's signing key is not known") from exc
        except JwksUnavailable as exc:
            raise AuthenticationUnavailableError() from exc
        if not _key_fits(jwk, algorithm):
            raise _invalid("The token's algorithm does not match its signing key")
        try:
            key = jwt.PyJWK(jwk, algorithm=algorithm)
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _invalid("The token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise _invalid("The token is not valid yet") from exc
        except jwt.InvalidAudienceError as exc:
            raise _invalid("The token is not meant for this server (audience)") from exc
        except jwt.InvalidIssuerError as exc:
            raise _invalid("The token is not from the accepted issuer") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise _invalid(f"The token has no {exc.claim!r} claim") from exc
        except jwt.InvalidSignatureError as exc:
            raise _invalid("The token's signature is not valid") from exc
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise _invalid("The bearer token is not valid") from exc
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise _invalid("The token's subject is not valid")
        return Principal(id=subject, scheme="jwt", scopes=_scopes(claims))


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    """RFC 8693 / 9068 `scope` (space-separated), else Azure/Okta-style `scp` (list or string)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def _invalid(message: str) -> UnauthenticatedError:
    return UnauthenticatedError(message, bearer_error="invalid_token")
