"""A local Supabase-like JWKS endpoint and signing keys generated in the test.

`JwksServer` serves `{"keys": [...]}` at `/auth/v1/.well-known/jwks.json` on 127.0.0.1 (any path,
in fact), counts requests, and can be taken down (`down = True`: every request answers 503) or
slowed (`delay`). `TestKey` is a fresh key pair (ES256, RS256 or EdDSA) that signs tokens like
Supabase's and publishes its public JWK.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

JWKS_PATH = "/auth/v1/.well-known/jwks.json"
AUDIENCE = "authenticated"


@dataclass
class TestKey:
    """A private key, its `kid`, and the algorithm it signs with."""

    __test__ = False  # not a pytest test class

    algorithm: str
    private: Any
    kid: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def generate(cls, algorithm: str) -> TestKey:
        """A new key for `algorithm` (ES256, RS256 or EdDSA)."""
        if algorithm == "ES256":
            return cls(algorithm, ec.generate_private_key(ec.SECP256R1()))
        if algorithm == "RS256":
            return cls(algorithm, rsa.generate_private_key(public_exponent=65537, key_size=2048))
        if algorithm == "EdDSA":
            return cls(algorithm, ed25519.Ed25519PrivateKey.generate())
        raise ValueError(algorithm)

    def public_jwk(self, *, with_alg: bool = True, **overrides: Any) -> dict[str, Any]:
        """The public JWK as Supabase publishes it (`kid`, `alg`, `use`, `key_ops`)."""
        codec = {"ES256": ECAlgorithm, "RS256": RSAAlgorithm, "EdDSA": OKPAlgorithm}
        jwk: dict[str, Any] = codec[self.algorithm].to_jwk(self.private.public_key(), as_dict=True)
        jwk.update({"kid": self.kid, "use": "sig", "key_ops": ["verify"]})
        if with_alg:
            jwk["alg"] = self.algorithm
        jwk.update(overrides)
        return jwk

    def public_pem(self) -> bytes:
        """The public key in PEM (what an algorithm-confusion attacker would use as HMAC key)."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def sign(
        self, claims: dict[str, Any], *, kid: str | None = None, algorithm: str | None = None
    ) -> str:
        """A token signed with this key (header `kid` defaults to this key's)."""
        return jwt.encode(
            claims,
            self.private,
            algorithm=algorithm or self.algorithm,
            headers={"kid": kid if kid is not None else self.kid},
        )


def supabase_claims(issuer: str, **overrides: Any) -> dict[str, Any]:
    """Claims like a Supabase access token's (`None` drops a claim)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": "alice",
        "aud": AUDIENCE,
        "exp": now + 600,
        "iat": now,
        "role": "authenticated",
        "app_metadata": {"provider": "email", "tenant_id": "acme"},
        "session_id": str(uuid.uuid4()),
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


class JwksServer:
    """A JWKS over HTTP/1.1 on 127.0.0.1 (run inside the test's event loop)."""

    def __init__(self, keys: list[TestKey] | None = None) -> None:
        self.jwks: dict[str, Any] = {"keys": [k.public_jwk() for k in keys or []]}
        self.requests = 0
        self.down = False
        self.delay = 0.0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """The server's base URL (what SUPABASE_URL would be)."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def jwks_url(self) -> str:
        """Where the keys are served."""
        return self.url + JWKS_PATH

    @property
    def issuer(self) -> str:
        """The `iss` of tokens when SUPABASE_URL is this server."""
        return self.url + "/auth/v1"

    def publish(self, *keys: TestKey) -> None:
        """Serve exactly these keys from now on."""
        self.jwks = {"keys": [k.public_jwk() for k in keys]}

    async def __aenter__(self) -> JwksServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            status, body = (
                (503, b'{"message":"down"}') if self.down else (200, json.dumps(self.jwks).encode())
            )
            reason = "OK" if status == 200 else "Service Unavailable"
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
