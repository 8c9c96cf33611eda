"""The AI SDK chat protocol against the published client: `tests/e2e/ai_sdk/chat.mjs` runs the
`ai` package's `AbstractChat` over its `DefaultChatTransport` (what `useChat` does) against the
real API and worker processes, and prints the chat's state; these tests check what it assembled.

The npm dependency is installed by `make test` (`npm ci --prefix tests/e2e/ai_sdk`). Without
node the tests are skipped; with node but without that install they fail, saying what to run
(a missing install must not pass as a green run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack, stack_per_user

pytestmark = pytest.mark.e2e

# One API + workers for the module; each test is a user (and tenant) of its own.
stack = pytest.fixture(stack_per_user)

CLIENT_DIR = Path(__file__).with_name("ai_sdk")
SCRIPT = CLIENT_DIR / "chat.mjs"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node (and `npm ci --prefix tests/e2e/ai_sdk`, which make test runs)")
    assert (CLIENT_DIR / "node_modules" / "ai").is_dir(), (
        "the AI SDK client is not installed: run `make test` or `npm ci --prefix tests/e2e/ai_sdk`"
    )
    return node


def run_client(stack: Stack, mode: str, chat_id: str, *args: str) -> dict[str, Any]:
    """Run the client script; its JSON output (the chat's state when it is done)."""
    done = subprocess.run(
        [_node(), str(SCRIPT), mode, stack.base_url, stack.token(), chat_id, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{stack.logs()}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def assistant_of(result: dict[str, Any]) -> dict[str, Any]:
    messages = result["messages"]
    assert messages[-1]["role"] == "assistant", messages
    message: dict[str, Any] = messages[-1]
    return message


def parts_of(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind or p["type"].startswith(kind)]


def chat_id() -> str:
    return f"chat-{uuid.uuid4().hex[:12]}"


def test_a_chat_turn_with_reasoning_and_text(stack: Stack) -> None:
    result = run_client(stack, "send", chat_id(), "/think weigh it up\nhello there")
    assert result["status"] == "ready" and result["error"] is None, result
    user, assistant = result["messages"]
    assert user["role"] == "user"
    run = stack.status(assistant["id"])  # the message id is the run id
    assert run["status"] == "completed"
    [reasoning] = parts_of(assistant, "reasoning")
    assert reasoning["text"] == "weigh it up" and reasoning["state"] == "done"
    [text] = parts_of(assistant, "text")
    assert text["text"] == run["result"]["text"] and "hello there" in text["text"]
    assert text["state"] == "done"
    assert parts_of(assistant, "step-start")
    [run_part] = parts_of(assistant, "data-run")
    assert run_part["data"]["status"] == "completed"
    assert run_part["data"]["runId"] == assistant["id"]
    [usage] = parts_of(assistant, "data-usage")
    assert usage["data"]["inputTokens"] > 0 and usage["data"]["modelCalls"] == 1
    states = [d["data"]["to"] for d in result["data"] if d["type"] == "data-state"]
    assert "thinking" in states and "completed" in states  # transient: onData only
    assert not parts_of(assistant, "data-state")


def test_tool_calls_with_inputs_outputs_and_errors(stack: Stack) -> None:
    message = (
        '/tool write_file {"path": "a.txt", "content": "x"}\n'
        '/tool read_file {"path": "missing.txt"}'
    )
    cid = chat_id()
    result = run_client(stack, "send", cid, message)
    assert result["status"] == "ready" and result["error"] is None, result
    assistant = assistant_of(result)
    written, failed = parts_of(assistant, "tool-")
    assert written["type"] == "tool-write_file" and written["state"] == "output-available"
    assert written["input"] == {"path": "a.txt", "content": "x"}
    assert written["output"] is not None
    assert failed["type"] == "tool-read_file" and failed["state"] == "output-error"
    assert failed["input"] == {"path": "missing.txt"} and failed["errorText"]
    assert written["toolCallId"] != failed["toolCallId"]
    # two model turns: the calls, then the summary of their results, each its own step
    assert len(parts_of(assistant, "step-start")) == 2
    [summary] = parts_of(assistant, "text")
    assert "write_file ok" in summary["text"] and "read_file failed" in summary["text"]

    # the same chat again: a second run in the same session (the server keeps the transcript)
    again = run_client(stack, "send", cid, "and now?")
    assert assistant_of(again)["id"] != assistant["id"]
    assert "and now?" in parts_of(assistant_of(again), "text")[0]["text"]


def test_a_failed_run_is_an_error(stack: Stack) -> None:
    result = run_client(stack, "send", chat_id(), "/fail")
    assert result["status"] == "error", result
    assert "/fail" in result["error"] and result["errors"]
    assistant = assistant_of(result)
    assert stack.status(assistant["id"])["status"] == "failed"
    [run_part] = parts_of(assistant, "data-run")
    assert run_part["data"]["status"] == "failed"
    assert run_part["data"]["error"]["code"] == "model_error"


def test_resume_replays_and_follows_the_active_run(stack: Stack) -> None:
    cid = chat_id()
    idle = run_client(stack, "resume", cid)  # nothing active (an unknown chat): 204
    assert idle["status"] == "ready" and idle["messages"] == [], idle

    posted: dict[str, Any] = {}

    def post() -> None:  # a chat turn whose client goes away; its run goes on
        try:
            with httpx.stream(
                "POST",
                f"{stack.base_url}/api/agent-runtime/chat",
                json={
                    "id": cid,
                    "messages": [
                        {
                            "id": "u1",
                            "role": "user",
                            "parts": [{"type": "text", "text": "/sleep 1500\nslow answer"}],
                        }
                    ],
                    "trigger": "submit-message",
                },
                headers=stack.headers(),
                timeout=10,
            ) as r:
                posted["status"] = r.status_code
                posted["headers"] = dict(r.headers)
                posted["first"] = next(r.iter_lines())
        except httpx.HTTPError as exc:  # pragma: no cover - reported below
            posted["error"] = repr(exc)

    thread = threading.Thread(target=post)
    thread.start()
    thread.join(10)
    assert posted.get("status") == 200, posted
    assert posted["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert posted["headers"]["content-type"].startswith("text/event-stream")
    start = json.loads(posted["first"].removeprefix("data: "))
    assert start["type"] == "start"
    run_id = start["messageId"]
    time.sleep(0.3)

    resumed = run_client(stack, "resume", cid)
    assert resumed["status"] == "ready" and resumed["error"] is None, resumed
    [assistant] = resumed["messages"]
    assert assistant["id"] == run_id
    [text] = parts_of(assistant, "text")
    assert "slow answer" in text["text"] and text["state"] == "done"
    assert stack.status(run_id)["status"] == "completed"
    assert run_client(stack, "resume", cid)["messages"] == []  # finished: nothing to resume
