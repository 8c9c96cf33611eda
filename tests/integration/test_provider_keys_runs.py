"""Runs use their tenant's own provider key before the deployment's, through the real SDKs against
the fake provider servers: the key the server receives is the tenant's for that tenant and the
deployment's for another; a changed or removed key takes effect on the next run (the cached
client is dropped); a provider error quoting the key, the run's events and the logs never show it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog
from pydantic import SecretStr

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.llm import clients
from app.logging import configure_logging
from app.queue.manager import RunQueue
from app.runtime.loop import execute_run
from app.runtime.tenant_models import ENDPOINT_REFUSED, KEYS_UNAVAILABLE, TenantModels
from app.tenants.crypto import Keyring
from app.tenants.provider_keys import delete_key, put_key
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer, Recorded
from tests.integration.provider_support import WIRES, Usage, Wire
from tests.integration.test_loop import events, run_row, start

pytestmark = pytest.mark.timeout(60)

SECRETS_KEY = f"kid1:{base64.b64encode(bytes(range(32))).decode()}"
TENANT_KEYS = {
    "gemini": "AIza-acme-own-key-0123456789-abcd",
    "openai": "sk-acme-own-key-0123456789-wxyz",
}
NEW_KEYS = {
    "gemini": "AIza-acme-rotated-key-99999999-efgh",
    "openai": "sk-acme-rotated-key-999999-stuv",
}


@pytest.fixture(params=sorted(WIRES))
def provider(request: pytest.FixtureRequest) -> Wire:
    return WIRES[request.param]


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def deployment(provider: Wire, server: FakeServer, **more: Any) -> Settings:
    """The wire's settings (the deployment's key, the fake server) plus a secrets key and the
    loopback network let through for tenant base URLs."""
    return provider.settings(server).model_copy(
        update={
            "secrets_key": SecretStr(SECRETS_KEY),
            "web_allowed_networks": Settings(  # type: ignore[call-arg]
                _env_file=None, web_allowed_networks=["127.0.0.1/32"]
            ).web_allowed_networks,
            **more,
        }
    )


def base_url(provider: Wire, server: FakeServer) -> str:
    return f"{server.url}/v1" if provider.name == "openai" else server.url


def key_sent(provider: Wire, request: Recorded) -> str:
    """The API key a request carried (Gemini: `x-goog-api-key`; OpenAI: a bearer token)."""
    if provider.name == "gemini":
        return request.headers["x-goog-api-key"]
    return request.headers["authorization"].removeprefix("Bearer ")


async def store(
    database: Database, who: Principal, provider: str, key: str, url: str | None
) -> None:
    async with database.tenant(who) as s:
        await put_key(s, who, Keyring.parse(SECRETS_KEY), provider, key, url)


async def one_run(
    queue: RunQueue, who: Principal, provider: Wire, models: TenantModels, settings: Settings
) -> Any:
    leased = await start(queue, who, "hi", agent={"model": provider.model})
    await execute_run(leased, settings=settings, models=models)
    return leased


async def test_a_tenant_run_uses_its_own_key_another_the_deployments(
    queue: RunQueue,
    database: Database,
    server: FakeServer,
    provider: Wire,
    alice: Principal,
    mallory: Principal,
) -> None:
    settings = deployment(provider, server)
    models = TenantModels(settings)  # one per worker: shared by all its runs
    await store(
        database, alice, provider.name, TENANT_KEYS[provider.name], base_url(provider, server)
    )
    answers = [provider.answer(f"answer {n}", usage=Usage(input=5, output=2)) for n in range(5)]
    server.script(*answers)

    first = await one_run(queue, alice, provider, models, settings)
    assert (await run_row(first)).status == "completed"
    other = await one_run(queue, mallory, provider, models, settings)
    assert (await run_row(other)).status == "completed"
    again = await one_run(queue, alice, provider, models, settings)
    assert (await run_row(again)).status == "completed"
    sent = [key_sent(provider, r) for r in server.requests]
    tenant, deployed = TENANT_KEYS[provider.name], provider.key
    assert sent == [tenant, deployed, tenant]
    cached = models._tenants["acme"][1]
    assert "evil" not in models._tenants  # no keys: the deployment's shared registry

    # the key changes: the next run uses the new one, with a new registry (the old one dropped)
    await store(database, alice, provider.name, NEW_KEYS[provider.name], base_url(provider, server))
    await one_run(queue, alice, provider, models, settings)
    assert key_sent(provider, server.requests[-1]) == NEW_KEYS[provider.name]
    assert models._tenants["acme"][1] is not cached
    live = clients._CLIENTS[asyncio.get_running_loop()]
    assert cached._clients and all(c._key not in live for c in cached._clients)

    # removed: the tenant is back on the deployment's key
    async with database.tenant(alice) as s:
        assert await delete_key(s, alice, provider.name)
    await one_run(queue, alice, provider, models, settings)
    assert key_sent(provider, server.requests[-1]) == deployed
    assert "acme" not in models._tenants


@pytest.mark.parametrize("provider", ["openai"], indirect=True)
async def test_a_tenant_key_without_a_deployment_key_enables_the_provider(
    queue: RunQueue,
    database: Database,
    server: FakeServer,
    provider: Wire,
    alice: Principal,
    mallory: Principal,
) -> None:
    settings = deployment(provider, server, openai_api_key=None, openai_base_url=None)
    models = TenantModels(settings)
    await store(database, alice, "openai", TENANT_KEYS["openai"], base_url(provider, server))
    server.script(provider.answer("ok", usage=Usage(input=5, output=2)))
    run = await one_run(queue, alice, provider, models, settings)
    assert (await run_row(run)).result == {"text": "ok"}
    other = await one_run(queue, mallory, provider, models, settings)
    failed = await run_row(other)
    assert failed.status == "failed" and failed.error["code"] == "model_unavailable"
    assert len(server.requests) == 1


async def test_a_provider_error_quoting_the_tenant_key_is_masked_everywhere(
    queue: RunQueue,
    database: Database,
    server: FakeServer,
    provider: Wire,
    alice: Principal,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = TENANT_KEYS[provider.name]
    settings = deployment(provider, server, log_json=True, log_level="debug")
    configure_logging(settings, process="test")
    await store(database, alice, provider.name, secret, base_url(provider, server))
    message = f"API key not valid: {secret}. Please pass a valid API key."
    if provider.name == "openai":
        reply = o.error(401, message, type_="invalid_request_error", code="invalid_api_key")
    else:
        from tests.fakes import gemini_wire as g

        reply = g.error(400, message, "INVALID_ARGUMENT")
    server.script(reply)
    leased = await one_run(queue, alice, provider, TenantModels(settings), settings)
    run = await run_row(leased)
    assert run.status == "failed"
    assert secret not in json.dumps(run.error) and "***" in run.error["message"]
    assert secret not in json.dumps(await events(leased, with_states=True))
    structlog.get_logger("probe").warning("echo", detail=f"the key is {secret}")
    logged = capsys.readouterr()
    assert "the key is ***" in logged.err
    assert secret not in logged.err and secret not in logged.out


async def test_an_undecryptable_key_or_refused_endpoint_fails_the_run_clearly(
    queue: RunQueue, database: Database, server: FakeServer, alice: Principal
) -> None:
    provider = WIRES["openai"]
    secret = TENANT_KEYS["openai"]
    await store(database, alice, "openai", secret, base_url(provider, server))
    other_key = f"kid9:{base64.b64encode(bytes(32)).decode()}"
    settings = deployment(provider, server, secrets_key=SecretStr(other_key))
    run = await run_row(await one_run(queue, alice, provider, TenantModels(settings), settings))
    assert run.status == "failed" and run.error["code"] == KEYS_UNAVAILABLE
    assert "'kid1'" in run.error["message"] and secret not in json.dumps(run.error)
    # the endpoint was allowed when stored, but the deployment no longer lets loopback through
    settings = deployment(provider, server, web_allowed_networks=[])
    run = await run_row(await one_run(queue, alice, provider, TenantModels(settings), settings))
    assert run.status == "failed" and run.error["code"] == ENDPOINT_REFUSED
    assert "loopback" in run.error["message"]
    assert server.requests == []
