"""The `agent-runtime` CLI without servers: parsing, tokens, the secret file, SSE and rendering."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import structlog

from app import cli
from app.auth.secret import ensure_jwt_secret, secret_path, uses_generated_secret
from app.cli.run_command import request_body
from app.config import Settings
from app.logging import configure_logging
from app.serve import ChildSpec, Supervisor, connect_host, resolve_database

ENV_VARS = ("DATABASE_URL", "SUPABASE_JWT_SECRET", "AGENT_RUNTIME_DATA_DIR", "JWT_AUDIENCE")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean environment whose data dir is a temp dir; returns the data dir."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no developer .env is read
    data = tmp_path / "data"
    monkeypatch.setenv("AGENT_RUNTIME_DATA_DIR", str(data))
    return data


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def decode(token: str, secret: str, audience: str = "authenticated") -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, secret, algorithms=["HS256"], audience=audience)
    return claims


# --------------------------------------------------------------------------- parsing


def test_parses_every_command() -> None:
    parser = cli.build_parser()
    a = parser.parse_args(["serve", "--port", "9001", "--workers", "3", "--host", "0.0.0.0"])
    assert (a.command, a.port, a.workers, a.host) == ("serve", 9001, 3, "0.0.0.0")
    a = parser.parse_args(["token", "--user", "bob", "--tenant", "acme", "--ttl", "60"])
    assert (a.user, a.tenant, a.ttl) == ("bob", "acme", 60)
    a = parser.parse_args(["run", "hi there", "--session", "s1", "--url", "http://x:1"])
    assert (a.message, a.session, a.url, a.user, a.token) == (
        "hi there",
        "s1",
        "http://x:1",
        "dev",
        None,
    )
    a = parser.parse_args(["run", "more", "--session", "s1", "--if-busy", "steer"])
    assert request_body(a) == {"message": "more", "sessionKey": "s1", "ifBusy": "steer"}
    assert request_body(parser.parse_args(["run", "hi"])) == {"message": "hi"}
    assert parser.parse_args(["worker", "--worker-id", "w9"]).worker_id == "w9"
    assert parser.parse_args(["migrate"]).handler is cli.cmd_migrate
    assert parser.parse_args(["api", "--port", "1234"]).port == 1234


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["serve", "--port", "0"],
        ["serve", "--workers", "-1"],
        ["token"],
        ["run"],
        ["run", "hi", "--if-busy", "later"],
        ["nope"],
    ],
)
def test_rejects_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "api", "worker", "migrate", "token", "run"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"agent-runtime {command}" in out and len(out) > 150


def test_flags_override_settings(env: Path) -> None:
    args = cli.build_parser().parse_args(["serve", "--port", "9002", "--workers", "0"])
    settings = cli._apply_overrides(Settings(), args)
    assert (settings.port, settings.workers, settings.host) == (9002, 0, "127.0.0.1")


def test_invalid_settings_exit_2(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PORT", "not-a-port")
    assert cli.main(["token", "--user", "x"]) == 2
    assert "invalid settings" in capsys.readouterr().err


# --------------------------------------------------------------------------- token and secret


def test_token_uses_configured_secret(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "configured-secret-0123456789abcdef0123456789"
    monkeypatch.setenv("SUPABASE_JWT_SECRET", secret)
    before = time.time()
    assert cli.main(["token", "--user", "bob", "--tenant", "acme", "--ttl", "60"]) == 0
    claims = decode(capsys.readouterr().out.strip(), secret)
    assert claims["sub"] == "bob"
    assert claims["app_metadata"]["tenant_id"] == "acme"
    assert before - 2 <= claims["exp"] - 60 <= time.time() + 2
    assert not env.exists(), "a configured secret must not create the secret file"


def test_token_audience_follows_settings(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUPABASE_JWT_SECRET", "s" * 40)
    monkeypatch.setenv("JWT_AUDIENCE", "internal")
    assert cli.main(["token", "--user", "bob"]) == 0
    claims = decode(capsys.readouterr().out.strip(), "s" * 40, audience="internal")
    assert claims["sub"] == "bob" and "tenant_id" not in claims.get("app_metadata", {})


def test_token_without_secret_generates_and_reuses_one(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["token", "--user", "alice"]) == 0
    first = capsys.readouterr().out.strip()
    secret_file = env / "jwt-secret"
    secret = secret_file.read_text().strip()
    assert decode(first, secret)["sub"] == "alice"
    assert cli.main(["token", "--user", "carol"]) == 0
    assert decode(capsys.readouterr().out.strip(), secret)["sub"] == "carol"
    assert secret_file.read_text().strip() == secret


def test_secret_file_is_private_random_and_stable(env: Path) -> None:
    settings = Settings()
    assert uses_generated_secret(settings)
    secret = ensure_jwt_secret(settings)
    path = secret_path(settings)
    assert path == env / "jwt-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(secret) >= 64  # 48 random bytes, urlsafe base64
    assert ensure_jwt_secret(Settings()) == secret
    path.chmod(0o644)
    assert ensure_jwt_secret(Settings()) == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "a loosened secret file is re-tightened"
    other = Settings(agent_runtime_data_dir=env.parent / "other")
    assert ensure_jwt_secret(other) != secret
    assert [p.name for p in env.iterdir()] == ["jwt-secret"], "no temp files are left behind"


def test_configured_secret_wins_and_empty_means_unset(env: Path) -> None:
    assert ensure_jwt_secret(Settings(supabase_jwt_secret="from-env-123456")) == "from-env-123456"
    assert not env.exists()
    generated = ensure_jwt_secret(Settings(supabase_jwt_secret=""))
    assert generated and (env / "jwt-secret").exists()


def test_concurrent_first_use_agrees_on_one_secret(env: Path) -> None:
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(ensure_jwt_secret(Settings())))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 8


def test_resolve_database_uses_database_url_as_is(env: Path) -> None:
    url = "postgresql://u:p@db.example:5432/x"
    assert resolve_database(Settings(database_url=url)) == (url, None)


# --------------------------------------------------------------------------- logging


def test_json_logs_never_show_secrets(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(
        log_json=True,
        supabase_jwt_secret="super-secret-signing-key",
        database_url="postgresql://app:hunter2pw@db:5432/agent",
        openai_api_key="sk-test-openai-key-123",  # type: ignore[arg-type]
    )
    configure_logging(settings, process="test")
    structlog.get_logger("t").info(
        "connecting to postgresql://app:hunter2pw@db:5432/agent",
        secret="plain",
        input_tokens=12,
        nested={"password": "x", "note": "key is super-secret-signing-key"},
    )
    logging.getLogger("stdlib").warning("stdlib says %s", "super-secret-signing-key")
    logging.getLogger("llm").error("provider rejected key sk-test-openai-key-123")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    text = json.dumps(lines)
    assert "hunter2pw" not in text and "super-secret-signing-key" not in text
    assert "plain" not in text
    assert "sk-test-openai-key-123" not in text
    first, second, _ = lines
    assert first["event"] == "connecting to postgresql://app:***@db:5432/agent"
    assert first["input_tokens"] == 12 and first["proc"] == "test"
    assert first["level"] == "info" and first["logger"] == "t"
    assert second["event"] == "stdlib says ***" and second["level"] == "warning"


def test_log_level_is_honoured(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(Settings(log_level="warning"))
    structlog.get_logger("t").info("hidden")
    structlog.get_logger("t").warning("shown")
    err = capsys.readouterr().err
    assert "shown" in err and "hidden" not in err
    with pytest.raises(ValueError, match="LOG_LEVEL"):
        configure_logging(Settings(log_level="loud"))


# --------------------------------------------------------------------------- SSE and rendering


def test_sse_parser() -> None:
    parser = cli.SSEParser()
    lines = [
        ": keep-alive",
        "",
        "id: 1",
        "event: run.queued",
        'data: {"type": "run.queued",',
        'data: "seq": 1}',
        "",
        "id:2",
        "data:plain",
        "retry: 100",
        "",
        "data: inherits the last id",
        "",
    ]
    events = [e for line in lines if (e := parser.feed(line)) is not None]
    assert events[0] == cli.SSEEvent("1", "run.queued", '{"type": "run.queued",\n"seq": 1}')
    assert events[1] == cli.SSEEvent("2", "message", "plain")
    assert events[2] == cli.SSEEvent("2", "message", "inherits the last id")
    assert len(events) == 3


RUN_ID = "00000000-0000-4000-8000-000000000001"
APPROVAL_1 = "00000000-0000-4000-8000-0000000000a1"
APPROVAL_2 = "00000000-0000-4000-8000-0000000000a2"


def render(events: list[dict[str, Any]]) -> tuple[str, int | None]:
    """Render events as the API streams them (each is validated by the renderer as a typed
    `RunEvent`, so test events carry every field the server sends)."""
    out = io.StringIO()
    renderer = cli.Renderer(out)
    code = None
    for seq, event in enumerate(events, start=1):
        code = renderer.handle({"seq": seq, "runId": RUN_ID, **event})
        if code is not None:
            break
    return out.getvalue(), code


def test_renders_a_completed_run_with_tools() -> None:
    text, code = render(
        [
            {"type": "run.queued", "sessionKey": "s", "status": "queued"},
            {"type": "run.started", "attempt": 1, "workerId": "w1"},
            {"type": "tool.started", "toolCallId": "c1", "name": "write_file", "args": {"p": 1}},
            {"type": "tool.completed", "toolCallId": "c1", "name": "write_file", "result": "ok"},
            {
                "type": "tool.failed",
                "toolCallId": "c2",
                "name": "read_file",
                "error": "x: no such file",
            },
            {"type": "assistant.delta", "text": "You said: "},
            {"type": "assistant.delta", "text": "hi"},
            {"type": "assistant.message", "text": "You said: hi", "toolCalls": []},
            {"type": "usage", "inputTokens": 10, "outputTokens": 4},
            {"type": "run.completed", "result": {"text": "You said: hi"}},
        ]
    )
    assert code == 0
    assert text.splitlines() == [
        '→ tool write_file {"p": 1}',
        "← ok: ok",
        "✗ failed: x: no such file",
        "You said: hi",
        "✓ completed · 10 tokens in, 4 out",
    ]


def test_renders_approvals_plans_and_compactions() -> None:
    steps = [
        {"index": 1, "description": "write it", "tools": ["write_file"], "status": "pending"},
        {"index": 2, "description": "read it", "tools": [], "status": "pending"},
    ]
    text, code = render(
        [
            {"type": "plan.created", "plan": {"steps": steps}},
            {"type": "plan.step", "index": 1, "status": "running"},
            {
                "type": "approval.required",
                "approvalId": APPROVAL_1,
                "toolCallId": "c1",
                "tool": "run_shell",
                "args": {"command": "rm -rf build"},
                "risk": "high",
                "reason": "risk high needs approval",
                "expiresAt": "2026-11-23T12:00:00+00:00",
            },
            {
                "type": "approval.resolved",
                "approvalId": APPROVAL_1,
                "decision": "approve",
                "decidedBy": "alice",
            },
            {"type": "plan.step", "index": 1, "status": "failed", "reason": "no such file"},
            {
                "type": "approval.resolved",
                "approvalId": APPROVAL_2,
                "decision": "expired",
                "decidedBy": None,
            },
            {
                "type": "context.compacted",
                "snapshotId": APPROVAL_2,
                "fromSeq": 1,
                "toSeq": 9,
                "messages": 9,
                "tokensBefore": 1800,
                "tokensAfter": 700,
                "summaryTokens": 300,
            },
            {
                "type": "context.compaction_failed",
                "error": {"code": "model_error", "message": "down"},
            },
        ]
    )
    assert code is None
    assert text.splitlines() == [
        "plan:",
        "  1. write it",
        "  2. read it",
        "(step 1 running)",
        '■ waiting for approval: tool run_shell {"command": "rm -rf build"} '
        "(risk high needs approval, risk high)",
        f"  decide: POST /api/agent-runtime/approvals/{APPROVAL_1} "
        '{"decision": "approve"} or '
        '{"decision": "deny"}',
        "(approved by alice)",
        "(step 1 failed: no such file)",
        "(the approval expired: the call is refused)",
        "(context compacted: messages 1–9 summarised, 1800 → 700 tokens)",
        "(context compaction failed: model_error: down)",
    ]


def test_renders_failure_cancellation_and_unstreamed_text() -> None:
    text, code = render(
        [
            {"type": "assistant.delta", "text": "partial"},
            {"type": "run.failed", "error": {"code": "model_error", "message": "boom"}},
        ]
    )
    assert code == 1 and text == "partial\n✗ run failed: model_error: boom\n"
    text, code = render([{"type": "run.cancelled", "reason": "cancelled"}])
    assert code == 1 and "cancelled" in text
    text, code = render([{"type": "run.completed", "result": {"text": "only here"}}])
    assert code == 0 and text.startswith("only here\n")


def test_renderer_skips_replayed_events() -> None:
    out = io.StringIO()
    renderer = cli.Renderer(out)
    renderer.handle({"seq": 1, "type": "assistant.delta", "text": "a"})
    renderer.handle({"seq": 1, "type": "assistant.delta", "text": "a"})
    assert out.getvalue() == "a" and renderer.last_seq == 1


# --------------------------------------------------------------------------- supervision


def _child(code: str) -> ChildSpec:
    import sys

    return ChildSpec("c", [sys.executable, "-c", code])


SLEEPER = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\ntime.sleep(60)"


def test_supervisor_stops_children_on_request() -> None:
    sup = Supervisor([_child(SLEEPER), _child(SLEEPER)], env=dict(os.environ), stop_timeout=10)
    threading.Timer(0.5, sup.request_stop).start()
    started = time.monotonic()
    assert sup.run() == 0
    assert time.monotonic() - started < 8
    # 0: its SIGTERM handler ran; -15: SIGTERM came before Python had installed it
    assert all(c.proc.returncode in (0, -15) for c in sup.children)


def test_supervisor_stops_everything_when_a_child_dies() -> None:
    sup = Supervisor([_child(SLEEPER), _child("raise SystemExit(3)")], dict(os.environ), 10)
    assert sup.run() == 1
    assert sup.failed is not None and "code 3" in sup.failed
    assert sup.children[0].proc.returncode in (0, -15), "the healthy child got SIGTERM"


def test_supervisor_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    up = tmp_path / "up"
    stubborn = (
        "import pathlib, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(up)!r}).touch()\n"
        "time.sleep(60)"
    )
    sup = Supervisor([_child(stubborn)], dict(os.environ), stop_timeout=0.5)
    sup.start()
    deadline = time.monotonic() + 10
    while not up.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    sup.stop()
    assert sup.children[0].proc.returncode == -9


def test_connect_host() -> None:
    assert connect_host("0.0.0.0") == "127.0.0.1"
    assert connect_host("::") == "[::1]"
    assert connect_host("::1") == "[::1]"
    assert connect_host("localhost") == "localhost"


def test_renderer_falls_back_to_ascii_symbols() -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    renderer = cli.Renderer(out)
    renderer.handle({"seq": 1, "type": "tool.started", "toolCallId": "c", "name": "t", "args": {}})
    renderer.handle({"seq": 2, "type": "usage", "inputTokens": 1, "outputTokens": 2})
    assert renderer.handle({"seq": 3, "type": "run.completed", "result": {"text": "x"}}) == 0
    out.flush()
    assert raw.getvalue().decode().splitlines() == [
        "-> tool t {}",
        "x",
        "ok completed - 1 tokens in, 2 out",
    ]


def test_env_example_lists_every_setting() -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    listed = re.findall(r"^# ([A-Z0-9_]+)=", text, re.MULTILINE)
    assert sorted(listed) == sorted(name.upper() for name in Settings.model_fields)


def test_renders_thinking_retries_and_resets() -> None:
    text, code = render(
        [
            {"type": "thinking.delta", "text": "let me "},
            {"type": "thinking.delta", "text": "think"},
            {"type": "assistant.delta", "text": "Hal"},
            {"type": "assistant.reset"},
            {"type": "model.retry", "attempt": 1, "delaySeconds": 0.5, "reason": "503"},
            {"type": "assistant.delta", "text": "Hello"},
            {"type": "assistant.message", "text": "Hello", "toolCalls": []},
            {"type": "run.completed", "result": {"text": "Hello"}},
        ]
    )
    assert code == 0
    assert text.splitlines() == [
        "let me think",
        "Hal",
        "(the model call restarted; its partial answer above is discarded)",
        "(model call failed: 503; retry 1 in 0.5 s)",
        "Hello",
        "✓ completed",
    ]


def test_renderer_skips_events_it_does_not_know() -> None:
    """A newer server's event type (or a malformed one) is skipped, not a crash."""
    out = io.StringIO()
    renderer = cli.Renderer(out)
    assert renderer.handle({"seq": 1, "runId": RUN_ID, "type": "future.event", "x": 1}) is None
    assert renderer.handle({"seq": 2, "runId": RUN_ID, "type": "usage"}) is None
    assert out.getvalue() == "" and renderer.last_seq == 2


def test_renders_children_injected_messages_and_interrupts() -> None:
    child = "00000000-0000-4000-8000-0000000000c1"
    text, code = render(
        [
            {
                "type": "subagent.spawned",
                "childRunId": child,
                "childSessionKey": "s:sub:1",
                "task": "count\nthe files",
                "label": "counter",
                "agentId": child,
            },
            {"type": "state.changed", "from": "tool_calling", "to": "waiting"},
            {
                "type": "subagent.completed",
                "childRunId": child,
                "childSessionKey": "s:sub:1",
                "label": "counter",
                "status": "timed_out",
                "error": {"code": "run_timeout", "message": "too slow"},
            },
            {"type": "run.resumed", "attempt": 2, "workerId": "w2"},
            {
                "type": "message.injected",
                "source": "user",
                "text": "stop",
                "inboxId": 3,
                "skippedCalls": 2,
            },
            {"type": "run.interrupted", "byRunId": child},
            {"type": "run.cancelled", "reason": "interrupted by a new message"},
        ]
    )
    assert code == 1
    assert text.splitlines() == [
        "→ sub-agent counter spawned: count\\nthe files",
        "→ sub-agent counter timed_out: run_timeout: too slow",
        "(resumed)",
        "» message from user injected (2 tool call(s) skipped): stop",
        f"■ interrupted by run {child}",
        "■ cancelled",
    ]
