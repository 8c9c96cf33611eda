"""Tenant HTTP tools called for real: a local receiver (127.0.0.1, allowed only through
WEB_ALLOWED_NETWORKS in these settings) checks each call's signature; arguments are validated
first; private addresses are refused without the allowlist; answers are capped, non-2xx
answers, redirects and timeouts are errors the model reads; secrets that no longer decrypt make
a tool unavailable, never a failed run."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tenants.crypto import Keyring
from app.tenants.provider_keys import SecretsUnavailableError
from app.tools.base import ToolContext
from app.tools.http import store
from app.tools.http.definition import HttpToolDefinition
from app.tools.http.signing import delivery_id, signature, verify
from app.tools.http.source import HttpToolSource
from app.tools.registry import ToolRegistry
from tests.integration.http_tool_support import (
    ALLOW_RECEIVER,
    Reply,
    running_receiver,
    signature_ok,
)
from tests.integration.policy_support import default_agent_id

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(50, 82))).decode()
KEYRING = Keyring.parse(f"kid1:{K1}")
TOKEN = "Bearer tenant-token-0123456789-WXYZ"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer"}, "tags": {"type": "array"}},
    "required": ["q"],
    "additionalProperties": False,
}


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "secrets_key": f"kid1:{K1}",
        "web_allowed_networks": ALLOW_RECEIVER,
        "http_tools_max_response_bytes": 2000,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


async def define(db: Database, who: Principal, url: str, **fields: Any) -> str:
    """Store a tool named `lookup` (unless `name=`); its signing secret."""
    values: dict[str, Any] = {
        "name": "lookup",
        "description": "Look it up.",
        "url": url,
        "parameters": PARAMETERS,
        "timeout_seconds": 5.0,
        "risk": "low",
        "headers": {"Authorization": TOKEN},
        **fields,
    }
    async with db.tenant(who) as s:
        _, secret = await store.put_tool(s, who, KEYRING, HttpToolDefinition(**values))
    assert secret is not None
    return secret


async def call(
    db: Database, who: Principal, conf: Settings, args: dict[str, Any], name: str = "lookup"
) -> tuple[ToolResult, uuid.UUID]:
    """Load `who`'s tools through the source, as a run does, and call `name` with `args`."""
    sourced = await HttpToolSource(conf).tools_for(db, who, None)
    assert sourced.unavailable == []
    registry = ToolRegistry(sourced.tools)
    run_id = uuid.uuid4()
    ctx = ToolContext(db=db, principal=who, session_id=uuid.uuid4(), run_id=run_id, settings=conf)
    return await registry.execute(ctx, ToolCall(id="call_1", name=name, args=args)), run_id


def documented_verify() -> Callable[..., bool]:
    """The `verify` function of docs/tools.md's Python snippet."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tools.md").read_text()
    [snippet] = [
        block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if "def verify(" in block
    ]
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)  # noqa: S102 (our own documentation)
    verify_fn: Callable[..., bool] = namespace["verify"]
    return verify_fn


async def test_a_signed_post_reaches_the_receiver(database: Database, alice: Principal) -> None:
    async with running_receiver(lookup=Reply(b'{"orders": [1, 2]}')) as receiver:
        receiver.secret = await define(database, alice, receiver.url("/lookup"))
        result, run_id = await call(database, alice, settings(), {"q": "héllo", "n": 2})

    assert result.ok and result.result == {"status": 200, "body": {"orders": [1, 2]}}
    [got] = receiver.received
    assert (got.method, got.path) == ("POST", "/lookup")
    assert json.loads(got.body) == {"q": "héllo", "n": 2}
    assert got.headers["content-type"] == "application/json"
    assert got.headers["authorization"] == TOKEN
    assert got.headers["x-agent-runtime-tool"] == "lookup"
    assert got.headers["x-agent-runtime-run"] == str(run_id)
    assert got.headers["x-agent-runtime-delivery"] == delivery_id(run_id, "call_1")
    assert receiver.verified(got)
    # the signature covers the body and the delivery id, under this tool's secret only
    assert not signature_ok(receiver.secret, got.headers, got.body.replace(b"2", b"3"))
    assert not signature_ok(
        receiver.secret, {**got.headers, "x-agent-runtime-delivery": str(uuid.uuid4())}, got.body
    )
    assert not signature_ok("arts_another-secret", got.headers, got.body)
    # the snippet docs/tools.md gives receivers agrees
    docs_verify = documented_verify()
    assert docs_verify(receiver.secret, got.headers, got.body)
    assert not docs_verify(receiver.secret, got.headers, got.body + b" ")
    assert not docs_verify("arts_another-secret", got.headers, got.body)
    # the reference `verify` agrees, and refuses a stale timestamp (a replay)
    header = got.headers["x-agent-runtime-signature"]
    delivery = got.headers["x-agent-runtime-delivery"]
    assert verify(receiver.secret, header, delivery, got.body, now=time.time())
    assert not verify(receiver.secret, header, delivery, got.body, now=time.time() + 600)
    old = signature(receiver.secret, int(time.time()) - 3600, delivery, got.body)
    assert not verify(receiver.secret, old, delivery, got.body, now=time.time())


async def test_get_sends_the_arguments_as_a_signed_query(
    database: Database, alice: Principal
) -> None:
    async with running_receiver(search=Reply(b"plain answer", content_type="text/plain")) as rx:
        rx.secret = await define(database, alice, rx.url("/search?v=1"), method="GET")
        result, _ = await call(
            database, alice, settings(), {"q": "a b&c", "n": 3, "tags": ["x", "y"]}
        )

    assert result.ok and result.result == {"status": 200, "body": "plain answer"}
    [got] = rx.received
    assert got.method == "GET" and got.body == b"" and "content-type" not in got.headers
    assert got.query == "v=1&q=a+b%26c&n=3&tags=x&tags=y"
    assert rx.verified(got)
    assert not signature_ok(rx.secret, got.headers, b"v=1&q=other&n=3&tags=x&tags=y")


async def test_arguments_are_validated_before_any_request(
    database: Database, alice: Principal
) -> None:
    async with running_receiver(lookup=Reply()) as receiver:
        await define(database, alice, receiver.url("/lookup"))
        result, _ = await call(database, alice, settings(), {"n": "two"})
    assert not result.ok
    assert result.error is not None and result.error.startswith("invalid arguments for lookup")
    assert receiver.received == []


async def test_private_addresses_are_refused_without_the_operators_allowlist(
    database: Database, alice: Principal
) -> None:
    strict = settings(web_allowed_networks=[])
    async with running_receiver(lookup=Reply()) as receiver:
        await define(database, alice, receiver.url("/lookup"))
        await define(database, alice, receiver.url("/lookup", host="localhost"), name="by_name")
        await define(database, alice, "http://169.254.169.254/latest/meta-data", name="metadata")
        result, _ = await call(database, alice, strict, {"q": "x"})
        by_name, _ = await call(database, alice, strict, {"q": "x"}, name="by_name")
        # private networks allowed by the operator: the metadata address stays refused
        lifted = settings(web_allowed_networks=[], web_allow_private_networks=True)
        metadata, _ = await call(database, alice, lifted, {"q": "x"}, name="metadata")
    assert result.error == "refused: 127.0.0.1 is a loopback address"
    assert by_name.error is not None
    assert by_name.error.startswith("refused: localhost resolves to ")
    assert metadata.error == "refused: 169.254.169.254 is the cloud metadata address"
    assert receiver.received == []


async def test_a_long_answer_is_cut_and_says_so(database: Database, alice: Principal) -> None:
    big = json.dumps({"items": ["x" * 50] * 200}).encode()
    assert len(big) > 5000
    async with running_receiver(lookup=Reply(big)) as receiver:
        await define(database, alice, receiver.url("/lookup"))
        result, _ = await call(database, alice, settings(), {"q": "x"})
    assert result.ok and result.result["truncated"] is True
    assert result.result["body"] == big[:2000].decode()  # cut JSON is returned as text
    assert "longer than 2000 bytes" in result.result["note"]


async def test_errors_redirects_and_timeouts_are_errors_the_model_reads(
    database: Database, alice: Principal
) -> None:
    replies = {
        "fail": Reply(b"  database\n on fire  " + b"!" * 2000, 503, "text/plain"),
        "moved": Reply(b"", 302, headers={"Location": "http://169.254.169.254/"}),
        "slow": Reply(delay=3.0),
    }
    async with running_receiver(**replies) as receiver:
        for path in replies:
            await define(database, alice, receiver.url(f"/{path}"), name=path, timeout_seconds=1.0)
        failed, _ = await call(database, alice, settings(), {"q": "x"}, name="fail")
        moved, _ = await call(database, alice, settings(), {"q": "x"}, name="moved")
        started = time.monotonic()
        slow, _ = await call(database, alice, settings(), {"q": "x"}, name="slow")
        elapsed = time.monotonic() - started
    base = f"http://127.0.0.1:{receiver.port}"
    assert failed.error is not None
    assert failed.error.startswith(f"fail: {base}/fail answered HTTP 503: database on fire !!!")
    assert len(failed.error) < 600
    assert moved.error == (
        f"moved: {base}/moved answered HTTP 302 (a redirect to http://169.254.169.254/, "
        "not followed)"
    )
    assert slow.error == f"timed out after 1 s calling {base}/slow"
    assert elapsed < 2.5
    assert [r.path for r in receiver.received] == ["/fail", "/moved", "/slow"]  # one each


async def test_tools_are_per_tenant_and_per_agent(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    agent = await default_agent_id(database, alice)
    await define(database, alice, "https://example.com/a", name="everyone")
    await define(database, alice, "https://example.com/b", name="only_default", agent_id=agent)
    source = HttpToolSource(settings())
    names = lambda found: sorted(t.name for t in found.tools)  # noqa: E731
    assert names(await source.tools_for(database, alice, agent)) == ["everyone", "only_default"]
    assert names(await source.tools_for(database, alice, uuid.uuid4())) == ["everyone"]
    assert names(await source.tools_for(database, alice, None)) == ["everyone"]
    # a member's view of the tenant's tools (their /tools) is the runtime's, not empty
    bob = Principal(user_id="bob", tenant_id="acme", role="member")
    assert names(await source.tools_for(database, bob, None)) == ["everyone"]
    assert names(await source.tools_for(database, mallory, agent)) == []
    [tool] = (await source.tools_for(database, alice, None)).tools
    assert (tool.group, tool.origin, tool.risk, tool.idempotent) == ("http", "http", "low", False)
    assert "0123456789" not in repr(vars(tool))  # secrets are kept out of reprs


async def test_secrets_that_do_not_decrypt_make_the_tool_unavailable(
    database: Database, alice: Principal, db_url: str
) -> None:
    await define(database, alice, "https://example.com/a", name="first")
    await define(database, alice, "https://example.com/b", name="second")
    # another key: nothing decrypts (the key id is unknown)
    found = await HttpToolSource(settings(secrets_key=f"kid2:{K2}")).tools_for(
        database, alice, None
    )
    assert found.tools == []
    assert [(u.source, u.pattern) for u in found.unavailable] == [
        ("http", "first"),
        ("http", "second"),
    ]
    assert "key id 'kid1'" in found.unavailable[0].reason
    # no SECRETS_KEY at all (DATABASE_URL set: nothing generated)
    found = await HttpToolSource(settings(secrets_key=None, database_url=db_url)).tools_for(
        database, alice, None
    )
    assert found.tools == [] and "SECRETS_KEY is not set" in found.unavailable[0].reason
    # a ciphertext moved to another row does not decrypt there; the other row still works
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE tenant_http_tools SET secret_nonce = f.secret_nonce, "
                "secret_sealed = f.secret_sealed FROM tenant_http_tools f "
                "WHERE f.name = 'first' AND tenant_http_tools.name = 'second'"
            )
        )
    found = await HttpToolSource(settings()).tools_for(database, alice, None)
    assert [t.name for t in found.tools] == ["first"]
    assert [u.pattern for u in found.unavailable] == ["second"]
    assert "moved from another row" in found.unavailable[0].reason


async def test_reencrypt_moves_every_row_to_the_current_key(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    secret = await define(database, alice, "https://example.com/a", name="first")
    await define(database, mallory, "https://example.com/b", name="second", headers={})
    rotated = Keyring.parse(f"kid2:{K2},kid1:{K1}")
    async with database.owner() as s:
        counts = await store.reencrypt_all(s, rotated)
    assert (counts.total, counts.reencrypted) == (2, 2)
    async with database.owner() as s:
        assert (await store.reencrypt_all(s, rotated)).reencrypted == 0  # idempotent
        key_ids = (
            await s.execute(
                text(
                    "SELECT secret_key_id, headers_key_id FROM tenant_http_tools ORDER BY tenant_id"
                )
            )
        ).all()
    assert [tuple(r) for r in key_ids] == [("kid2", "kid2"), ("kid2", None)]
    # the old key dropped: everything still opens under the new one alone
    found = await HttpToolSource(settings(secrets_key=f"kid2:{K2}")).tools_for(
        database, alice, None
    )
    [tool] = found.tools
    assert tool.endpoint.signing_secret == secret  # type: ignore[attr-defined]
    assert tool.endpoint.headers == {"Authorization": TOKEN}  # type: ignore[attr-defined]
    # a keyring missing the rows' key changes nothing and says which row
    async with database.owner() as s:
        with pytest.raises(SecretsUnavailableError, match="HTTP tool first"):
            await store.reencrypt_all(s, Keyring.parse(f"kid3:{K1}"))
