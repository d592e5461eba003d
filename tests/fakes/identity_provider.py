"""A fake OAuth2 / OpenID Connect identity provider for tests: its own RSA and EC signing keys,
a JWKS served on 127.0.0.1 (http.server in a thread), and tokens signed on demand.

    with IdentityProvider() as idp:
        token = idp.token(sub="alice", scope="read write")
        ...  # point the server at idp.jwks_url, idp.issuer, idp.audience
        assert idp.jwks_requests == 1
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://idp.example.test"
AUDIENCE = "a2a-agent-server-tests"


class SigningKey:
    """One private key, its kid, algorithm and public JWK."""

    def __init__(self, algorithm: str, kid: str | None = None) -> None:
        self.algorithm = algorithm
        self.kid = kid or f"{algorithm.lower()}-{uuid.uuid4().hex[:8]}"
        if algorithm.startswith(("RS", "PS")):
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            jwk = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        else:
            curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1()}[algorithm]
            self.private = ec.generate_private_key(curve)
            jwk = json.loads(ECAlgorithm.to_jwk(self.private.public_key()))
        self.public_jwk: dict[str, Any] = {**jwk, "kid": self.kid, "use": "sig", "alg": algorithm}

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None) -> str:
        return jwt.encode(
            claims,
            self.private,
            algorithm=self.algorithm,
            headers={"kid": self.kid, **(headers or {})},
        )


class IdentityProvider:
    """Signing keys plus a JWKS endpoint on loopback; counts the JWKS requests it answers."""

    def __init__(self, *, issuer: str = ISSUER, audience: str = AUDIENCE) -> None:
        self.issuer = issuer
        self.audience = audience
        self.rsa = SigningKey("RS256")
        self.ec = SigningKey("ES256")
        self.published = [self.rsa, self.ec]
        self.status = 200
        self.body_override: bytes | None = None
        self.jwks_requests = 0
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with provider._lock:
                    provider.jwks_requests += 1
                    body = (
                        provider.body_override
                        or json.dumps(
                            {"keys": [key.public_jwk for key in provider.published]}
                        ).encode()
                    )
                    status = provider.status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/jwks.json"

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": "alice",
            "iat": now,
            "exp": now + 600,
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, key: SigningKey | None = None, **claims: Any) -> str:
        """A token signed by `key` (the RSA key by default); `claim=None` leaves a claim out."""
        return (key or self.rsa).sign(self.claims(**claims))

    def __enter__(self) -> IdentityProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
