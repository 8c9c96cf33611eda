"""`run_python` / `run_shell` against the real Postgres and a real bubblewrap sandbox.

Besides the happy path these prove the attacks fail: network, reading server files and secrets,
fork bombs, memory hogs, runaway process trees, huge output, symlinks and path tricks. They need
bubblewrap and fail (never skip) without it: `apt-get install -y bubblewrap`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import app
from app.auth.principal import Principal
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry
from app.tools.sandbox import detect_isolation, sandbox_tools
from app.tools.workspace import Workspace
from tests.integration.tool_support import context_for

# Never beside another test (`make test` runs these after the parallel part): they count the
# sandbox user's processes, which another test's sandbox would add to.
pytestmark = pytest.mark.serial

SANDBOX_UID = 65534
REPO = Path(app.__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="module")
def bubblewrap() -> None:
    """Fail loudly (not skip) when the machine cannot sandbox."""
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap is required by the sandbox tests: apt-get install -y bubblewrap",
            pytrace=False,
        )
    isolation = detect_isolation("bubblewrap", SANDBOX_UID)
    if not isolation.available:
        pytest.fail(f"bubblewrap cannot sandbox here: {isolation.reason}", pytrace=False)


@pytest.fixture
def tools() -> ToolRegistry:
    return ToolRegistry(sandbox_tools())


async def call(tools: ToolRegistry, ctx: ToolContext, name: str, **args: Any) -> dict[str, Any]:
    result: ToolResult = await tools.execute(ctx, ToolCall(id="c", name=name, args=args))
    assert result.ok, result.error
    assert isinstance(result.result, dict)
    return result.result


def processes() -> list[tuple[int, int, str]]:
    """(pid, real uid, command line) of every process on the host."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
        found.append((int(entry), uid, cmdline))
    return found


def leftovers(marker: str) -> list[tuple[int, int, str]]:
    """Processes that look like the sandbox's: its uid (when we are root) or `marker`."""
    sandbox_uid = SANDBOX_UID if os.geteuid() == 0 else -1
    return [p for p in processes() if p[1] == sandbox_uid or marker in p[2]]


async def test_python_sees_changes_and_deletes_workspace_files(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    ws = Workspace.for_tool(ctx)
    await ws.write("data/input.txt", b"3\n4\n")
    await ws.write("old.txt", b"obsolete")
    await ws.write("keep.txt", b"unchanged")
    await ws.write("helper.py", b"def double(x):\n    return 2 * x\n")
    code = """
import os, pathlib, helper
numbers = [int(x) for x in open("data/input.txt")]
print("sum", helper.double(sum(numbers)), "cwd", os.getcwd(), "uid", os.getuid())
pathlib.Path("out").mkdir()
pathlib.Path("out/result.txt").write_text(f"{sum(numbers)}\\n")
pathlib.Path("data/input.txt").write_text("5\\n")
os.remove("old.txt")
"""
    result = await call(tools, ctx, "run_python", code=code)
    assert result["exitCode"] == 0 and not result["timedOut"], result
    assert result["stdout"] == f"sum 14 cwd /workspace uid {SANDBOX_UID}\n"
    assert result["stderr"] == "" and result["sandbox"] == "bubblewrap"
    assert result["files"] == {
        "written": [{"path": "data/input.txt", "size": 2}, {"path": "out/result.txt", "size": 2}],
        "deleted": ["old.txt"],
        "skipped": [],
    }
    stored = {info.path: content for info, content in await ws.read_all()}
    assert stored == {
        "data/input.txt": b"5\n",
        "helper.py": b"def double(x):\n    return 2 * x\n",
        "keep.txt": b"unchanged",
        "out/result.txt": b"7\n",
    }


async def test_shell_pipes_stderr_and_exit_code(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    result = await call(
        tools,
        ctx,
        "run_shell",
        command="printf 'b\\na\\nc\\n' | sort | tr a-z A-Z > sorted.txt && cat sorted.txt; "
        "echo oops >&2; exit 3",
    )
    assert (result["exitCode"], result["stdout"], result["stderr"]) == (3, "A\nB\nC\n", "oops\n")
    _, content = await Workspace.for_tool(ctx).read("sorted.txt")
    assert content == b"A\nB\nC\n"


async def test_no_network(database: Database, alice: Principal, tools: ToolRegistry) -> None:
    connections = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ctx = await context_for(database, alice)
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3)
    print("CONNECTED")
except OSError as exc:
    print("connect failed:", type(exc).__name__)
try:
    socket.getaddrinfo("example.com", 443)
    print("RESOLVED")
except OSError as exc:
    print("dns failed:", type(exc).__name__)
print(sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]))
"""
    try:
        result = await call(tools, ctx, "run_python", code=code)
    finally:
        server.close()
        await server.wait_closed()
    assert result["stdout"] == (
        "connect failed: ConnectionRefusedError\ndns failed: gaierror\n['lo']\n"
    ), result
    assert connections == 0


async def test_cannot_read_server_files_or_secrets(
    database: Database, alice: Principal, tools: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "sandbox-canary-4f1c2a"
    monkeypatch.setenv("SUPABASE_JWT_SECRET", canary)
    monkeypatch.setenv("DATABASE_URL_CANARY", canary)
    ctx = await context_for(database, alice)
    targets = [
        str(REPO / "app" / "config.py"),
        "/work/main/app/config.py",
        "/work",
        "/root",
        "/home",
        "/etc/shadow",
        "/var/run",
        "/proc/1/root/etc/shadow",
    ]
    code = f"""
import glob, json, os
for target in {targets!r}:
    try:
        if os.path.isdir(target) and os.listdir(target):
            print("LISTED", target)
        else:
            open(target, "rb").read()
            print("READ", target)
    except OSError as exc:
        print("denied", type(exc).__name__)
print(sorted(os.environ))
print("root:", json.dumps(sorted(os.listdir("/"))))
print("etc:", json.dumps(sorted(os.listdir("/etc"))))
for path in glob.glob("/proc/[0-9]*/environ"):
    print(path, open(path, "rb").read())
status = open("/proc/self/status").read()
print([line for line in status.splitlines() if line.startswith(("CapEff", "CapBnd", "NoNewPrivs"))])
"""
    result = await call(tools, ctx, "run_python", code=code)
    out = result["stdout"]
    assert "READ" not in out and "LISTED" not in out, out
    assert canary not in out + result["stderr"]
    assert "SUPABASE" not in out and "DATABASE_URL" not in out
    # the sandbox's own root holds only what was mounted into it
    listings = {
        line.split(": ", 1)[0]: set(json.loads(line.split(": ", 1)[1]))
        for line in out.splitlines()
        if line.startswith(("root: ", "etc: "))
    }
    assert listings["root"] <= {
        *("bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sandbox", "sbin"),
        *("tmp", "usr", "workspace"),
    }, listings
    assert listings["etc"] <= {"alternatives", "group", "ld.so.cache", "localtime", "passwd"}
    names = "['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE', 'PYTHONPATH', "
    assert names + "'PYTHONUNBUFFERED', 'TMPDIR']\n" in out
    assert "'CapEff:\\t0000000000000000', 'CapBnd:\\t0000000000000000', 'NoNewPrivs:\\t1'" in out


async def test_fork_bomb_is_contained(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_max_processes=32)
    counted = await call(
        tools,
        ctx,
        "run_python",
        code="import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n"
        "        os._exit(0)\n    n += 1\nprint('forked', n)\n",
        timeout_seconds=10,
    )
    assert not counted["timedOut"]
    assert counted["stdout"].startswith("forked ") and int(counted["stdout"].split()[1]) < 32

    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = await call(tools, ctx, "run_python", code=bomb, timeout_seconds=2)
    assert result["timedOut"] and result["durationSeconds"] < 6, result
    assert leftovers("/sandbox/main.py") == []
    alive = await asyncio.create_subprocess_exec("/bin/true")  # the host can still fork
    assert await alive.wait() == 0


async def test_memory_hog_is_contained(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_memory_mb=256)
    code = """
try:
    block = bytearray(2 * 1024**3)
    print("ALLOCATED 2 GB")
except MemoryError:
    print("no 2 GB")
hog = []
while True:
    hog.append(b"x" * 10_000_000)
"""
    result = await call(tools, ctx, "run_python", code=code, timeout_seconds=20)
    assert result["stdout"] == "no 2 GB\n" and not result["timedOut"], result
    assert result["exitCode"] != 0 and "MemoryError" in result["stderr"]


async def test_timeout_kills_the_whole_tree(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    command = (
        "sleep 987 & sleep 987 & setsid sleep 987 & nohup sleep 987 >/dev/null 2>&1 & "
        "(trap '' TERM HUP; sleep 987) & echo started; sleep 987"
    )
    result = await call(tools, ctx, "run_shell", command=command, timeout_seconds=2)
    assert result["timedOut"] and result["stdout"] == "started\n", result
    assert 2 <= result["durationSeconds"] < 6
    assert leftovers("sleep 987") == []


async def test_output_is_truncated_visibly(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_output_max_chars=1000)
    result = await call(tools, ctx, "run_python", code="print('A' * 50_000 + 'END')")
    out = result["stdout"]
    assert result["stdoutTruncated"] and not result["stderrTruncated"]
    assert out == "A" * 500 + "\n…[truncated 49004 chars]…\n" + "A" * 496 + "END\n"


async def test_symlinks_and_special_files_are_not_copied_back(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    ws = Workspace.for_tool(ctx)
    await ws.write("a.txt", b"hello")
    await ws.write("sub/x.txt", b"x")
    command = (
        "ln -s /etc/passwd leak && ln -sf /etc/passwd a.txt && rm -r sub && ln -s /etc sub && "
        "ln -s / rootlink && mkfifo pipe && echo ok > real.txt"
    )
    result = await call(tools, ctx, "run_shell", command=command)
    assert result["exitCode"] == 0, result
    files = result["files"]
    assert files["written"] == [{"path": "real.txt", "size": 3}]
    assert files["deleted"] == ["a.txt", "sub/x.txt"]
    assert {s["path"]: s["reason"].split(":")[0] for s in files["skipped"]} == {
        "a.txt": "symlink",
        "leak": "symlink",
        "pipe": "fifo",
        "rootlink": "symlink",
        "sub": "symlink",
    }
    stored = {info.path: content for info, content in await ws.read_all()}
    assert stored == {"real.txt": b"ok\n"}


def escaped_anywhere() -> bool:
    return any(os.path.exists(p) for p in ("/escape.txt", f"{tempfile.gettempdir()}/escape.txt"))


async def test_paths_cannot_escape(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    code = r"""
import os
for name in ["../escape.txt", "/escape.txt", "/tmp/../escape.txt", "/usr/escape.txt"]:
    try:
        open(name, "w").write("x")
        print("WROTE", name)
    except OSError as exc:
        print("denied", name, exc.strerror)
for name in ["back\\slash.txt", "new\nline.txt", "...", "~home.txt", b"\xff.txt"]:
    open(name, "w").write("x")
os.makedirs("d/..e", exist_ok=True)
open("d/ok.txt", "w").write("ok")
"""
    result = await call(tools, ctx, "run_python", code=code)
    assert "WROTE" not in result["stdout"], result
    assert result["stdout"].count("Read-only file system") == 4
    assert result["files"]["written"] == [{"path": "d/ok.txt", "size": 2}]
    assert len(result["files"]["skipped"]) == 5
    assert {info.path for info, _ in await Workspace.for_tool(ctx).read_all()} == {"d/ok.txt"}
    assert not escaped_anywhere()


async def test_files_over_the_caps_are_skipped(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(
        database, alice, workspace_max_file_bytes=1000, workspace_max_total_bytes=1500
    )
    code = "open('big.bin', 'wb').write(b'x' * 5000)\nopen('a', 'w').write('a' * 800)\n"
    code += "open('b', 'w').write('b' * 800)\n"
    result = await call(tools, ctx, "run_python", code=code)
    assert result["files"]["written"] == [{"path": "a", "size": 800}]
    reasons = {s["path"]: s["reason"] for s in result["files"]["skipped"]}
    assert "per-file limit of 1000 bytes" in reasons["big.bin"]
    assert "workspace limit of 1500 bytes" in reasons["b"]


async def test_timeout_is_capped_and_validated(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_max_timeout_seconds=5)
    result = await call(tools, ctx, "run_shell", command="true", timeout_seconds=1000)
    assert result["timeoutSeconds"] == 5 and result["exitCode"] == 0
    bad = await tools.execute(
        ctx, ToolCall(id="c", name="run_shell", args={"command": "true", "timeout_seconds": 0})
    )
    assert not bad.ok and "timeout_seconds" in (bad.error or "")


async def test_disabled_mode_refuses(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_mode="disabled")
    result = await tools.execute(ctx, ToolCall(id="c", name="run_python", args={"code": "1"}))
    assert not result.ok
    assert (result.error or "").startswith("code execution is disabled")


async def test_unsafe_subprocess_mode_still_limits_and_syncs(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, sandbox_mode="unsafe-subprocess")
    code = (
        "import os, resource\nprint(os.getuid() != 0, resource.getrlimit(resource.RLIMIT_NPROC))\n"
    )
    code += "open('made.txt', 'w').write('m')\n"
    result = await call(tools, ctx, "run_python", code=code)
    assert result["sandbox"] == "unsafe-subprocess"
    assert result["stdout"] == "True (64, 64)\n", result
    assert result["files"]["written"] == [{"path": "made.txt", "size": 1}]


async def test_result_is_storable_as_jsonb(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice)
    code = (
        "import os, sys\nsys.stdout.buffer.write(b'nul:\\0 bad:\\xff\\n')\n"
        "os.close(os.open(b'\\xfe\\x00'[:1] + b'.txt', os.O_CREAT | os.O_WRONLY))\n"
    )
    result = await call(tools, ctx, "run_python", code=code)
    assert result["stdout"] == "nul:\ufffd bad:\ufffd\n"
    assert result["files"]["skipped"][0]["path"] == "\ufffd.txt"
    async with database.owner() as s:
        stored = await s.scalar(text("SELECT CAST(:doc AS jsonb)"), {"doc": json.dumps(result)})
    assert stored["stdout"] == result["stdout"]
