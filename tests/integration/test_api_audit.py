"""The audit trail over the API: what runs and tool calls record, and `GET /audit` (filters,
cursor pages, JSONL export, who may read it)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from tests.integration.api_support import (
    Api,
    auth,
    error_of,
    make_settings,
    running_api,
)

AUDIT = "/api/agent-runtime/audit"
BASE = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url)) as started:
        yield started


async def listing(api: Api, user: str = "alice", **params: Any) -> dict[str, Any]:
    r = await api.client.get(AUDIT, params=params, headers=auth(user))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def all_pages(api: Api, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every event by following `nextCursor`; and how many pages that took."""
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await listing(api, **params, **({"cursor": cursor} if cursor else {}))
        pages += 1
        found += page["events"]
        cursor = page["nextCursor"]
        if cursor is None:
            return found, pages


async def seed(db: Database, tenant: str, rows: list[dict[str, Any]]) -> None:
    """Audit rows with chosen times, added as the table owner (the trail is append-only, not
    insert-only: the owner may add rows)."""
    async with db.owner() as s:
        for row in rows:
            await s.execute(
                text(
                    "INSERT INTO audit_events (tenant_id, actor_id, actor_role, action,"
                    " target_type, target_id, after, created_at) VALUES (:tenant, :actor,"
                    " 'owner', :action, :target_type, :target_id, CAST(:after AS jsonb), :at)"
                ),
                {"tenant": tenant, **row, "after": json.dumps({"i": row["i"]})},
            )


def seeded_rows(n: int) -> list[dict[str, Any]]:
    actions = ["run.created", "run.cancelled", "agent.updated", "tool.executed"]
    return [
        {
            "i": i,
            "actor": "alice" if i % 3 else "carol",
            "action": actions[i % 4],
            "target_type": actions[i % 4].split(".")[0],
            "target_id": f"t{i % 5}",
            "at": BASE + timedelta(seconds=i),
        }
        for i in range(n)
    ]


# ---------------------------------------------------------------------------- reading the trail


async def test_cursor_pages_cover_every_event_once_newest_first(api: Api) -> None:
    await seed(api.runtime.db, "acme", seeded_rows(237))
    await seed(api.runtime.db, "evil", seeded_rows(7))

    found, pages = await all_pages(api, limit=50)

    assert pages == 5
    assert [e["after"]["i"] for e in found] == list(range(236, -1, -1))
    ids = [e["id"] for e in found]
    assert ids == sorted(set(ids), reverse=True)
    assert {e["tenantId"] for e in found} == {"acme"}
    first = found[-1]
    assert set(first) == {
        "id",
        "tenantId",
        "actorId",
        "actorRole",
        "action",
        "targetType",
        "targetId",
        "before",
        "after",
        "requestId",
        "createdAt",
    }
    assert first["action"] == "run.created" and first["actorId"] == "carol"
    assert datetime.fromisoformat(first["createdAt"]) == BASE


async def test_a_page_ends_the_listing_exactly_when_nothing_is_left(api: Api) -> None:
    await seed(api.runtime.db, "acme", seeded_rows(10))
    page = await listing(api, limit=10)
    assert len(page["events"]) == 10 and page["nextCursor"] is None
    page = await listing(api, limit=9)
    assert len(page["events"]) == 9 and page["nextCursor"] is not None
    rest = await listing(api, limit=9, cursor=page["nextCursor"])
    assert [e["after"]["i"] for e in rest["events"]] == [0] and rest["nextCursor"] is None


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"action": "run.created"}, lambda r: r["action"] == "run.created"),
        ({"action": "run."}, lambda r: r["action"].startswith("run.")),
        ({"actor": "carol"}, lambda r: r["actor"] == "carol"),
        ({"targetType": "agent"}, lambda r: r["target_type"] == "agent"),
        (
            {"targetId": "t3", "action": "tool."},
            lambda r: r["target_id"] == "t3" and r["action"] == "tool.executed",
        ),
        ({"since": "2025-03-01T12:00:30Z"}, lambda r: r["i"] >= 30),
        ({"until": "2025-03-01T13:00:05+01:00"}, lambda r: r["i"] < 5),
        (
            {"since": "2025-03-01T12:00:10", "until": "2025-03-01T12:00:20Z"},
            lambda r: 10 <= r["i"] < 20,
        ),
    ],
)
async def test_filters(api: Api, params: dict[str, str], expected: Any) -> None:
    rows = seeded_rows(60)
    await seed(api.runtime.db, "acme", rows)
    found, _ = await all_pages(api, limit=7, **params)
    want = [r["i"] for r in reversed(rows) if expected(r)]
    assert want, "the filter must match something"
    assert [e["after"]["i"] for e in found] == want


async def test_an_action_prefix_is_literal_not_a_pattern(api: Api) -> None:
    row = seeded_rows(1)[0]
    await seed(
        api.runtime.db,
        "acme",
        [{**row, "action": "toolXrun.done"}, {**row, "action": "tool_run.done", "i": 1}],
    )
    found = (await listing(api, action="tool_run."))["events"]
    assert [e["action"] for e in found] == ["tool_run.done"]


async def test_jsonl_export_equals_the_paged_listing(api: Api) -> None:
    await seed(api.runtime.db, "acme", seeded_rows(1203))  # more than two export pages
    await seed(api.runtime.db, "evil", seeded_rows(3))
    paged, _ = await all_pages(api, limit=500, action="run.")

    r = await api.client.get(AUDIT, params={"format": "jsonl", "action": "run."}, headers=auth())

    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["content-disposition"].startswith('attachment; filename="audit-')
    assert r.headers["content-disposition"].endswith('.jsonl"')
    assert r.text.endswith("\n")
    exported = [json.loads(line) for line in r.text.splitlines()]
    assert len(exported) == 602
    assert exported == paged


async def test_an_empty_export_is_an_empty_file(api: Api) -> None:
    r = await api.client.get(AUDIT, params={"format": "jsonl"}, headers=auth())
    assert r.status_code == 200 and r.text == ""


async def test_only_admins_and_owners_read_the_trail_of_their_own_tenant(api: Api) -> None:
    await seed(api.runtime.db, "acme", seeded_rows(3))
    await seed(api.runtime.db, "evil", seeded_rows(2))
    for role in ("member", None):  # a shared tenant's user without a role is a member
        headers = auth("bob", tenant="acme", **({"role": role} if role else {}))
        for params in ({}, {"format": "jsonl"}):
            r = await api.client.get(AUDIT, params=params, headers=headers)
            assert r.status_code == 403, r.text
            assert error_of(r)["code"] == "forbidden_role"
    admin = await api.client.get(AUDIT, headers=auth("bob", tenant="acme", role="admin"))
    assert admin.status_code == 200
    newest, *seeded = admin.json()["events"]
    # bob's token went from member to admin: the trail says so (docs/roles.md, members)
    assert (newest["action"], newest["before"], newest["after"]) == (
        "member.role_changed",
        {"role": "member"},
        {"role": "admin"},
    )
    assert len(seeded) == 3
    evil = await listing(api, "mallory")
    assert {e["tenantId"] for e in evil["events"]} == {"evil"} and len(evil["events"]) == 2
    assert (await api.client.get(AUDIT)).status_code == 401


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "abc",
        "!!!!",
        "é",
        _cursor(b"a1.-5"),
        _cursor(b"a1.0"),
        _cursor(b"a1.99999999999999999999"),
        _cursor(b"a1.\xff"),
        _cursor(b"12"),
        _cursor(b"a1.\xd9\xa3"),  # an Arabic-Indic digit: isdigit() but not ours
    ],
)
async def test_a_tampered_cursor_is_a_400(api: Api, cursor: str) -> None:
    r = await api.client.get(AUDIT, params={"cursor": cursor}, headers=auth())
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["code"] == "invalid_cursor" and error["field"] == "cursor"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2025-13-01T00:00:00Z"}, "until"),
        ({"since": "2025-03-02T00:00:00Z", "until": "2025-03-01T00:00:00Z"}, "until"),
        ({"action": "Run.Created"}, "action"),
        ({"action": "run.%"}, "action"),
        ({"actor": ""}, "actor"),
        ({"targetId": "x" * 201}, "targetId"),
        ({"format": "csv"}, "format"),
    ],
)
async def test_bad_filters_are_a_422_naming_the_field(
    api: Api, params: dict[str, str], field: str
) -> None:
    r = await api.client.get(AUDIT, params=params, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


# ---------------------------------------------------------------------------- what runs record


async def run_events(api: Api, user: str = "alice") -> list[dict[str, Any]]:
    found, _ = await all_pages(api, user=user, action="run.", limit=500)
    return list(reversed(found))  # oldest first


async def test_posting_interrupting_and_cancelling_runs_is_audited(api: Api) -> None:
    message = "hello, audit — a message the trail must not copy"
    first = await api.client.post(
        "/api/agent-runtime",
        json={"message": message, "sessionKey": "audited"},
        headers={**auth(), "X-Request-Id": "req-first"},
    )
    assert first.status_code == 202, first.text
    second = await api.client.post(
        "/api/agent-runtime",
        json={"message": "again", "sessionKey": "audited", "ifBusy": "interrupt"},
        headers={**auth(), "X-Request-Id": "req-second"},
    )
    assert second.status_code == 202, second.text
    first_id, second_id = first.json()["runId"], second.json()["runId"]
    cancel = await api.client.post(
        "/api/agent-runtime/cancel",
        params={"runId": second_id},
        headers={**auth(), "X-Request-Id": "req-cancel"},
    )
    assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
    again = await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": second_id}, headers=auth()
    )
    assert again.status_code == 200  # already cancelled: nothing changed, nothing recorded

    found = await run_events(api)

    assert [(e["action"], e["targetId"], e["requestId"]) for e in found] == [
        ("run.created", first_id, "req-first"),
        ("run.created", second_id, "req-second"),
        ("run.cancelled", first_id, "req-second"),
        ("run.cancelled", second_id, "req-cancel"),
    ]
    assert {(e["actorId"], e["actorRole"], e["targetType"]) for e in found} == {
        ("alice", "owner", "run")
    }
    created = found[0]["after"]
    assert created["sessionKey"] == "audited" and created["ifBusy"] == "enqueue"
    assert created["messageLength"] == len(message)
    assert created["messageSha256"] == hashlib.sha256(message.encode()).hexdigest()
    assert message not in json.dumps(found)
    assert found[1]["after"]["ifBusy"] == "interrupt"
    assert found[2]["after"] == {
        "status": "cancelled",
        "reason": "interrupted by a new message",
        "byRunId": second_id,
    }
    assert found[3]["after"] == {"status": "cancelled", "reason": "cancelled"}
    assert await run_events(api, "mallory") == []


async def test_steered_and_collected_messages_are_audited_on_their_run(api: Api) -> None:
    first = await api.post_run("start", sessionKey="k")
    collecting = await api.post_run("a", sessionKey="k", ifBusy="collect")
    merged = await api.post_run("bb", sessionKey="k", ifBusy="collect")
    steered = await api.post_run("steer me", sessionKey="k", ifBusy="steer")
    assert (merged["status"], merged["runId"]) == ("collected", collecting["runId"])
    assert (steered["status"], steered["runId"]) == ("steered", first["runId"])

    found = await run_events(api)

    assert [
        (e["action"], e["targetId"], e["after"]["ifBusy"], e["after"]["messageLength"])
        for e in found
    ] == [
        ("run.created", first["runId"], "enqueue", 5),
        ("run.created", collecting["runId"], "collect", 1),
        ("run.collected", collecting["runId"], "collect", 2),
        ("run.steered", first["runId"], "steer", 8),
    ]


async def test_a_rejected_post_and_a_rolled_back_enqueue_leave_no_audit_row(api: Api) -> None:
    await api.post_run("busy", sessionKey="r")
    r = await api.client.post(
        "/api/agent-runtime",
        json={"message": "no", "sessionKey": "r", "ifBusy": "reject"},
        headers=auth(),
    )
    assert r.status_code == 409
    alice = Principal("alice", "acme", "owner")

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with api.runtime.db.tenant(alice) as s:
            await api.runtime.queue.enqueue_in(s, alice, message="rolled back", session_key="x")
            raise Abort

    assert [e["action"] for e in await run_events(api)] == ["run.created"]
