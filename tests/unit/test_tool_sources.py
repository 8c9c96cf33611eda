"""Tool sources: a run's catalog is the deployment's tools plus the tenant's sources' tools;
what a source cannot offer is explained (to `/tools` and to a model that calls it), never an
error; and a tool's own time limit fails the call, not the run."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import ToolCall
from app.db.engine import Database
from app.tools.base import Tool, ToolContext
from app.tools.guard import CallGuard
from app.tools.policy import EffectivePolicy, PolicyLayer
from app.tools.registry import PolicyToolRegistry, ToolRegistry, run_catalog
from app.tools.sources import SourcedTools, ToolSources, Unavailable


class Named(Tool):
    description = "A source's tool."

    def __init__(self, name: str, *, parameters: Any = None, sleep: float = 0.0) -> None:
        self.name = name
        self.group = "mcp"
        self.origin = "mcp:docs"
        self.parameters = parameters if parameters is not None else {"type": "object"}
        self.sleep = sleep

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(self.sleep)
        return "done"


class Builtin(Named):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.group = "fs"
        self.origin = "built-in"


def ctx() -> ToolContext:
    return ToolContext(
        db=None,  # type: ignore[arg-type]
        principal=Principal(user_id="u", tenant_id="t"),
        session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        settings=Settings(),
    )


def test_source_tools_join_the_catalog_and_bad_ones_are_explained() -> None:
    catalog = ToolRegistry([Builtin("read_file")])
    sourced = SourcedTools(
        tools=[
            Named("mcp__docs__search"),
            Named("read_file"),  # a name the deployment already uses
            Named("mcp__docs__broken", parameters={"type": "no-such-type"}),
        ],
        unavailable=[Unavailable("mcp:wiki", "mcp__wiki__*", "connection refused")],
    )
    merged = run_catalog(catalog, sourced)
    assert merged.names() == ["mcp__docs__search", "read_file"]
    assert merged.get("read_file").origin == "built-in"  # type: ignore[union-attr]
    reasons = {u.pattern: u.reason for u in merged.unavailable}
    assert "already taken" in reasons["read_file"]
    assert "not a valid JSON schema" in reasons["mcp__docs__broken"]
    assert merged.unavailable_reason("mcp__wiki__page") == (
        "tool 'mcp__wiki__page' is unavailable: connection refused"
    )
    assert run_catalog(catalog, SourcedTools()) is catalog  # nothing to add: no copy


async def test_a_call_of_an_unavailable_tool_says_why() -> None:
    catalog = run_catalog(
        ToolRegistry([Builtin("read_file")]),
        SourcedTools(unavailable=[Unavailable("mcp:wiki", "mcp__wiki__*", "server is down")]),
    )
    policy = EffectivePolicy(tenant=PolicyLayer(scope="tenant", profile="full"))
    offered = PolicyToolRegistry(catalog, policy)
    call = ToolCall(id="c1", name="mcp__wiki__page", args={})
    guard = CallGuard.of(offered, policy)
    assert guard.refusal(call, turn_call=1, run_call=1) == (
        "tool 'mcp__wiki__page' is unavailable: server is down"
    )
    result = await offered.execute(ctx(), call)
    assert not result.ok and result.error == "tool 'mcp__wiki__page' is unavailable: server is down"
    unknown = guard.refusal(ToolCall(id="c2", name="nope", args={}), turn_call=1, run_call=1)
    assert unknown is not None and unknown.startswith("unknown tool 'nope'")


async def test_a_tool_past_its_time_limit_fails_the_call() -> None:
    slow = Named("mcp__docs__slow", sleep=5)
    slow.timeout_seconds = 0.05
    result = await ToolRegistry([slow]).execute(ctx(), ToolCall(id="c", name=slow.name, args={}))
    assert not result.ok and result.error == "mcp__docs__slow timed out after 0.05 s"


class Failing:
    name = "mcp"
    names = "mcp__*"

    async def tools_for(self, db: Database, principal: Principal, agent_id: Any) -> SourcedTools:
        raise OSError("boom")

    async def aclose(self) -> None:
        raise RuntimeError("closing fails too")


class Fixed:
    name = "http"
    names = "*"

    async def tools_for(self, db: Database, principal: Principal, agent_id: Any) -> SourcedTools:
        return SourcedTools(tools=[Named("ping")])

    async def aclose(self) -> None:
        pass


async def test_a_failing_source_is_reported_and_the_others_still_answer() -> None:
    sources = ToolSources([Failing(), Fixed()])
    got = await sources.tools_for(None, Principal(user_id="u", tenant_id="t"), None)  # type: ignore[arg-type]
    assert [t.name for t in got.tools] == ["ping"]
    assert got.unavailable == [
        Unavailable("mcp", "mcp__*", "mcp tools could not be loaded (OSError)")
    ]
    await sources.aclose()  # logs, does not raise


async def test_a_schema_with_a_dangling_ref_refuses_calls_instead_of_crashing() -> None:
    dangling = Named(
        "mcp__docs__dangling",
        parameters={"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    )
    catalog = run_catalog(ToolRegistry(), SourcedTools(tools=[dangling]))
    call = ToolCall(id="c", name=dangling.name, args={"a": 1})
    problem = catalog.validation_error(dangling.name, call.args)
    assert problem is not None and "unresolvable $ref" in problem and "/$defs/missing" in problem
    result = await catalog.execute(ctx(), call)
    assert not result.ok and result.error == problem
