"""Context building, cut points, trimming and the summariser's inputs (pure; no database)."""

from __future__ import annotations

import json
from uuid import uuid4

import pytest

from app.core.tokens import estimate_message_tokens
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.llm.base import ModelRequest, TextDelta, ToolCallEvent
from app.llm.offline import OfflineModel, parse_directives
from app.llm.offline_compact import MAX_SUMMARY_LINES, offline_flush_calls, offline_summary
from app.runtime.context import (
    MISSING_RESULT,
    ContextItem,
    Summary,
    build_context,
    build_items,
    choose_cut,
    cut_points,
    trim_tool_result,
)
from app.runtime.run_state import ContextWindow, Entry
from app.runtime.summaries import (
    cap_summary,
    flush_request,
    pieces,
    render_items,
    summary_limit,
    summary_request,
)

RUN = uuid4()


def entries(*messages: UserMessage | AssistantMessage | ToolResult) -> list[Entry]:
    return [Entry(RUN, m, seq=i + 1) for i, m in enumerate(messages)]


def call(id_: str, name: str = "read_file") -> ToolCall:
    return ToolCall(id=id_, name=name, args={"path": id_})


def result(id_: str, body: object = "ok", name: str = "read_file") -> ToolResult:
    return ToolResult(tool_call_id=id_, name=name, ok=True, result=body)


CONVERSATION = entries(
    UserMessage(text="first question"),  # 1
    AssistantMessage(text="", tool_calls=[call("a"), call("b")]),  # 2
    result("a"),  # 3
    result("b"),  # 4
    AssistantMessage(text="first answer"),  # 5
    UserMessage(text="second question"),  # 6
    AssistantMessage(text="", tool_calls=[call("c")]),  # 7
    result("c"),  # 8
    AssistantMessage(text="second answer"),  # 9
)


def test_summary_replaces_the_rows_it_covers() -> None:
    summary = Summary(text="- they asked twice", first_seq=1, last_seq=5)
    items = build_items(CONVERSATION, summary=summary)
    assert items[0].summary and items[0].seq == 5
    head = items[0].message
    assert isinstance(head, UserMessage)
    assert "messages 1–5" in head.text and head.text.endswith("- they asked twice")
    assert [i.seq for i in items[1:]] == [6, 7, 8, 9]
    assert build_context(CONVERSATION, summary=summary)[1] == CONVERSATION[5].message


def test_tokens_are_a_quarter_of_the_stored_json() -> None:
    message = UserMessage(text="x" * 400)
    expected = -(-len(json.dumps({"kind": "user", "text": "x" * 400})) // 4)
    assert estimate_message_tokens(message) == expected
    assert [i.tokens for i in build_items(CONVERSATION[:1])] == [expected - 100 + 4]


def test_cut_points_never_separate_a_call_from_its_results() -> None:
    items = build_items(CONVERSATION)
    points = cut_points(items)
    assert points == [1, 4, 5, 6, 8]
    for k in points:
        kept_ids = {
            m.tool_call_id for m in (i.message for i in items[k:]) if isinstance(m, ToolResult)
        }
        called_before = {
            c.id
            for i in items[:k]
            if isinstance(i.message, AssistantMessage)
            for c in i.message.tool_calls
        }
        assert not kept_ids & called_before


def test_cut_after_a_summary_summarises_at_least_one_message() -> None:
    items = build_items(CONVERSATION, summary=Summary("s", 1, 5))
    # [summary, user 6 | assistant 7, result 8 | assistant 9]
    assert cut_points(items) == [2, 4]


def test_repaired_results_stay_with_their_call() -> None:
    broken = entries(
        UserMessage(text="q"),
        AssistantMessage(tool_calls=[call("x"), call("y")]),
        result("y"),
        UserMessage(text="next"),
    )
    items = build_items(broken)
    kinds = [(type(i.message).__name__, i.seq) for i in items]
    assert kinds == [
        ("UserMessage", 1),
        ("AssistantMessage", 2),
        ("ToolResult", 3),
        ("ToolResult", 2),  # the synthetic result of x, carrying its call's seq
        ("UserMessage", 4),
    ]
    synthetic = items[3].message
    assert isinstance(synthetic, ToolResult) and synthetic.error == MISSING_RESULT
    assert cut_points(items) == [1, 4]


def test_choose_cut_keeps_as_much_as_fits() -> None:
    items = [ContextItem(i + 1, UserMessage(text="m"), tokens=100) for i in range(6)]
    assert choose_cut(items, keep_tokens=250) == 4  # keeps the newest two
    assert choose_cut(items, keep_tokens=1000) == 1  # everything fits: summarise the least
    assert choose_cut(items, keep_tokens=10) == 5  # nothing fits: keep only the newest
    assert choose_cut(items[:1], keep_tokens=10) is None  # one message cannot be cut


def test_long_tool_results_are_trimmed_in_the_context_only() -> None:
    body = "HEAD" + "x" * 30_000 + "TAIL"
    stored = result("a", body)
    transcript = entries(UserMessage(text="q"), AssistantMessage(tool_calls=[call("a")]), stored)
    sent = build_items(transcript, max_result_chars=2000)[2].message
    assert isinstance(sent, ToolResult) and isinstance(sent.result, str)
    assert sent.result.startswith("HEAD") and sent.result.endswith("TAIL")
    assert "characters left out here; the full result is stored" in sent.result
    assert len(sent.result) <= 2000
    assert stored.result == body  # the transcript entry is untouched
    structured = trim_tool_result(result("b", {"rows": list(range(5000))}), 500)
    assert isinstance(structured.result, str) and len(structured.result) < 700
    error = ToolResult(tool_call_id="e", name="t", ok=False, error="E" * 5000)
    assert len(trim_tool_result(error, 500).error or "") < 700
    short = result("c", "small")
    assert trim_tool_result(short, 500) is short


def test_window_reserve_is_capped_at_a_quarter() -> None:
    assert ContextWindow.of(2048, 8192).budget == 1536
    assert ContextWindow.of(128_000, 8192).budget == 119_808


def test_rendered_transcript_and_pieces() -> None:
    previous, blocks = render_items(build_items(CONVERSATION, summary=Summary("- old", 1, 2)))
    assert previous == "- old"
    assert blocks[0] == "tool read_file ok: ok"  # row 3: results follow the summary
    assert "assistant called read_file" in "\n".join(blocks)
    groups = pieces(["a" * 400, "b" * 400, "c" * 4000], max_tokens=250)
    assert [len(g) for g in groups] == [2, 1]
    assert len(groups[1][0]) < 1000  # a block larger than a piece is cut to fit
    request = summary_request("- old", blocks, summary_limit(1536))
    assert "<summary>\n- old\n</summary>" in request and "<transcript>\n" in request
    assert len(cap_summary("w " * 10_000, 100)) < 420


def test_offline_summary_lists_messages_and_never_repeats_directives() -> None:
    blocks = [
        'user: /tool write_file {"path": "a"}\n  second line',
        "assistant called write_file {}",
        "tool write_file ok: done",
    ]
    text = offline_summary([UserMessage(text=summary_request("- earlier fact", blocks, 200))])
    lines = text.splitlines()
    assert lines[0].startswith("Summary") and lines[1] == "- earlier fact"
    assert len(lines) == 5 and all(line.startswith("- ") for line in lines[1:])
    assert parse_directives(text).tool_calls == []  # quoted directives do not fire again
    many = [f"user: message {i}" for i in range(200)]
    assert len(
        offline_summary([UserMessage(text=summary_request(None, many, 200))]).splitlines()
    ) == (MAX_SUMMARY_LINES + 1)


def test_offline_flush_stores_each_remembered_line() -> None:
    request = flush_request(
        ["user: hi\n  /remember the deploy key is in vault", "user: /remember tea"]
    )
    calls = offline_flush_calls([UserMessage(text=request)])
    assert [(c.name, c.args["content"]) for c in calls] == [
        ("memory_store", "the deploy key is in vault"),
        ("memory_store", "tea"),
    ]
    assert offline_flush_calls([UserMessage(text=flush_request(["user: nothing"]))]) == []


@pytest.mark.parametrize("purpose", ["compact", "flush"])
async def test_offline_model_answers_compaction_requests(purpose: str) -> None:
    text = (
        flush_request(["user: /remember x"])
        if purpose == "flush"
        else summary_request(None, ["user: hi"], 100)
    )
    request = ModelRequest(system_prompt="", messages=[UserMessage(text=text)], purpose=purpose)  # type: ignore[arg-type]
    events = [e async for e in OfflineModel().stream(request)]
    if purpose == "flush":
        assert [e.call.args for e in events if isinstance(e, ToolCallEvent)] == [
            {"content": "x", "tags": ["remembered"]}
        ]
    else:
        assert "".join(e.text for e in events if isinstance(e, TextDelta)).endswith("- user: hi")


def test_stored_token_counts_are_used_unless_the_message_was_trimmed() -> None:
    long = result("a", "z" * 10_000)
    transcript = [
        Entry(RUN, UserMessage(text="q"), seq=1, tokens=7),
        Entry(RUN, AssistantMessage(tool_calls=[call("a")]), seq=2, tokens=11),
        Entry(RUN, long, seq=3, tokens=2600),
    ]
    items = build_items(transcript, max_result_chars=1000)
    assert [i.tokens for i in items[:2]] == [7, 11]  # no re-serialising per call
    assert items[2].tokens == estimate_message_tokens(items[2].message) < 300
    assert build_items(transcript)[2].tokens == 2600
