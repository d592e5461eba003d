"""Signed agent cards (A2A_CARD_SIGNING_KEY) and the key set that verifies them.

Each card (the public one and the extended one) gets one JWS in `signatures` (A2A 1.0, section
8.4): protected header `alg`, `kid`, `typ: JOSE` and `jku`, the absolute URL of
`/.well-known/jwks.json` at the card's own base URL; payload (detached) the canonical card of
app.client.card_canonical, the RFC 8785 form of the card as a 1.0 parser reads it. So one
signature holds for the card with and without its 0.3 members (a 1.0 parse drops them), and a
verifier that parses before it canonicalizes (the official SDK's) gets the same bytes.

The JWKS holds the signing key's public half and A2A_CARD_SIGNING_EXTRA_JWKS (the old key, during
a rotation). A signature is made once per card and `jku` (ECDSA and EdDSA signatures would differ
at every call, and so would the card's ETag) and kept; the card endpoints cache the signed body.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from jwt import PyJWK, api_jws
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from jwt.exceptions import PyJWTError
from starlette.requests import Request
from starlette.responses import Response

from app.client.card_canonical import CardFormatError, canonical_card
from app.settings import Settings

JWKS_PATH = "/.well-known/jwks.json"
MIN_RSA_BITS = 2048
# JWK members that only a private key has: none of them may ever be served.
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
# RFC 7638: the members a key's thumbprint is taken over, per key type.
THUMBPRINT_MEMBERS = {
    "EC": ("crv", "kty", "x", "y"),
    "RSA": ("e", "kty", "n"),
    "OKP": ("crv", "kty", "x"),
}

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


class CardSigningError(Exception):
    """A signing setting that cannot be used (the server refuses to start): says which and why."""


def load_signing_key(path: str) -> tuple[SigningKey, str]:
    """The private key in the PEM file at `path` and its JWS algorithm: ES256 (EC P-256), RS256
    (RSA, at least 2048 bits) or EdDSA (Ed25519)."""
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise CardSigningError(
            f"A2A_CARD_SIGNING_KEY: cannot read {path!r}: {exc.strerror}"
        ) from exc
    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else "not a PEM private key"
        raise CardSigningError(
            f"A2A_CARD_SIGNING_KEY: {path!r} is not an unencrypted PEM private key ({why})"
        ) from exc
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise CardSigningError(
                f"A2A_CARD_SIGNING_KEY: {path!r} is an EC key on {key.curve.name};"
                " only P-256 (secp256r1, ES256) is supported"
            )
        return key, "ES256"
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise CardSigningError(
                f"A2A_CARD_SIGNING_KEY: {path!r} is a {key.key_size}-bit RSA key;"
                f" at least {MIN_RSA_BITS} bits are required"
            )
        return key, "RS256"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key, "EdDSA"
    raise CardSigningError(
        f"A2A_CARD_SIGNING_KEY: {path!r} holds a {type(key).__name__.removeprefix('_')};"
        " supported: EC P-256, RSA or Ed25519"
    )


def public_jwk(key: SigningKey, *, alg: str, kid: str | None = None) -> dict[str, Any]:
    """The public half of `key` as a JWK (`kid` defaults to its RFC 7638 thumbprint)."""
    public = key.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    jwk = {name: value for name, value in jwk.items() if name not in PRIVATE_MEMBERS}
    return jwk | {"kid": kid or thumbprint(jwk), "alg": alg, "use": "sig"}


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 over the key's required members, sorted, without whitespace."""
    members = {name: jwk[name] for name in THUMBPRINT_MEMBERS[jwk["kty"]]}
    digest = hashlib.sha256(json.dumps(members, separators=(",", ":")).encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def load_extra_jwks(value: str) -> list[dict[str, Any]]:
    """A2A_CARD_SIGNING_EXTRA_JWKS: a JWKS (`{"keys": [...]}`) inline or in a JSON file; each key
    public, with a `kid`, and one a verifier can use."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise CardSigningError(
                f"A2A_CARD_SIGNING_EXTRA_JWKS: cannot read {value!r}: {exc.strerror}"
            ) from exc
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise CardSigningError(
            'A2A_CARD_SIGNING_EXTRA_JWKS is not a JWKS (a JSON object {"keys": [...]})'
        )
    for index, jwk in enumerate(keys):
        where = f"A2A_CARD_SIGNING_EXTRA_JWKS: key {index}"
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or not jwk["kid"]:
            raise CardSigningError(f"{where} has no `kid`")
        if PRIVATE_MEMBERS & jwk.keys():
            raise CardSigningError(
                f"{where} ({jwk['kid']!r}) is a private key: list public keys only"
            )
        try:
            PyJWK(jwk)
        except PyJWTError as exc:
            raise CardSigningError(f"{where} ({jwk['kid']!r}) is not usable: {exc}") from exc
    return keys


class CardSigner:
    """Signs cards with one key; serves the key set (its public key and the extra ones)."""

    MAX_SIGNATURES = 256

    def __init__(
        self,
        key: SigningKey,
        *,
        alg: str,
        kid: str | None = None,
        extra_keys: list[dict[str, Any]] | None = None,
    ) -> None:
        self._key, self.alg = key, alg
        own = public_jwk(key, alg=alg, kid=kid)
        self.kid: str = own["kid"]
        keys = [own]
        for jwk in extra_keys or []:
            if jwk["kid"] == self.kid:
                if jwk.get("kty") != own["kty"] or thumbprint(jwk) != thumbprint(own):
                    raise CardSigningError(
                        "A2A_CARD_SIGNING_EXTRA_JWKS holds another key with the signing key's"
                        f" kid {self.kid!r}"
                    )
                continue  # the signing key itself (a JWKS saved before the rotation)
            keys.append(jwk)
        self.jwks: dict[str, Any] = {"keys": keys}
        self.jwks_body = json.dumps(self.jwks, separators=(",", ":")).encode()
        self._signatures: OrderedDict[tuple[bytes, str], dict[str, str]] = OrderedDict()

    def sign(self, card: dict[str, Any], *, base_url: str) -> dict[str, Any]:
        """`card` with its signature (`jku`: the JWKS at `base_url`), other signatures replaced."""
        jku = base_url + JWKS_PATH
        payload = canonical_card(card)
        cache_key = (hashlib.sha256(payload).digest(), jku)
        signature = self._signatures.get(cache_key)
        if signature is None:
            header = {"alg": self.alg, "kid": self.kid, "typ": "JOSE", "jku": jku}
            token = api_jws.encode(payload, self._key, algorithm=self.alg, headers=header)
            protected, _, signed = token.split(".")
            signature = {"protected": protected, "signature": signed}
            self._signatures[cache_key] = signature
            if len(self._signatures) > self.MAX_SIGNATURES:
                self._signatures.popitem(last=False)
        else:
            self._signatures.move_to_end(cache_key)
        return card | {"signatures": [signature]}

    async def jwks_endpoint(self, request: Request) -> Response:
        """GET /.well-known/jwks.json: open, like the card it verifies."""
        return Response(
            self.jwks_body,
            media_type="application/json",
            headers={"Cache-Control": "public, max-age=300"},
        )


def build_card_signer(settings: Settings) -> CardSigner | None:
    """The signer A2A_CARD_SIGNING_* configure, or None (unsigned cards); CardSigningError if a
    setting cannot be used."""
    if not settings.a2a_card_signing_key:
        if settings.a2a_card_signing_extra_jwks or settings.a2a_card_signing_kid:
            raise CardSigningError(
                "A2A_CARD_SIGNING_KID and A2A_CARD_SIGNING_EXTRA_JWKS need A2A_CARD_SIGNING_KEY"
            )
        return None
    key, alg = load_signing_key(settings.a2a_card_signing_key)
    if settings.extended_card is not None:
        try:
            canonical_card(settings.extended_card)
        except CardFormatError as exc:  # refused now, not at the first extended card call
            raise CardSigningError(
                f"A2A_EXTENDED_CARD cannot be signed: an A2A 1.0 parser refuses it ({exc})"
            ) from exc
    extra = settings.a2a_card_signing_extra_jwks
    return CardSigner(
        key,
        alg=alg,
        kid=settings.a2a_card_signing_kid,
        extra_keys=load_extra_jwks(extra) if extra else None,
    )
