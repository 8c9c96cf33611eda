"""The pure parts of tenant HTTP tools: names, schemas, headers, query strings, results."""

from __future__ import annotations

import pytest

from app.tools.base import ToolError
from app.tools.http.definition import header_problem, name_problem, parameters_problem
from app.tools.http.tool import outgoing_headers, query_params, request_of, result_of
from app.tools.web.fetch import Answer


def answer(status: int, body: bytes, mime: str = "application/json", **extra: str) -> Answer:
    headers = [(k, v) for k, v in extra.items()]
    return Answer("https://h.example/p?secret=1", status, mime, None, headers, body, False)


def test_names() -> None:
    assert name_problem("order_lookup", {"web_fetch"}) is None
    assert "built-in" in (name_problem("web_fetch", {"web_fetch"}) or "")
    assert "MCP" in (name_problem("mcp__x", set()) or "")
    for bad in ("Lookup", "1st", "_x", "a-b", "a" * 65, ""):
        assert name_problem(bad, set()) is not None, bad


def test_parameters() -> None:
    assert parameters_problem({"type": "object", "properties": {"a": {"type": "string"}}}) is None
    assert "not a valid JSON schema" in (parameters_problem({"type": 3}) or "")
    assert "object" in (parameters_problem({"type": "array"}) or "")
    assert "$id" in (
        parameters_problem({"type": "object", "properties": {"a": {"$id": "https://x/"}}}) or ""
    )


def test_headers() -> None:
    assert header_problem("Authorization", "Bearer x") is None
    for name in ("Host", "content-length", "X-Agent-Runtime-Tool", "Proxy-Authorization"):
        assert "set by the runtime" in (header_problem(name, "v") or ""), name
    assert "control" in (header_problem("X-A", "a\nb") or "")
    assert "control" in (header_problem("X-A", "snow ☃") or "")  # not Latin-1
    names = [n for n, _ in outgoing_headers({"accept": "text/csv"}, has_body=True)]
    assert names == ["accept", "User-Agent", "Content-Type"]


def test_query_strings() -> None:
    params = query_params(
        {"q": "x", "on": True, "n": 1.5, "skip": None, "ids": [1, 2], "o": {"a": 1}}
    )
    assert params == [
        ("q", "x"),
        ("on", "true"),
        ("n", "1.5"),
        ("ids", "1"),
        ("ids", "2"),
        ("o", '{"a":1}'),
    ]
    url, payload = request_of("GET", "https://h.example/s?v=1", {"q": "a b", "v": 2})
    assert url == "https://h.example/s?v=2&q=a+b" and payload == b"v=2&q=a+b"
    url, payload = request_of("PATCH", "https://h.example/s?v=1", {"q": "é"})
    assert url == "https://h.example/s?v=1" and payload == '{"q":"é"}'.encode()


def test_results() -> None:
    assert result_of("t", answer(200, b'{"a": 1}'), 100) == {"status": 200, "body": {"a": 1}}
    assert result_of("t", answer(201, b"{oops", "application/problem+json"), 100)["body"] == "{oops"
    assert result_of("t", answer(204, b""), 100) == {"status": 204, "body": ""}
    with pytest.raises(ToolError) as raised:
        result_of("t", answer(404, b"<h1>Not\n found</h1>", "text/html"), 100)
    # the query (which may carry arguments) is left out of the message
    assert raised.value.message == "t: https://h.example/p answered HTTP 404: <h1>Not found</h1>"
