"""Fallback models through `execute_run`, with the real SDKs against the fake provider servers.

One fake server speaks both wires (a Gemini request and an OpenAI request each take the next
scripted reply), so a run can start on one provider and go on with the other:

* the primary answers a first turn (a tool call), then fails in a way another model can fix
  (Gemini: 503 overloaded; OpenAI: 429 rate limited, after the retries): the same turn goes on
  with the other provider from the stored transcript (the tool result included), which also
  answers the rest of the run; `model.fallback` says from, to and why; the usage is split per
  model; the run's next run starts on the primary again. Once per direction.
* the fallback uses the run's tenant's own provider key (and another tenant, without one, does
  not get it: its fallback is not configured, so its run fails with the primary's error);
* a plan request falls back like a turn, and so does a compaction's summary request (driven by
  the offline model with a small window, as in `test_compaction.py`): the run then stays there;
* a primary that refuses connections (down) at the run's start, and one not configured at all;
* a 400 of our own making fails the run without trying the fallback;
* a context the provider says is too long, with nothing left to compact, falls back; one our own
  estimate says cannot fit falls back only to a model with a larger window;
* when every model fails, the run fails with the last error, naming the models tried.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.core.transcript import ToolCall
from app.db.engine import Database
from app.llm.registry import ModelRegistry
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.agent_settings import AgentSettings
from app.runtime.loop import execute_run
from app.runtime.tenant_models import TenantModels
from app.tools.registry import ToolRegistry
from tests.fakes import gemini_wire as g
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer, Recorded, Reply
from tests.integration import test_compaction as compaction
from tests.integration.provider_support import WIRES, Usage, Wire
from tests.integration.test_loop import events, run_row, start, transcript
from tests.integration.test_provider_keys_runs import TENANT_KEYS, deployment, key_sent, store

pytestmark = pytest.mark.timeout(60)

GEMINI, OPENAI = WIRES["gemini"], WIRES["openai"]
DIRECTIONS = [(GEMINI, OPENAI), (OPENAI, GEMINI)]
DIRECTION_IDS = ["gemini-to-openai", "openai-to-gemini"]
RETRIES = 1  # each failure is tried twice before it counts


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


def dead_url() -> str:
    """A loopback URL nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def both(server: FakeServer, *, down: str | None = None, **more: Any) -> Settings:
    """Both providers configured against `server` (the `down` one against a dead port)."""
    gemini_url = dead_url() if down == "gemini" else server.url
    openai_url = dead_url() if down == "openai" else server.url
    return GEMINI.settings(server).model_copy(
        update={
            "google_gemini_base_url": gemini_url,
            "openai_api_key": SecretStr(OPENAI.key),
            "openai_base_url": f"{openai_url}/v1",
            "model_max_retries": RETRIES,
            **more,
        }
    )


def wire_of(request: Recorded) -> str:
    """Which provider a request was meant for."""
    return "openai" if request.path.endswith("/chat/completions") else "gemini"


def with_fallbacks(primary: Wire, *fallbacks: str) -> dict[str, Any]:
    """The agent columns of a `primary` agent with these fallback models."""
    return {
        "model": primary.model,
        "settings": AgentSettings(fallback_models=fallbacks).dump(),
    }


OUTAGES: dict[str, tuple[Reply, str]] = {
    "gemini": (
        g.error(503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
        "model_unavailable_transient",
    ),
    "openai": (
        o.error(429, "Rate limit reached for requests", type_="rate_limit_error"),
        "model_rate_limited",
    ),
}


def fallback_events(evs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [d for t, d in evs if t == ev.MODEL_FALLBACK]


@pytest.mark.parametrize(("primary", "fallback"), DIRECTIONS, ids=DIRECTION_IDS)
async def test_an_outage_mid_run_goes_on_with_the_other_provider(
    queue: RunQueue, alice: Principal, server: FakeServer, primary: Wire, fallback: Wire
) -> None:
    outage, reason = OUTAGES[primary.name]
    call_a = ToolCall(id="call_a", name="write_file", args={"path": "a.txt", "content": "A"})
    call_b = ToolCall(id="call_b", name="write_file", args={"path": "b.txt", "content": "B"})
    server.script(
        primary.turn(text=("Writing a.",), calls=(call_a,), usage=Usage(input=40, output=20)),
        *[outage] * (RETRIES + 1),
        fallback.turn(text=("Now b.",), calls=(call_b,), usage=Usage(input=90, output=6)),
        fallback.answer("Wrote ", "both.", usage=Usage(input=120, output=3)),
    )
    settings = both(server)
    agent = with_fallbacks(primary, fallback.model)
    leased = await start(queue, alice, "write a.txt and b.txt", agent=agent)
    await execute_run(leased, settings=settings)

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Wrote both."}
    evs = await events(leased)
    [moved] = fallback_events(evs)
    assert moved["from"] == primary.model and moved["to"] == fallback.model
    assert moved["reason"] == reason
    assert str(outage.status) in moved["message"]
    types = [t for t, _ in evs]
    assert types.index(ev.MODEL_FALLBACK) < types.index(ev.RUN_COMPLETED)
    assert types.count(ev.MODEL_RETRY) == RETRIES

    # the transcript is whole: one message per turn, both tool results, nothing of the outage
    stored = await transcript(leased)
    assert [m.kind for m in stored] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "assistant",
    ]
    # who answered: the primary once, then (sticky) the fallback for the rest of the run
    assert [wire_of(r) for r in server.requests] == [primary.name] * (RETRIES + 2) + [
        fallback.name
    ] * 2
    handed_over = server.requests[RETRIES + 2].body.decode()
    assert "call_a" in handed_over and "a.txt" in handed_over  # the primary's turn and result

    # usage: totals as before, split by model, every usage event naming its model
    assert (run.input_tokens, run.output_tokens) == (250, 29)
    assert run.usage_by_model == {
        primary.model: {"inputTokens": 40, "outputTokens": 20},
        fallback.model: {"inputTokens": 210, "outputTokens": 9},
    }
    usage = [d for t, d in evs if t == ev.USAGE]
    assert [d["model"] for d in usage] == [primary.model, fallback.model, fallback.model]

    # the next run starts on the primary again
    server.script(primary.answer("Back.", usage=Usage(input=5, output=1)))
    again = await start(queue, alice, "again", agent=agent)
    await execute_run(again, settings=settings)
    assert (await run_row(again)).result == {"text": "Back."}
    assert wire_of(server.requests[-1]) == primary.name
    assert fallback_events(await events(again)) == []


async def test_a_primary_that_refuses_connections_falls_back_at_once(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(GEMINI.answer("From Gemini.", usage=Usage(input=7, output=2)))
    leased = await start(queue, alice, "hi", agent=with_fallbacks(OPENAI, GEMINI.model))
    await execute_run(leased, settings=both(server, down="openai"))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "From Gemini."}
    [moved] = fallback_events(await events(leased))
    assert (moved["from"], moved["to"]) == (OPENAI.model, GEMINI.model)
    assert moved["reason"] == "model_unavailable_transient"
    assert run.usage_by_model == {GEMINI.model: {"inputTokens": 7, "outputTokens": 2}}
    assert [wire_of(r) for r in server.requests] == ["gemini"]


async def test_a_partial_answer_of_the_failed_model_is_reset_before_the_fallback(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    broken = GEMINI.turn(text=("Half an ans",), cut=True)
    server.script(*[broken] * (RETRIES + 1), OPENAI.answer("Whole.", usage=Usage(4, 1)))
    leased = await start(queue, alice, "hi", agent=with_fallbacks(GEMINI, OPENAI.model))
    await execute_run(leased, settings=both(server))

    evs = await events(leased)
    assert [t for t, _ in evs][2:] == [
        ev.ASSISTANT_DELTA,
        ev.ASSISTANT_RESET,  # the first attempt's, before its retry
        ev.MODEL_RETRY,
        ev.ASSISTANT_DELTA,
        ev.ASSISTANT_RESET,  # the last attempt's, before the fallback
        ev.MODEL_FALLBACK,
        ev.ASSISTANT_DELTA,
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.RUN_COMPLETED,
    ]
    assert (await run_row(leased)).result == {"text": "Whole."}


async def test_a_primary_not_configured_here_starts_on_the_fallback(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(OPENAI.answer("From OpenAI.", usage=Usage(input=3, output=1)))
    settings = OPENAI.settings(server)  # no Gemini at all
    leased = await start(queue, alice, "hi", agent=with_fallbacks(GEMINI, OPENAI.model))
    await execute_run(leased, settings=settings)

    assert (await run_row(leased)).result == {"text": "From OpenAI."}
    [moved] = fallback_events(await events(leased))
    assert (moved["from"], moved["to"], moved["reason"]) == (
        GEMINI.model,
        OPENAI.model,
        "model_unavailable",
    )
    assert "GEMINI_API_KEY" in moved["message"]


BAD_REQUESTS: dict[str, Reply] = {
    "gemini": g.error(400, "Invalid JSON payload received. Unknown name.", "INVALID_ARGUMENT"),
    "openai": o.error(400, "Invalid value for 'tool_choice'.", type_="invalid_request_error"),
}


@pytest.mark.parametrize(("primary", "fallback"), DIRECTIONS, ids=DIRECTION_IDS)
async def test_a_bad_request_of_our_own_does_not_fall_back(
    queue: RunQueue, alice: Principal, server: FakeServer, primary: Wire, fallback: Wire
) -> None:
    server.script(BAD_REQUESTS[primary.name], fallback.answer("never", usage=Usage(1, 1)))
    leased = await start(queue, alice, "hi", agent=with_fallbacks(primary, fallback.model))
    await execute_run(leased, settings=both(server))

    run = await run_row(leased)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "model_bad_request"
    assert "models tried" not in run.error["message"]
    assert fallback_events(await events(leased)) == []
    assert [wire_of(r) for r in server.requests] == [primary.name]  # the fallback never asked


async def test_a_context_too_long_for_the_primary_falls_back(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    too_long = o.error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens.",
        code="context_length_exceeded",
    )
    server.script(too_long, GEMINI.answer("Fits here.", usage=Usage(input=9000, output=3)))
    leased = await start(
        queue, alice, "a long question", agent=with_fallbacks(OPENAI, GEMINI.model)
    )
    await execute_run(leased, settings=both(server))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Fits here."}
    [moved] = fallback_events(await events(leased))
    assert moved["reason"] == "model_context_too_long"
    assert [wire_of(r) for r in server.requests] == ["openai", "gemini"]


async def test_when_every_model_fails_the_run_fails_with_the_last_error(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    not_found = g.error(
        404, "models/gemini-2.5-flash is not found for API version v1beta", "NOT_FOUND"
    )
    server.script(not_found, *[OUTAGES["openai"][0]] * (RETRIES + 1))
    leased = await start(
        queue, alice, "hi", agent=with_fallbacks(GEMINI, OPENAI.model, "gemini-2.5-flash")
    )
    await execute_run(leased, settings=both(server))

    run = await run_row(leased)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "model_rate_limited"
    assert run.error["message"].endswith(f"(models tried in order: {GEMINI.model}, {OPENAI.model})")
    evs = await events(leased)
    assert [(d["from"], d["to"], d["reason"]) for d in fallback_events(evs)] == [
        (GEMINI.model, OPENAI.model, "model_not_found")
    ]
    assert run.usage_by_model == {}


async def test_the_fallback_uses_the_tenants_own_key(
    queue: RunQueue,
    database: Database,
    server: FakeServer,
    alice: Principal,
    mallory: Principal,
) -> None:
    # the deployment has Gemini only; alice's tenant brings its own OpenAI-compatible key
    settings = deployment(GEMINI, server, model_max_retries=RETRIES)
    await store(database, alice, "openai", TENANT_KEYS["openai"], f"{server.url}/v1")
    models = TenantModels(settings)
    outage = OUTAGES["gemini"][0]
    server.script(*[outage] * (RETRIES + 1), OPENAI.answer("Tenant's.", usage=Usage(2, 1)))
    agent = with_fallbacks(GEMINI, OPENAI.model)
    leased = await start(queue, alice, "hi", agent=agent)
    await execute_run(leased, settings=settings, models=models)
    assert (await run_row(leased)).result == {"text": "Tenant's."}
    assert key_sent(OPENAI, server.requests[-1]) == TENANT_KEYS["openai"]

    server.script(*[outage] * (RETRIES + 1))
    other = await start(queue, mallory, "hi", agent=agent)
    await execute_run(other, settings=settings, models=models)
    run = await run_row(other)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "model_unavailable_transient"
    assert fallback_events(await events(other)) == []
    assert [wire_of(r) for r in server.requests[RETRIES + 2 :]] == ["gemini"] * (RETRIES + 1)


async def test_a_plan_request_falls_back_like_a_turn(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(
        *[OUTAGES["openai"][0]] * (RETRIES + 1),
        GEMINI.answer('{"steps": [{"description": "Say hi", "tools": []}]}', usage=Usage(9, 5)),
        GEMINI.answer("Hi!", usage=Usage(11, 1)),
    )
    plan = AgentSettings(mode="plan", fallback_models=(GEMINI.model,)).dump()
    leased = await start(queue, alice, "greet", agent={"model": OPENAI.model, "settings": plan})
    await execute_run(leased, settings=both(server))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Hi!"}
    evs = await events(leased)
    [moved] = fallback_events(evs)
    assert moved["reason"] == "model_rate_limited"
    types = [t for t, _ in evs]
    assert types.index(ev.MODEL_FALLBACK) < types.index(ev.PLAN_CREATED)
    assert run.usage_by_model == {GEMINI.model: {"inputTokens": 20, "outputTokens": 6}}


async def test_a_summary_request_falls_back_and_the_run_stays_there(
    queue: RunQueue, alice: Principal
) -> None:
    await compaction.configure(queue, alice, contextWindow=2048, fallbackModels=["openai:backup"])
    primary = compaction.Scripted()
    backup = compaction.Scripted()
    backup.name = "openai:backup"
    models = compaction.registry(primary)
    models.register("openai:backup", lambda _name: backup)

    async def one(text: str) -> LeasedRun:
        leased = await compaction.claim(queue, alice, text, "s")
        await execute_run(leased, settings=compaction.SETTINGS, models=models, tools=ToolRegistry())
        return leased

    for i in range(1, 4):
        await one(compaction.filler(f"turn {i}"))
    primary.fail = frozenset({"compact"})  # the primary is down when the context needs compacting
    fourth = await one(compaction.filler("turn 4"))

    assert (await run_row(fourth)).status == "completed"
    found = await compaction.events(fourth)
    [moved] = compaction.of_type(found, ev.MODEL_FALLBACK)
    assert (moved["from"], moved["to"]) == ("offline", "openai:backup")
    assert moved["reason"] == "model_unavailable_transient"
    assert len(compaction.of_type(found, ev.CONTEXT_COMPACTED)) == 1
    assert not compaction.of_type(found, ev.CONTEXT_COMPACTION_FAILED)
    # the primary got one summary request; the backup made the summary and then the turn
    assert [r.purpose for r in primary.requests][-1] == "compact"
    assert [r.purpose for r in backup.requests][-1] == "chat" and backup.of("compact")
    (snapshot,) = await compaction.snapshots(queue.db, alice)
    assert snapshot.model == "openai:backup"
    assert set((await run_row(fourth)).usage_by_model) == {"openai:backup"}


async def test_a_context_over_our_window_falls_back_only_to_a_larger_window(
    queue: RunQueue, alice: Principal
) -> None:
    # `offline` and `openai:small` get CONTEXT_WINDOW_TOKENS (2048); `openai:gpt-4o` is 128k
    settings = Settings(_env_file=None, lease_seconds=30, context_window_tokens=2048)  # type: ignore[call-arg]
    models = ModelRegistry()
    scripted: dict[str, compaction.Scripted] = {}
    for name in ("offline", "openai:small", "openai:gpt-4o"):
        scripted[name] = compaction.Scripted()
        scripted[name].name = name
        models.register(name, lambda n: scripted[n])

    async def one(fallbacks: list[str], session: str) -> LeasedRun:
        await compaction.configure(queue, alice, fallbackModels=fallbacks)
        leased = await compaction.claim(queue, alice, compaction.filler("huge", 12_000), session)
        await execute_run(leased, settings=settings, models=models, tools=ToolRegistry())
        return leased

    big = await one(["openai:small", "openai:gpt-4o"], "a")
    assert (await run_row(big)).status == "completed"
    [moved] = compaction.of_type(await compaction.events(big), ev.MODEL_FALLBACK)
    assert (moved["from"], moved["to"], moved["reason"]) == (
        "offline",
        "openai:gpt-4o",  # openai:small is no larger: passed over
        "context_overflow",
    )
    assert scripted["offline"].requests == scripted["openai:small"].requests == []
    assert [r.purpose for r in scripted["openai:gpt-4o"].requests] == ["chat"]

    small = await one(["openai:small"], "b")
    failed = await run_row(small)
    assert failed.error is not None and failed.error["code"] == "context_overflow"
    assert compaction.of_type(await compaction.events(small), ev.MODEL_FALLBACK) == []
