"""Authentication at the edge: request headers in, a `Principal` out (or a 401).

Two schemes, configured in Settings, both optional:

- API keys (`A2A_API_KEYS`): entries `principal:key`, or `principal:sha256:<hex>` so that no plain
  key need be stored. Only SHA-256 digests are kept in memory, and a presented key is compared
  with every entry by `hmac.compare_digest`, so the time taken tells nothing about the keys.
  Sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`.
- Bearer JWTs from an OAuth2 / OpenID Connect provider (`A2A_JWT_JWKS_URL`, `A2A_JWT_ISSUER`,
  `A2A_JWT_AUDIENCE`), checked in app.http.jwks.

With neither configured, every request is the anonymous principal; that is refused at start-up
on a non-loopback address unless `A2A_AUTH=none` says it is meant (`check_configuration`). The
card declares exactly the schemes enforced (`card_security`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from app.call_context import ANONYMOUS_PRINCIPAL, Principal
from app.http.errors import UnauthenticatedError
from app.http.jwks import JwksCache, JwtVerifier
from app.settings import Settings

API_KEY_HEADER = "X-API-Key"
PRINCIPAL_NAME = re.compile(r"^[A-Za-z0-9._@+-]{1,128}$")
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")
_BEARER = re.compile(r"^\s*bearer\s+(\S+)\s*$", re.IGNORECASE)

HOW_TO_CONFIGURE = (
    "set A2A_API_KEYS (comma-separated `principal:key` or `principal:sha256:<hex of the key>`),"
    " or A2A_JWT_JWKS_URL with A2A_JWT_ISSUER and A2A_JWT_AUDIENCE to accept bearer JWTs;"
    " or set A2A_AUTH=none to serve without authentication on purpose"
    " (e.g. behind a proxy that authenticates)"
)


class AuthConfigurationError(ValueError):
    """The authentication settings are unsafe or malformed (never quotes a key)."""


@dataclass(frozen=True, slots=True)
class _ApiKeyEntry:
    principal: str
    digest: bytes


class ApiKeys:
    """The configured API keys, as SHA-256 digests."""

    def __init__(self, entries: list[_ApiKeyEntry]) -> None:
        if not entries:
            raise AuthConfigurationError("A2A_API_KEYS has no entries")
        self._entries = tuple(entries)

    @classmethod
    def parse(cls, text: str) -> ApiKeys:
        entries: list[_ApiKeyEntry] = []
        seen: dict[bytes, int] = {}
        for number, raw in enumerate((item.strip() for item in text.split(",") if item.strip()), 1):
            principal, separator, key = raw.partition(":")
            if not separator or not key:
                raise AuthConfigurationError(
                    f"A2A_API_KEYS entry {number} is not `principal:key`"
                    " or `principal:sha256:<hex>`"
                )
            if not PRINCIPAL_NAME.match(principal):
                raise AuthConfigurationError(
                    f"A2A_API_KEYS entry {number}: the principal must be 1-128 letters, digits"
                    " or `._@+-`"
                )
            if key.startswith("sha256:"):
                hexdigest = key.removeprefix("sha256:")
                if not _HEX_DIGEST.match(hexdigest):
                    raise AuthConfigurationError(
                        f"A2A_API_KEYS entry {number}: `sha256:` must be followed by the 64 hex"
                        " digits of the key's SHA-256"
                    )
                digest = bytes.fromhex(hexdigest)
            else:
                digest = hashlib.sha256(key.encode()).digest()
            if digest in seen and entries[seen[digest] - 1].principal != principal:
                raise AuthConfigurationError(
                    f"A2A_API_KEYS entries {seen[digest]} and {number} give one key to two"
                    " principals"
                )
            seen.setdefault(digest, number)
            entries.append(_ApiKeyEntry(principal, digest))
        return cls(entries)

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(entry.principal for entry in self._entries)

    def match(self, presented: str) -> Principal | None:
        """The principal whose key this is, or None. Every entry is compared, whatever matches."""
        try:
            raw = presented.encode("latin-1")  # the bytes the client sent (Starlette's decoding)
        except UnicodeEncodeError:
            raw = presented.encode()
        digest = hashlib.sha256(raw).digest()
        found: str | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry.principal
        return Principal(id=found, scheme="api-key") if found is not None else None


class Authenticator:
    """Turns a request's headers into its principal; raises UnauthenticatedError (401)."""

    def __init__(self, *, api_keys: ApiKeys | None = None, jwt: JwtVerifier | None = None) -> None:
        self.api_keys = api_keys
        self.jwt = jwt

    @property
    def required(self) -> bool:
        """Whether requests must authenticate (some scheme is configured)."""
        return self.api_keys is not None or self.jwt is not None

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller. Headers are looked up in lower case (Starlette's `Headers` is
        case-insensitive). Every credential presented must be valid, and all must name the same
        principal; with authentication off, credentials are ignored."""
        if not self.required:
            return ANONYMOUS_PRINCIPAL
        found: list[Principal] = []
        api_key = headers.get("x-api-key")
        if api_key is not None:
            principal = self.api_keys.match(api_key.strip()) if self.api_keys else None
            if principal is None:
                raise UnauthenticatedError("The API key is not valid")
            found.append(principal)
        authorization = headers.get("authorization")
        if authorization is not None:
            found.append(await self._bearer(authorization))
        if not found:
            raise UnauthenticatedError(
                "Authentication required: send `Authorization: Bearer <token>`"
                + (f" or `{API_KEY_HEADER}: <key>`" if self.api_keys else "")
            )
        if len(found) > 1 and found[0] != found[1]:
            raise UnauthenticatedError(
                "The credentials name different principals", bearer_error="invalid_request"
            )
        return found[0]

    async def _bearer(self, authorization: str) -> Principal:
        match = _BEARER.match(authorization)
        if match is None:
            raise UnauthenticatedError(
                "Send credentials as `Authorization: Bearer <token>`",
                bearer_error="invalid_request",
            )
        token = match.group(1)
        if self.api_keys is not None:
            principal = self.api_keys.match(token)
            if principal is not None:
                return principal
        if self.jwt is not None:
            return await self.jwt.verify(token)
        raise UnauthenticatedError("The bearer token is not valid", bearer_error="invalid_token")

    def describe(self) -> str:
        """One line for the start-up log (no secrets)."""
        if not self.required:
            return "authentication=<none>"
        schemes = []
        if self.api_keys is not None:
            schemes.append(f"api-keys ({len(self.api_keys.principals)} principals)")
        if self.jwt is not None:
            schemes.append(f"jwt (issuer {self.jwt.issuer}, audience {self.jwt.audience})")
        return f"authentication=<{', '.join(schemes)}>"

    async def aclose(self) -> None:
        if self.jwt is not None:
            await self.jwt.jwks.aclose()


LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")


def is_loopback_host(host: str) -> bool:
    """Whether binding to `host` serves this machine only (`localhost`, 127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything; so may "" and 0.0.0.0


def check_configuration(settings: Settings) -> None:
    """Refuse to start with unsafe or contradictory authentication settings (fail closed)."""
    has_keys = settings.a2a_api_keys is not None and bool(
        settings.a2a_api_keys.get_secret_value().strip()
    )
    has_jwt = bool(settings.a2a_jwt_jwks_url)
    if settings.a2a_auth == "none":
        if has_keys or has_jwt:
            raise AuthConfigurationError(
                "A2A_AUTH=none contradicts the credentials configured"
                " (A2A_API_KEYS / A2A_JWT_JWKS_URL); unset one or the other"
            )
        return
    if has_jwt and not (settings.a2a_jwt_issuer and settings.a2a_jwt_audience):
        raise AuthConfigurationError(
            "A2A_JWT_JWKS_URL needs A2A_JWT_ISSUER and A2A_JWT_AUDIENCE: without them a token"
            " the provider issued for any other application would be accepted"
        )
    if not (has_keys or has_jwt) and not is_loopback_host(settings.a2a_host):
        raise AuthConfigurationError(
            f"refusing to serve {settings.a2a_host!r} (not a loopback address) without"
            f" authentication: {HOW_TO_CONFIGURE}"
        )


def build_authenticator(
    settings: Settings, *, http_client: httpx.AsyncClient | None = None
) -> Authenticator:
    """The authenticator the settings describe, after `check_configuration`.

    `http_client` (optional) fetches the JWKS; by default the JWKS cache owns one.
    """
    check_configuration(settings)
    if settings.a2a_auth == "none":
        return Authenticator()
    api_keys = None
    if settings.a2a_api_keys is not None and settings.a2a_api_keys.get_secret_value().strip():
        api_keys = ApiKeys.parse(settings.a2a_api_keys.get_secret_value())
    verifier = None
    if settings.a2a_jwt_jwks_url:
        assert settings.a2a_jwt_issuer and settings.a2a_jwt_audience  # check_configuration
        verifier = JwtVerifier(
            JwksCache(
                settings.a2a_jwt_jwks_url,
                client=http_client,
                timeout_s=settings.a2a_outbound_timeout_s,
                max_bytes=settings.a2a_outbound_max_response_bytes,
            ),
            issuer=settings.a2a_jwt_issuer,
            audience=settings.a2a_jwt_audience,
        )
    return Authenticator(api_keys=api_keys, jwt=verifier)


def oidc_discovery_url(issuer: str) -> str:
    """OpenID Connect Discovery 1.0 §4: the issuer's `/.well-known/openid-configuration`."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def card_security(settings: Settings) -> dict[str, Any]:
    """The card's `securitySchemes` and `securityRequirements` (A2A 1.0) for what is enforced.

    Each requirement is one alternative (any one scheme suffices); no scopes are required.
    Empty when authentication is off.
    """
    has_keys = bool(settings.a2a_api_keys and settings.a2a_api_keys.get_secret_value().strip())
    has_jwt = bool(settings.a2a_jwt_jwks_url)
    if settings.a2a_auth == "none" or not (has_keys or has_jwt):
        return {}
    schemes: dict[str, Any] = {}
    if has_keys:
        schemes["apiKey"] = {
            "apiKeySecurityScheme": {
                "location": "header",
                "name": API_KEY_HEADER,
                "description": "An API key issued by the operator of this agent.",
            }
        }
    bearer: dict[str, Any] = {
        "scheme": "Bearer",
        "description": " or ".join(
            what
            for what, present in (("An API key", has_keys), ("a JWT from the issuer", has_jwt))
            if present
        )
        + ", in `Authorization: Bearer`.",
    }
    if has_jwt and not has_keys:
        bearer["bearerFormat"] = "JWT"
    schemes["bearer"] = {"httpAuthSecurityScheme": bearer}
    if has_jwt and settings.a2a_jwt_issuer:
        schemes["oidc"] = {
            "openIdConnectSecurityScheme": {
                "openIdConnectUrl": oidc_discovery_url(settings.a2a_jwt_issuer),
                "description": "Access tokens from this OpenID Connect provider, as bearer JWTs.",
            }
        }
    return {
        "securitySchemes": schemes,
        "securityRequirements": [{"schemes": {name: {"list": []}}} for name in schemes],
    }
