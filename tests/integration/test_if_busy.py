"""`ifBusy` end to end: concurrent posts to one session through the HTTP API while two real
workers start, run (offline model: `/sleep`, a slow tool) and finish its runs; then the
invariants (`busy_support.check_invariants`): every message delivered exactly once or left in an
unstarted cancelled run, lane order kept, every tool call with one result, no 500."""

from __future__ import annotations

import asyncio
import time
from uuid import UUID

from app.auth.principal import Principal
from app.db.engine import Database
from app.runtime.inbox import SKIPPED_FOR_MESSAGE
from app.runtime.tool_records import CANCELLED_RESULT
from tests.integration.api_support import auth
from tests.integration.busy_support import (
    busy_stack,
    check_invariants,
    post,
    post_all,
    slow,
    types_of,
    user_texts,
    view,
    wait_idle,
)
from tests.integration.policy_support import wait_status

AGENTS = "/api/agent-runtime/agents"


async def _wait_event(
    database: Database, who: Principal, session: str, run_id: UUID, event_type: str
) -> None:
    deadline = time.monotonic() + 10
    while event_type not in types_of(await view(database, who, session), run_id):
        assert time.monotonic() < deadline, f"no {event_type} on {run_id}"
        await asyncio.sleep(0.05)


async def test_reject_lets_exactly_one_of_concurrent_posts_in(
    db_url: str, database: Database, alice: Principal
) -> None:
    tokens = [f"[m{i:02}]" for i in range(15)]
    async with busy_stack(db_url, database) as api:
        # the session does not exist yet: the posts also race to create it
        answers = await post_all(api, "rej", [f"/sleep 1500\n{t}" for t in tokens], "reject")
        accepted = [a for a in answers if a.status_code == 202]
        refused = [a for a in answers if a.status_code == 409]
        assert len(accepted) == 1 and len(refused) == 14, [a.status_code for a in answers]
        run_id = accepted[0].json()["runId"]
        for answer in refused:
            error = answer.json()["error"]
            assert error["code"] == "session_busy" and error["runId"] == run_id, error
            assert run_id in error["message"]
        seen = await wait_idle(database, alice, "rej")
    assert [str(r.id) for r in seen.runs] == [run_id]
    winner = next(t for t, a in zip(tokens, answers, strict=True) if a.status_code == 202)
    check_invariants(seen, [winner])


async def test_the_agents_if_busy_is_the_default(
    db_url: str, database: Database, alice: Principal
) -> None:
    async with busy_stack(db_url, database, workers=1) as api:
        agents = (await api.client.get(AGENTS, headers=auth())).json()["agents"]
        default = agents[0]
        assert default["ifBusy"] == "enqueue" and default["maxSpawnDepth"] is None
        r = await api.client.patch(
            f"{AGENTS}/{default['id']}",
            json={"ifBusy": "reject", "maxExchanges": 3},
            headers=auth(),
        )
        assert r.status_code == 200, r.text
        assert (r.json()["ifBusy"], r.json()["maxExchanges"]) == ("reject", 3)
        bad = await api.client.patch(
            f"{AGENTS}/{default['id']}", json={"ifBusy": "later"}, headers=auth()
        )
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "ifBusy"
        first = await post(api, "dflt", "/sleep 1500\n[m00]")
        assert first.status_code == 202, first.text
        second = await post(api, "dflt", "[m01]")
        assert second.status_code == 409, second.text
        assert second.json()["error"]["runId"] == first.json()["runId"]
        third = await post(api, "dflt", "[m02]", "enqueue")  # the request's mode wins
        assert third.status_code == 202 and third.json()["status"] == "queued"
        seen = await wait_idle(database, alice, "dflt")
    check_invariants(seen, ["[m00]", "[m02]"])
    assert user_texts(seen.transcript)[-1] == "[m02]"


async def test_interrupt_stops_a_running_run_within_two_seconds(
    db_url: str, database: Database, alice: Principal
) -> None:
    async with busy_stack(db_url, database, workers=1) as api:
        first = await post(api, "int2", f"{slow(8000)}\n[m00]")
        first_id = UUID(first.json()["runId"])
        await _wait_event(database, alice, "int2", first_id, "tool.started")
        answer = await post(api, "int2", "[m01]", "interrupt")
        answered_at = time.monotonic()
        assert answer.status_code == 202 and answer.json()["status"] == "queued", answer.text
        await wait_status(database, alice, first_id, {"cancelled"}, timeout=5)
        assert time.monotonic() - answered_at < 2.0  # mid-tool, on the same worker's loop
        seen = await wait_idle(database, alice, "int2")
    check_invariants(seen, ["[m00]", "[m01]"])
    assert user_texts(seen.transcript)[-1] == "[m01]"


async def test_interrupt_stops_the_running_run_and_every_queued_one(
    db_url: str, database: Database, alice: Principal
) -> None:
    tokens = [f"[m{i:02}]" for i in range(11)]
    async with busy_stack(db_url, database) as api:
        first = await post(api, "int", f"{slow(4000)}\n{slow(10)}\n{tokens[0]}")
        first_id = UUID(first.json()["runId"])
        await _wait_event(database, alice, "int", first_id, "tool.started")
        posted_at = time.monotonic()
        answers = await post_all(
            api, "int", [f"/sleep 200\n{t}" for t in tokens[1:]], "interrupt", spread=0.6
        )
        assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
        assert {a.json()["status"] for a in answers} == {"queued"}
        await wait_status(database, alice, first_id, {"cancelled"}, timeout=5)
        assert time.monotonic() - posted_at < 3.5
        seen = await wait_idle(database, alice, "int")
    check_invariants(seen, tokens)
    # the interrupted run: run.interrupted, then its calls closed, then run.cancelled
    types = types_of(seen, first_id)
    assert types.index("run.interrupted") < types.index("run.cancelled") == len(types) - 1
    assert types[-3:-1] == ["tool.failed", "tool.failed"], types
    closed = [m for m in seen.transcript if m["kind"] == "tool_result"]
    assert [m["error"] for m in closed[:2]] == [CANCELLED_RESULT] * 2
    # every run but the last was interrupted by a later one; the last one completed
    ids = [r.id for r in seen.runs]
    assert seen.runs[-1].status == "completed"
    for run in seen.runs[:-1]:
        if run.status == "cancelled":
            events = seen.events[run.id]
            interrupted = [d for t, d in events if t == "run.interrupted"]
            assert len(interrupted) == 1, events
            assert ids.index(UUID(interrupted[0]["byRunId"])) > ids.index(run.id)
            assert events[-1][0] == "run.cancelled"


async def test_steer_delivers_each_message_once_into_the_live_run_or_after_it(
    db_url: str, database: Database, alice: Principal
) -> None:
    tokens = [f"[m{i:02}]" for i in range(16)]
    async with busy_stack(db_url, database) as api:
        # the first call lasts longer than posting the first message takes, even on a loaded
        # machine: the second call is then certainly not started when the message arrives
        first = await post(api, "steer", f"{slow(3000)}\n{slow(700)}\n/sleep 300\n{tokens[0]}")
        first_id = first.json()["runId"]
        await _wait_event(database, alice, "steer", UUID(first_id), "tool.started")
        answers = await post_all(api, "steer", tokens[1:], "steer", spread=2.5)
        assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
        statuses = [a.json()["status"] for a in answers]
        assert set(statuses) <= {"steered", "queued"}
        assert any(a.json()["runId"] == first_id for a in answers), statuses
        seen = await wait_idle(database, alice, "steer")
    check_invariants(seen, tokens)
    injected = [d for t, d in seen.events[UUID(first_id)] if t == "message.injected"]
    assert injected and all(d["source"] == "user" for d in injected)
    # the call not yet started when the first message arrived was skipped, with a result
    results = [m for m in seen.transcript if m["kind"] == "tool_result"]
    assert any(m["error"] == SKIPPED_FOR_MESSAGE for m in results), results


async def test_collect_merges_messages_into_one_queued_run(
    db_url: str, database: Database, alice: Principal
) -> None:
    tokens = [f"[m{i:02}]" for i in range(9)]
    async with busy_stack(db_url, database) as api:
        first = await post(api, "coll", f"/sleep 1500\n{tokens[0]}")
        await _wait_event(database, alice, "coll", UUID(first.json()["runId"]), "run.started")
        answers = await post_all(api, "coll", tokens[1:], "collect")
        bodies = [a.json() for a in answers]
        assert {b["status"] for b in bodies} == {"collected"}, bodies
        assert len({b["runId"] for b in bodies}) == 1
        assert sorted(b["merged"] for b in bodies) == [False] + [True] * 7
        seen = await wait_idle(database, alice, "coll")
    check_invariants(seen, tokens)
    collected = seen.runs[1]
    assert sorted(collected.input["messages"]) == tokens[1:]
    assert collected.input["message"] == "\n\n".join(collected.input["messages"])
    assert len(seen.runs) == 2


async def test_a_collected_run_starts_when_its_window_ends_not_at_the_next_poll(
    db_url: str, database: Database, alice: Principal
) -> None:
    """Nothing notifies the workers when a collect window ends; an idle worker (polling every
    30 s here) must still claim the run right after it, not at its next poll."""
    async with busy_stack(db_url, database, collect_window=1.0, workers=1) as api:
        first = await post(api, "window", "/sleep 100\n[m00]")
        await _wait_event(database, alice, "window", UUID(first.json()["runId"]), "run.started")
        posted = await post(api, "window", "[m01]", "collect")
        assert posted.json()["status"] == "collected"
        began = time.monotonic()
        # the first run ends (its NOTIFY finds the window still open), then the window ends
        await wait_status(database, alice, UUID(posted.json()["runId"]), {"completed"}, timeout=8)
    assert time.monotonic() - began < 3


async def test_collect_races_with_the_claim_of_its_run(
    db_url: str, database: Database, alice: Principal
) -> None:
    """Posts spread over several windows: some merge, some find their run claimed already."""
    tokens = [f"[m{i:02}]" for i in range(16)]
    async with busy_stack(db_url, database, collect_window=0.2) as api:
        first = await post(api, "coll2", f"/sleep 500\n{tokens[0]}")
        assert first.status_code == 202
        answers = await post_all(api, "coll2", tokens[1:], "collect", spread=2.5)
        assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
        seen = await wait_idle(database, alice, "coll2")
    check_invariants(seen, tokens)
    for run in seen.runs:
        if run.input.get("collect"):
            assert run.input["message"] == "\n\n".join(run.input["messages"])


async def test_idempotent_replays_of_steer_and_collect(
    db_url: str, database: Database, alice: Principal
) -> None:
    async with busy_stack(db_url, database, workers=1) as api:
        first = await post(api, "idem", f"{slow(1500)}\n[m00]")
        await _wait_event(database, alice, "idem", UUID(first.json()["runId"]), "tool.started")
        steered = await asyncio.gather(
            *(post(api, "idem", "[m01]", "steer", key="k1") for _ in range(4))
        )
        collected = await asyncio.gather(
            *(post(api, "idem", "[m02]", "collect", key="k2") for _ in range(4))
        )
        for answers, status in ((steered, "steered"), (collected, "collected")):
            assert all(a.json() == answers[0].json() for a in answers), [a.text for a in answers]
            assert answers[0].json()["status"] == status
            assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 3
        assert steered[0].json()["runId"] == first.json()["runId"]
        seen = await wait_idle(database, alice, "idem")
    check_invariants(seen, ["[m00]", "[m01]", "[m02]"])
    assert len(seen.runs) == 2


async def test_cancel_mid_tool_stores_a_result_for_every_open_call(
    db_url: str, database: Database, alice: Principal
) -> None:
    async with busy_stack(db_url, database, workers=1) as api:
        first = await post(api, "cxl", f"{slow(5000)}\n{slow(10)}\n{slow(10)}")
        run_id = first.json()["runId"]
        await _wait_event(database, alice, "cxl", UUID(run_id), "tool.started")
        r = await api.client.post(
            "/api/agent-runtime/cancel", params={"runId": run_id}, headers=auth()
        )
        assert r.status_code == 200
        await wait_status(database, alice, UUID(run_id), {"cancelled"}, timeout=5)
        seen = await wait_idle(database, alice, "cxl")
        tools = await api.client.get(f"/api/agent-runtime/runs/{run_id}/tools", headers=auth())
    check_invariants(seen, [])
    results = [m for m in seen.transcript if m["kind"] == "tool_result"]
    assert [(m["ok"], m["error"]) for m in results] == [(False, CANCELLED_RESULT)] * 3
    assert types_of(seen, run_id)[-4:] == ["tool.failed"] * 3 + ["run.cancelled"]
    executions = tools.json()["executions"]
    assert [e["status"] for e in executions] == ["failed"]  # the one call that had started


async def test_chat_takes_if_busy_too(db_url: str, database: Database, alice: Principal) -> None:
    def chat(text: str, if_busy: str) -> dict[str, object]:
        message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
        return {"id": "chat1", "messages": [message], "ifBusy": if_busy}

    async with busy_stack(db_url, database, workers=1) as api:
        first = await post(api, "chat1", f"{slow(1500)}\n[m00]")
        await _wait_event(database, alice, "chat1", UUID(first.json()["runId"]), "tool.started")
        refused = await api.client.post(
            "/api/agent-runtime/chat", json=chat("[m01]", "reject"), headers=auth()
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["runId"] == first.json()["runId"]
        bad = await api.client.post(
            "/api/agent-runtime/chat", json=chat("[m01]", "sometimes"), headers=auth()
        )
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "ifBusy"
        async with api.stream_post(
            "/api/agent-runtime/chat", chat("[m02]", "steer"), auth()
        ) as stream:
            frames = await stream.read_to_end(wait=15)
        assert stream.status == 200
        assert f'"messageId":"{first.json()["runId"]}"' in (frames[0].data or "")
        seen = await wait_idle(database, alice, "chat1")
    check_invariants(seen, ["[m00]", "[m02]"])
    assert len(seen.runs) == 1
