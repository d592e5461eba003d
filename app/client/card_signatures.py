"""Checking an agent card's signatures (A2A 1.0, section 8.4): the `a2a card` verdict, and what a
remote-agent tool with `require_signed_card` insists on.

A signature is a JWS whose payload is the card's canonical form (app.client.card_canonical, the
bytes the official SDK's signer and verifier use) and whose protected header names its key: `kid`
in the key set at `jku`. One valid signature suffices. The key set is fetched only from the
card's own origin or over https: a card fetched over plain http from one host that names a key set
on another could have been swapped in transit together with the `jku` it names, and a client
should not be sent anywhere else the card likes.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from jwt import PyJWK, api_jws
from jwt.exceptions import PyJWTError
from jwt.utils import base64url_decode, base64url_encode

from app.client.card_canonical import CardFormatError, canonical_card

ALGORITHMS = frozenset(
    {"ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"}
)
"""Asymmetric algorithms only: `none` and the HMAC ones prove nothing about who signed."""
MAX_JWKS_BYTES = 1 << 20


@dataclass(frozen=True)
class CardVerdict:
    """What a card's signatures came to: verified (by `kid` with `alg`), invalid, or unsigned."""

    status: Literal["verified", "invalid", "unsigned"]
    kid: str | None = None
    alg: str | None = None
    reason: str = ""

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    def __str__(self) -> str:
        if self.status == "verified":
            return f"signature verified (kid={self.kid}, alg={self.alg})"
        if self.status == "invalid":
            return f"signature INVALID: {self.reason}"
        return "unsigned"


class _Refused(Exception):
    """One signature does not verify: says why."""


async def verify_card(
    http: httpx.AsyncClient, card: dict[str, Any], *, card_url: str
) -> CardVerdict:
    """Check `card` (fetched from `card_url`) against the key sets its signatures name."""
    signatures = card.get("signatures")
    if not signatures:
        return CardVerdict("unsigned")
    if not isinstance(signatures, list):
        return CardVerdict("invalid", reason="`signatures` is not a list")
    try:
        payload = base64url_encode(canonical_card(card)).decode()
    except CardFormatError as exc:
        return CardVerdict("invalid", reason=f"not a card an A2A 1.0 parser reads: {exc}")
    key_sets: dict[str, list[dict[str, Any]]] = {}
    reasons = []
    for signature in signatures:
        try:
            kid, alg = await _verify(http, signature, payload, card_url, key_sets)
        except _Refused as exc:
            reasons.append(str(exc))
            continue
        return CardVerdict("verified", kid=kid, alg=alg)
    return CardVerdict("invalid", reason="; ".join(reasons))


async def _verify(
    http: httpx.AsyncClient,
    signature: Any,
    payload: str,
    card_url: str,
    key_sets: dict[str, list[dict[str, Any]]],
) -> tuple[str, str]:
    protected = signature.get("protected") if isinstance(signature, dict) else None
    signed = signature.get("signature") if isinstance(signature, dict) else None
    if not isinstance(protected, str) or not isinstance(signed, str):
        raise _Refused("a signature without `protected` and `signature`")
    try:
        header = json.loads(base64url_decode(protected))
    except (binascii.Error, ValueError):
        raise _Refused("a signature whose protected header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise _Refused("a signature whose protected header is not an object")
    alg, kid, jku = header.get("alg"), header.get("kid"), header.get("jku")
    if alg not in ALGORITHMS:
        raise _Refused(f"alg {alg!r} is not accepted")
    if not isinstance(kid, str) or not isinstance(jku, str):
        raise _Refused("the protected header does not name its key (`kid` and `jku`)")
    if jku not in key_sets:
        key_sets[jku] = await _fetch_key_set(http, jku, card_url)
    jwk = next((key for key in key_sets[jku] if key.get("kid") == kid), None)
    if jwk is None:
        raise _Refused(f"the key set {jku} has no key {kid!r}")
    try:
        api_jws.decode(f"{protected}.{payload}.{signed}", key=PyJWK(jwk), algorithms=[alg])
    except (PyJWTError, ValueError, TypeError, KeyError) as exc:  # a bad key, or a bad signature
        raise _Refused(f"the signature by {kid!r} does not match the card ({exc})") from exc
    return kid, alg


async def _fetch_key_set(http: httpx.AsyncClient, jku: str, card_url: str) -> list[dict[str, Any]]:
    """The keys of the JWKS at `jku`, if it may be fetched (the card's origin, or https)."""
    wanted, card = urlsplit(jku), urlsplit(card_url)
    same_origin = (wanted.scheme, wanted.netloc) == (card.scheme, card.netloc)
    if wanted.scheme != "https" and not same_origin:
        raise _Refused(f"jku {jku} is neither on the card's origin nor https: not fetched")
    try:
        async with http.stream("GET", jku) as response:
            if response.status_code != 200:
                raise _Refused(f"the key set {jku} answered HTTP {response.status_code}")
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise _Refused(f"the key set {jku} is over {MAX_JWKS_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise _Refused(f"cannot fetch the key set {jku}: {exc or type(exc).__name__}") from exc
    try:
        keys = json.loads(body).get("keys")
    except (ValueError, AttributeError):
        keys = None
    if not isinstance(keys, list):
        raise _Refused(f"{jku} is not a JWKS")
    return [key for key in keys if isinstance(key, dict)]
