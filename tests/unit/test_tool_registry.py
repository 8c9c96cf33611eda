"""The tool registry: schema validation before running, and every failure as a ToolResult."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from app.auth.principal import Principal
from app.config import Settings
from app.core.errors import LeaseLostError
from app.core.transcript import ToolCall
from app.tools.base import Tool, ToolContext, ToolError
from app.tools.registry import ToolRegistry, default_tool_registry


class Echo(Tool):
    name = "echo"
    description = "Echo `text` back, `times` times."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "times": {"type": "integer", "minimum": 1},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.runs += 1
        return args["text"] * args.get("times", 1)


class Raising(Tool):
    name = "raising"
    description = "Raises what it is told to."
    parameters: dict[str, Any] = {"type": "object"}

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise self.exc


class Unstorable(Tool):
    name = "unstorable"
    description = "Returns something that is not JSON."
    parameters: dict[str, Any] = {"type": "object"}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        return {1, 2}


CTX = ToolContext(
    db=None,  # type: ignore[arg-type]  # these tools never touch the database
    principal=Principal("u", "t"),
    session_id=uuid.uuid4(),
    run_id=uuid.uuid4(),
    settings=Settings(),
)


async def test_valid_call_runs() -> None:
    echo = Echo()
    result = await ToolRegistry([echo]).execute(
        CTX, ToolCall(id="c", name="echo", args={"text": "ab", "times": 2})
    )
    assert result.ok and result.result == "abab" and result.tool_call_id == "c"
    assert echo.runs == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "'text' is a required property"),
        ({"text": 3}, "text: 3 is not of type 'string'"),
        ({"text": "a", "times": 0}, "times: 0 is less than the minimum of 1"),
        ({"text": "a", "extra": 1}, "Additional properties are not allowed"),
        ({"_raw": "{oops"}, "'text' is a required property"),
    ],
)
async def test_invalid_args_fail_without_running(args: dict[str, Any], fragment: str) -> None:
    echo = Echo()
    result = await ToolRegistry([echo]).execute(CTX, ToolCall(id="c", name="echo", args=args))
    assert not result.ok and result.error is not None
    assert result.error.startswith("invalid arguments for echo: ")
    assert fragment in result.error
    assert echo.runs == 0


async def test_unknown_tool_names_the_available_ones() -> None:
    result = await ToolRegistry([Echo()]).execute(CTX, ToolCall(id="c", name="rm_rf"))
    assert not result.ok and result.error == "unknown tool 'rm_rf' (available: echo)"


async def test_tool_error_message_is_fed_back() -> None:
    result = await ToolRegistry([Raising(ToolError("disk full"))]).execute(
        CTX, ToolCall(id="c", name="raising")
    )
    assert not result.ok and result.error == "disk full"


async def test_unexpected_exception_is_an_internal_tool_error() -> None:
    registry = ToolRegistry([Raising(KeyError("secret detail")), Unstorable()])
    crashed = await registry.execute(CTX, ToolCall(id="c", name="raising"))
    assert not crashed.ok and crashed.error == "internal tool error: KeyError"
    bad = await registry.execute(CTX, ToolCall(id="d", name="unstorable"))
    assert not bad.ok and bad.error == "internal tool error: TypeError"


@pytest.mark.parametrize("exc", [asyncio.CancelledError(), LeaseLostError("gone")])
async def test_cancellation_and_lost_lease_propagate(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        await ToolRegistry([Raising(exc)]).execute(CTX, ToolCall(id="c", name="raising"))


def test_registration_checks_schema_and_duplicates() -> None:
    registry = ToolRegistry([Echo()])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Echo())

    class Broken(Echo):
        name = "broken"
        parameters: dict[str, Any] = {"type": "no-such-type"}

    with pytest.raises(SchemaError):
        registry.register(Broken())


def test_default_registry_specs() -> None:
    registry = default_tool_registry(Settings(_env_file=None))  # type: ignore[call-arg]
    specs = {s.name: s for s in registry.specs()}
    assert list(specs) == sorted(specs)
    workspace = ["delete_file", "edit_file", "list_files", "read_file", "write_file"]
    assert set(workspace) | {"web_fetch", "sessions_list", "sessions_history"} <= set(specs)
    assert specs["write_file"].parameters["required"] == ["path", "content"]
    assert registry.is_idempotent("write_file") and not registry.is_idempotent("nope")
