"""Helpers for the policy and approval tests: scripted models, tools that record their calls,
policy setup, a running worker, and waiting for a run's status."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

from sqlalchemy import select

from app.agents.store import default_agent
from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import ToolCall
from app.db.engine import Database
from app.db.models import Run, RunEvent, ToolExecution
from app.llm.base import Model, ModelEvent, ModelRequest, TextDelta, ToolCallEvent, Usage
from app.llm.offline import OfflineModel
from app.llm.registry import ModelRegistry
from app.tools.approval_rules import ApprovalRules
from app.tools.base import Tool, ToolContext
from app.tools.policy import PolicyLayer
from app.tools.policy_store import put_layer
from app.tools.registry import ToolRegistry, default_tool_registry
from app.worker.worker import Worker, agent_executor


class Recording(Model):
    """The offline model, remembering the tools each request offered."""

    name = "offline"

    def __init__(self) -> None:
        self.inner = OfflineModel()
        self.offered: list[list[str]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.offered.append([t.name for t in request.tools])
        async for event in self.inner.stream(request):
            yield event


class Scripted(Model):
    """Answers turn n with `turns[n]`: a list of calls, or the final text (then: "done")."""

    name = "offline"

    def __init__(self, turns: Sequence[list[ToolCall] | str]) -> None:
        self.turns = list(turns)
        self.offered: list[list[str]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        n = len(self.offered)
        self.offered.append([t.name for t in request.tools])
        turn = self.turns[n] if n < len(self.turns) else "done"
        if isinstance(turn, str):
            yield TextDelta(turn)
        else:
            for call in turn:
                yield ToolCallEvent(call)
        yield Usage(1, 1)


def models_with(model: Model) -> ModelRegistry:
    """A model registry serving `model` as `offline`."""
    registry = ModelRegistry()
    registry.register("offline", lambda _name: model)
    return registry


class Recorder(Tool):
    """A tool that records its calls (the side effect an approval guards)."""

    description = "Record the call."
    parameters: dict[str, Any] = {"type": "object"}

    def __init__(
        self, name: str, *, group: str = "fs", risk: str = "low", owner_only: bool = False
    ) -> None:
        self.name = name
        self.group = group  # type: ignore[assignment]
        self.risk = risk  # type: ignore[assignment]
        self.owner_only = owner_only
        self.calls: list[dict[str, Any]] = []

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.calls.append(args)
        return {"recorded": len(self.calls)}


class SleepTool(Tool):
    """A test tool that sleeps `ms` milliseconds (cancellation interrupts it): keeps a run busy
    in a tool call, e.g. between two model turns. Named as the test's script calls it."""

    description = "Sleep for ms milliseconds."
    parameters: dict[str, Any] = {"type": "object", "properties": {"ms": {"type": "integer"}}}

    def __init__(self, name: str = "slow", result: Any = "rested") -> None:
        self.name = name
        self.result = result

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(int(args.get("ms", 100)) / 1000)
        return self.result


def catalog_with(*extra: Tool) -> ToolRegistry:
    """The default catalog plus `extra` tools (replacing any of the same name)."""
    catalog = default_tool_registry(Settings(_env_file=None))  # type: ignore[call-arg]
    names = {t.name for t in extra}
    return ToolRegistry([*(t for t in catalog.tools() if t.name not in names), *extra])


def call(name: str, call_id: str | None = None, **args: Any) -> ToolCall:
    return ToolCall(
        id=call_id or f"c_{name}_{json.dumps(args, sort_keys=True)}", name=name, args=args
    )


def tool_line(name: str, **args: Any) -> str:
    return f"/tool {name} {json.dumps(args)}"


async def set_policy(
    db: Database,
    who: Principal,
    *,
    agent_id: UUID | None = None,
    approval: dict[str, Any] | None = None,
    **layer: Any,
) -> None:
    """Store the tenant's (or an agent's) policy layer."""
    scope = "tenant" if agent_id is None else "agent"
    if scope == "tenant":
        layer.setdefault("profile", "coding")
    rules = ApprovalRules.parse(approval)
    async with db.tenant(who) as s:
        await put_layer(
            s, who.tenant_id, agent_id, PolicyLayer(scope, require_approval=rules, **layer)
        )


async def default_agent_id(db: Database, who: Principal) -> UUID:
    """The tenant's default agent (created, owned by `who`, if there is none yet)."""
    async with db.tenant(who) as s:
        agent = await default_agent(s, who, model="offline", max_turns=8)
        return agent.id


async def run_status(db: Database, who: Principal, run_id: UUID) -> str:
    async with db.tenant(who) as s:
        status = await s.scalar(select(Run.status).where(Run.id == run_id))
    assert status is not None
    return status


async def wait_status(
    db: Database,
    who: Principal,
    run_id: UUID,
    statuses: set[str],
    timeout: float = 10,  # noqa: ASYNC109
) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status = await run_status(db, who, run_id)
        if status in statuses or time.monotonic() > deadline:
            assert status in statuses, f"run {run_id} is {status}, wanted {statuses}"
            return status
        await asyncio.sleep(0.05)


async def run_events(
    db: Database, who: Principal, run_id: UUID
) -> list[tuple[str, dict[str, Any]]]:
    """The run's events in order (state changes left out), after checking seqs have no gaps."""
    async with db.tenant(who) as s:
        rows = list(
            await s.scalars(
                select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
            )
        )
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    return [(r.type, r.data) for r in rows if r.type != "state.changed"]


async def executions(db: Database, who: Principal, run_id: UUID) -> list[ToolExecution]:
    async with db.tenant(who) as s:
        rows = await s.scalars(
            select(ToolExecution)
            .where(ToolExecution.run_id == run_id)
            .order_by(ToolExecution.started_at)
        )
        return list(rows)


def worker_settings(db_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "lease_seconds": 3.0,
        "heartbeat_seconds": 0.3,
        "poll_seconds": 30.0,
        "worker_concurrency": 4,
        "shutdown_grace_seconds": 0.5,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def running_worker(
    db: Database, settings: Settings, worker_id: str, catalog: ToolRegistry | None = None
) -> AsyncIterator[Worker]:
    """A worker running the real agent loop (offline model) until the block ends."""
    worker = Worker(
        db, settings, worker_id=worker_id, execute=agent_executor(settings, catalog=catalog)
    )
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.2)  # listener connected
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 15)
