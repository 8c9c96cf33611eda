"""Workspace file API: round trips, replace/delete, path attacks, limits, tenant isolation,
download headers, and the same files as the agent's file tools."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.auth.principal import Principal
from app.core.transcript import ToolCall
from app.db.engine import Database
from app.tools.registry import default_tool_registry
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.tool_support import context_for

pytestmark = pytest.mark.timeout(30)

SESSIONS = "/api/agent-runtime/sessions"


def files_url(session_key: str, path: str = "") -> str:
    """The files URL; `path` is put in the URL as given (callers encode what they want)."""
    base = f"{SESSIONS}/{session_key}/files"
    return f"{base}/{path}" if path else base


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def upload(
    api: Api, key: str, path: str, content: bytes, user: str = "alice", **headers: str
) -> httpx.Response:
    return await api.client.put(files_url(key, path), content=content, headers=auth(user) | headers)


async def listing(api: Api, key: str, user: str = "alice", **params: Any) -> httpx.Response:
    return await api.client.get(files_url(key), params=params, headers=auth(user))


async def test_upload_list_download_round_trip(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    created = await upload(api, "ws", "notes//todo.md", b"# todo\n", **{"Content-Type": "x/y"})
    assert created.status_code == 201, created.text
    body = created.json()
    digest = hashlib.sha256(b"# todo\n").hexdigest()
    assert body["path"] == "notes/todo.md" and body["size"] == 7 and body["sha256"] == digest
    assert body["contentType"] == "text/markdown"
    assert created.headers["etag"] == f'"{digest}"'
    assert created.headers["location"] == f"{SESSIONS}/ws/files/notes/todo.md"
    await upload(api, "ws", "data", bytes(range(256)))

    listed = await listing(api, "ws")
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert page["sessionKey"] == "ws" and page["prefix"] is None and page["nextCursor"] is None
    assert [(f["path"], f["size"], f["contentType"]) for f in page["files"]] == [
        ("data", 256, None),
        ("notes/todo.md", 7, "text/markdown"),
    ]
    assert set(page["files"][1]) == {
        "path",
        "size",
        "contentType",
        "sha256",
        "createdAt",
        "updatedAt",
    }

    got = await api.client.get(files_url("ws", "notes/todo.md"), headers=auth())
    assert got.status_code == 200 and got.content == b"# todo\n"
    assert got.headers["content-type"] == "text/markdown; charset=utf-8"
    assert got.headers["content-length"] == "7"
    assert got.headers["etag"] == f'"{digest}"'
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"todo.md\"; filename*=UTF-8''todo.md"
    )
    assert "last-modified" in got.headers

    binary = await api.client.get(files_url("ws", "data"), headers=auth())
    assert binary.content == bytes(range(256))
    assert binary.headers["content-type"] == "application/octet-stream"

    unchanged = await api.client.get(
        files_url("ws", "notes/todo.md"), headers=auth() | {"If-None-Match": f'"{digest}"'}
    )
    assert unchanged.status_code == 304 and unchanged.content == b""
    stale = await api.client.get(
        files_url("ws", "notes/todo.md"), headers=auth() | {"If-None-Match": '"other"'}
    )
    assert stale.status_code == 200


async def test_replace_and_delete(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    assert (await upload(api, "ws", "a.txt", b"one")).status_code == 201
    replaced = await upload(api, "ws", "a.txt", b"two!")
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["size"] == 4 and "location" not in replaced.headers
    assert (await api.client.get(files_url("ws", "a.txt"), headers=auth())).content == b"two!"
    empty = await upload(api, "ws", "empty", b"")
    assert empty.status_code == 201 and empty.json()["size"] == 0

    gone = await api.client.delete(files_url("ws", "a.txt"), headers=auth())
    assert gone.status_code == 204 and gone.content == b""
    again = await api.client.delete(files_url("ws", "a.txt"), headers=auth())
    assert again.status_code == 404 and error_of(again)["field"] == "path"
    missing = await api.client.get(files_url("ws", "a.txt"), headers=auth())
    assert missing.status_code == 404
    assert error_of(missing) == {
        "code": "not_found",
        "message": "no such file: a.txt",
        "field": "path",
    }
    assert [f["path"] for f in (await listing(api, "ws")).json()["files"]] == ["empty"]


async def test_folders_prefix_and_conflicts(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    for path in ("src/a.py", "src/lib/b.py", "srcx/c.py", "top.txt"):
        assert (await upload(api, "ws", path, b"x")).status_code == 201
    src = (await listing(api, "ws", prefix="src/")).json()
    assert src["prefix"] == "src"
    assert [f["path"] for f in src["files"]] == ["src/a.py", "src/lib/b.py"]
    assert (await listing(api, "ws", prefix="top.txt")).json()["files"] == []
    assert len((await listing(api, "ws", prefix="")).json()["files"]) == 4
    bad = await listing(api, "ws", prefix="../x")
    assert bad.status_code == 422 and error_of(bad)["field"] == "prefix"

    folder = await api.client.get(files_url("ws", "src"), headers=auth())
    assert folder.status_code == 404 and "folder" in error_of(folder)["message"]
    onto_folder = await upload(api, "ws", "src", b"x")
    assert onto_folder.status_code == 409 and error_of(onto_folder)["field"] == "path"
    below_file = await upload(api, "ws", "top.txt/x", b"x")
    assert below_file.status_code == 409
    assert "top.txt is a file" in error_of(below_file)["message"]
    not_a_file = await api.client.delete(files_url("ws", "src"), headers=auth())
    assert not_a_file.status_code == 404


async def test_listing_pages_with_a_cursor(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    names = ["B", "a-b", "a/b", "a0", "ä", "z", "Z9", "é/x"]  # "-" < "/" < "0"
    for name in names:
        assert (await upload(api, "ws", quote(name), b"")).status_code == 201
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"after": cursor} if cursor else {})
        page = (await listing(api, "ws", **params)).json()
        seen += [f["path"] for f in page["files"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == sorted(names)  # code point order, whatever the database's collation
    after_z = (await listing(api, "ws", after="Z")).json()["files"]  # any path is a position
    assert [f["path"] for f in after_z] == ["Z9", "a-b", "a/b", "a0", "z", "ä", "é/x"]
    for bad in ("../x", "a\0b"):
        r = await listing(api, "ws", after=bad)
        assert r.status_code == 422 and error_of(r)["field"] == "after"


PATH_ATTACKS = [
    ("%2e%2e/secret", "'..'"),
    ("a/%2E%2E/b", "'..'"),
    ("..%2Fescape", "'..'"),
    ("%2Fetc/passwd", "absolute"),
    ("/etc/passwd", "absolute"),
    ("C:/Windows/win.ini", "absolute"),
    ("a%00b", "control characters"),
    ("a%0dSet-Cookie:%20x=1", "control characters"),
    ("a%7fb", "control characters"),
    ("a%5Cb", "backslash"),
    ("..%5C..%5Cwin.ini", "backslash"),
    ("~/x", "'~'"),
    ("x" * 513, "longer than 512 bytes"),
    ("%2e", "'.' component"),
    ("a/.../b", "'...' component"),
]


async def test_path_attacks_are_422_naming_path(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    for url_path, reason in PATH_ATTACKS:
        for method in ("GET", "PUT", "DELETE"):
            r = await api.client.request(
                method, files_url("ws", url_path), content=b"x", headers=auth()
            )
            assert r.status_code == 422, (method, url_path, r.text)
            error = error_of(r)
            assert error["field"] == "path" and reason in error["message"], (url_path, error)
    assert (await listing(api, "ws")).json()["files"] == []


async def test_a_line_feed_in_the_path_is_not_routed(api: Api) -> None:
    """Starlette's `path` convertor stops at a line feed: no route, a JSON 404, no header."""
    await api.post_run("hi", sessionKey="ws")
    r = await api.client.get(files_url("ws", "a%0d%0aSet-Cookie:%20x=1"), headers=auth())
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    assert "set-cookie" not in r.headers


async def test_literal_dot_dot_sent_as_is_is_refused(api: Api) -> None:
    """`curl --path-as-is`: the `..` reaches the server undecoded and unnormalised."""
    await api.post_run("hi", sessionKey="ws")
    raw = f"{files_url('ws')}/notes/../../../etc/passwd"
    status, body = await raw_asgi_get(api, raw)
    assert status == 422 and b'"field":"path"' in body


async def raw_asgi_get(api: Api, path: str) -> tuple[int, bytes]:
    """A GET whose path goes to the app exactly as written (httpx would remove dot segments)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in auth().items()],
        "server": ("test", 80),
        "client": ("127.0.0.1", 1234),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await api.app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_double_encoded_dots_are_a_plain_name(api: Api) -> None:
    """The path is decoded once: `%252e%252e` is a file literally named `%2e%2e`."""
    await api.post_run("hi", sessionKey="ws")
    r = await upload(api, "ws", "%252e%252e", b"x")
    assert r.status_code == 201 and r.json()["path"] == "%2e%2e"


async def test_size_limits_are_413(database: Database, db_url: str) -> None:
    settings = make_settings(db_url, workspace_max_file_bytes=10, workspace_max_total_bytes=25)
    async with running_api(settings, database) as api:
        await api.post_run("hi", sessionKey="ws")
        over = await upload(api, "ws", "big", b"x" * 11)
        assert over.status_code == 413, over.text
        assert error_of(over)["code"] == "payload_too_large"
        assert "per-file limit of 10 bytes" in error_of(over)["message"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for _ in range(4):
                yield b"xxxx"

        streamed = await api.client.put(files_url("ws", "big"), content=chunks(), headers=auth())
        assert streamed.status_code == 413, streamed.text

        assert (await upload(api, "ws", "a", b"x" * 10)).status_code == 201
        assert (await upload(api, "ws", "b", b"x" * 10)).status_code == 201
        full = await upload(api, "ws", "c", b"x" * 6)
        assert full.status_code == 413 and error_of(full)["code"] == "workspace_full"
        assert (await upload(api, "ws", "b", b"x" * 9)).status_code == 200
        assert [f["path"] for f in (await listing(api, "ws")).json()["files"]] == ["a", "b"]


async def test_uploads_are_not_held_to_the_json_body_limit(database: Database, db_url: str) -> None:
    """The file cap is the setting, also above the app's 1 MiB limit for JSON bodies."""
    big = 2 * 1024 * 1024
    settings = make_settings(db_url, workspace_max_file_bytes=big)
    async with running_api(settings, database) as api:
        await api.post_run("hi", sessionKey="ws")
        r = await upload(api, "ws", "big.bin", b"\0" * big)
        assert r.status_code == 201, r.text
        over = await upload(api, "ws", "bigger.bin", b"\0" * (big + 1))
        assert over.status_code == 413 and f"limit of {big} bytes" in error_of(over)["message"]
        # JSON routes keep their limit
        huge = await api.client.post("/api/agent-runtime", content=b" " * (big + 1), headers=auth())
        assert huge.status_code == 413


async def test_unknown_session_is_404(api: Api) -> None:
    for r in (
        await listing(api, "nope"),
        await api.client.get(files_url("nope", "a.txt"), headers=auth()),
        await upload(api, "nope", "a.txt", b"x"),
        await api.client.delete(files_url("nope", "a.txt"), headers=auth()),
    ):
        assert r.status_code == 404, r.text
        assert error_of(r)["field"] == "sessionKey"
    unauthenticated = await api.client.get(files_url("nope"))
    assert unauthenticated.status_code == 401


async def test_tenants_never_see_each_others_files(api: Api) -> None:
    await api.post_run("hi", sessionKey="alices", user="alice")
    await api.post_run("hi", sessionKey="mallorys", user="mallory")
    await api.post_run("hi", sessionKey="same", user="alice")
    await api.post_run("hi", sessionKey="same", user="mallory")
    assert (await upload(api, "alices", "secret.txt", b"a", user="alice")).status_code == 201
    assert (await upload(api, "mallorys", "secret.txt", b"m", user="mallory")).status_code == 201
    assert (await upload(api, "same", "f.txt", b"alice's", user="alice")).status_code == 201

    for owner, intruder, key in (
        ("alice", "mallory", "alices"),
        ("mallory", "alice", "mallorys"),
    ):
        for r in (
            await listing(api, key, user=intruder),
            await api.client.get(files_url(key, "secret.txt"), headers=auth(intruder)),
            await upload(api, key, "secret.txt", b"pwned", user=intruder),
            await upload(api, key, "new.txt", b"pwned", user=intruder),
            await api.client.delete(files_url(key, "secret.txt"), headers=auth(intruder)),
        ):
            assert r.status_code == 404, (intruder, key, r.text)
            assert error_of(r)["message"] == f"session {key!r} not found"
        mine = await api.client.get(files_url(key, "secret.txt"), headers=auth(owner))
        assert mine.content == owner[0].encode()
        assert [f["path"] for f in (await listing(api, key, user=owner)).json()["files"]] == [
            "secret.txt"
        ]

    # The same session key in two tenants: two sessions, two workspaces.
    assert (await listing(api, "same", user="mallory")).json()["files"] == []
    other = await api.client.get(files_url("same", "f.txt"), headers=auth("mallory"))
    assert other.status_code == 404 and error_of(other)["field"] == "path"


INJECTIONS = [
    (
        'evil"; filename=x.html',
        "attachment; filename=\"evil__ filename=x.html\"; filename*=UTF-8''"
        "evil%22%3B%20filename%3Dx.html",
    ),
    (
        "r\u00e9sum\u00e9 \u65e5\u672c.pdf",
        "attachment; filename=\"r_sum_ __.pdf\"; filename*=UTF-8''"
        "r%C3%A9sum%C3%A9%20%E6%97%A5%E6%9C%AC.pdf",
    ),
    (
        "a\u2028b%0d.txt",  # a Unicode line separator and a literal "%0d"
        "attachment; filename=\"a_b_0d.txt\"; filename*=UTF-8''a%E2%80%A8b%250d.txt",
    ),
    ("x;y,z'*.txt", "attachment; filename=\"x_y_z__.txt\"; filename*=UTF-8''x%3By%2Cz%27%2A.txt"),
]


async def test_stored_names_cannot_inject_headers(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    for name, disposition in INJECTIONS:
        put = await upload(api, "ws", "dir/" + quote(name), b"data")
        assert put.status_code == 201, put.text
        got = await api.client.get(files_url("ws", "dir/" + quote(name)), headers=auth())
        assert got.status_code == 200 and got.content == b"data"
        assert got.headers["content-disposition"] == disposition
        assert "set-cookie" not in got.headers
        assert got.headers["content-disposition"].isascii()


SERVED_AS = [
    ("page.html", "text/html; charset=utf-8"),
    ("page.htm", "text/html; charset=utf-8"),
    ("logo.svg", "image/svg+xml; charset=utf-8"),
    ("app.js", "text/javascript; charset=utf-8"),
    ("doc.xhtml", "application/xhtml+xml; charset=utf-8"),
    ("no-extension", "application/octet-stream"),
    ("archive.tar.gz", "application/gzip"),
    ("photo.png", "image/png"),
]


async def test_active_content_is_an_attachment_that_cannot_run(api: Api) -> None:
    await api.post_run("hi", sessionKey="ws")
    html = b"<html><script>alert(document.cookie)</script></html>"
    for path, content_type in SERVED_AS:
        await upload(api, "ws", path, html, **{"Content-Type": "text/html"})
        got = await api.client.get(files_url("ws", path), headers=auth())
        assert got.status_code == 200 and got.content == html
        assert got.headers["content-type"] == content_type, path
        assert got.headers["content-disposition"].startswith("attachment;")
        assert got.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in got.headers["content-security-policy"]
        assert got.headers["cache-control"] == "private, no-cache"


async def test_the_agent_and_the_api_share_the_files(
    api: Api, database: Database, alice: Principal
) -> None:
    tools = default_tool_registry()
    ctx = await context_for(database, alice, "ws")

    wrote = await tools.execute(
        ctx, ToolCall(id="w", name="write_file", args={"path": "out/report.md", "content": "ok"})
    )
    assert wrote.ok
    listed = (await listing(api, "ws")).json()["files"]
    assert [(f["path"], f["sha256"]) for f in listed] == [("out/report.md", wrote.result["sha256"])]
    got = await api.client.get(files_url("ws", "out/report.md"), headers=auth())
    assert got.content == b"ok"

    assert (await upload(api, "ws", "in/data.csv", b"a,b\n1,2\n")).status_code == 201
    assert (await upload(api, "ws", "in/blob", b"\xff\x00")).status_code == 201
    read = await tools.execute(
        ctx, ToolCall(id="r", name="read_file", args={"path": "in/data.csv"})
    )
    assert read.ok and read.result["content"] == "a,b\n1,2\n"
    blob = await tools.execute(ctx, ToolCall(id="b", name="read_file", args={"path": "in/blob"}))
    assert blob.ok and blob.result["encoding"] == "base64" and blob.result["content"] == "/wA="

    await api.client.delete(files_url("ws", "out/report.md"), headers=auth())
    gone = await tools.execute(
        ctx, ToolCall(id="g", name="read_file", args={"path": "out/report.md"})
    )
    assert not gone.ok and gone.error == "no such file: out/report.md"


async def test_openapi_documents_the_file_routes(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    item = spec["paths"]["/api/agent-runtime/sessions/{sessionKey}/files/{path}"]
    assert set(item) == {"get", "put", "delete"}
    assert {"200", "201", "401", "404", "409", "413", "422"} <= set(item["put"]["responses"])
    assert "application/octet-stream" in item["put"]["requestBody"]["content"]
    assert {"200", "304", "404", "422"} <= set(item["get"]["responses"])
    listing_op = spec["paths"]["/api/agent-runtime/sessions/{sessionKey}/files"]["get"]
    assert {p["name"] for p in listing_op["parameters"]} >= {"prefix", "limit", "after"}
