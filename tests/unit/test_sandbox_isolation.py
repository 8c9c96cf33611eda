"""Isolation detection and the sandbox command line (real bubblewrap: install it, never skipped)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.config import Settings
from app.tools.sandbox.detect import describe_isolation, detect_isolation, probe, refusal_hint
from app.tools.sandbox.isolation import Isolation
from app.tools.sandbox.layout import Layout, create_layout, remove_layout, write_input
from app.tools.sandbox.limits import Limits
from app.tools.sandbox.runner import run_process

# Never beside another test (`make test` runs these after the parallel part): they count the
# sandbox user's processes, which another test's sandbox would add to.
pytestmark = pytest.mark.serial

UID = 65534
ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def bubblewrap() -> Isolation:
    """The isolation of this machine; fails loudly (never skips) without bubblewrap."""
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap is required by the sandbox tests: apt-get install -y bubblewrap",
            pytrace=False,
        )
    isolation = detect_isolation("bubblewrap", UID)
    if not isolation.available:
        pytest.fail(f"bubblewrap cannot sandbox here: {isolation.reason}", pytrace=False)
    return isolation


@pytest.fixture
def layout(bubblewrap: Isolation) -> Iterator[Layout]:
    made = create_layout(bubblewrap.owner_uid, bubblewrap.inner_uid)
    try:
        yield made
    finally:
        remove_layout(made)


def test_this_machine_has_bubblewrap(bubblewrap: Isolation) -> None:
    assert bubblewrap.kind == "bubblewrap" and bubblewrap.available
    if ROOT:  # the code never runs as host root, or RLIMIT_NPROC would not apply
        assert bubblewrap.drop_privileges and bubblewrap.host_uid == UID


def test_missing_or_broken_bubblewrap_disables_code_execution() -> None:
    missing = detect_isolation("bubblewrap", UID, None)
    assert not missing.available
    assert "no sandbox is available" in missing.reason
    assert "apt-get install -y bubblewrap" in missing.reason
    broken = detect_isolation("bubblewrap", UID, "/bin/false")
    assert not broken.available and "cannot create a sandbox" in broken.reason
    assert broken.reason.endswith("; see docs/deployment.md#troubleshooting")
    disabled = detect_isolation("disabled", UID)
    assert not disabled.available and "disabled by configuration" in disabled.reason
    with pytest.raises(RuntimeError, match="code execution is disabled"):
        disabled.invocation(
            Layout(Path("/nonexistent")), ["true"], Limits.from_settings(Settings())
        )


def mounts(argv: list[str]) -> list[tuple[str, str, str]]:
    """(option, source, destination) of every bind mount in a bwrap command line."""
    binds = ("--bind", "--ro-bind", "--ro-bind-try", "--dev-bind")
    return [(a, argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in binds]


def test_command_line_isolates(bubblewrap: Isolation, layout: Layout) -> None:
    limits = Limits.from_settings(Settings(), 5)
    inv = bubblewrap.invocation(layout, ["/usr/bin/python3", "/sandbox/main.py"], limits)
    argv = inv.argv
    assert inv.env == {"PATH": "/usr/bin:/bin"}  # no server secrets, even for bwrap itself
    for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and "--clearenv" in argv
    assert argv[argv.index("--proc") + 1] == "/proc" and argv[argv.index("--dev") + 1] == "/dev"
    writable = [(src, dst) for opt, src, dst in mounts(argv) if opt == "--bind"]
    assert writable == [(str(layout.workspace), "/workspace")]
    for _, src, _ in mounts(argv):
        assert src.startswith(("/usr", "/etc/", str(layout.root))), src
    assert argv[-2:] == ["/usr/bin/python3", "/sandbox/main.py"]
    networked = bubblewrap.invocation(layout, ["true"], limits, network=True)
    assert "--unshare-net" not in networked.argv
    assert ("--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf") in mounts(networked.argv)


async def run(isolation: Isolation, layout: Layout, script: str) -> tuple[int | None, str]:
    write_input(layout, "main.sh", script)
    limits = Limits.from_settings(Settings(sandbox_max_processes=16), 10)
    argv = ["/bin/sh", isolation.program_path(layout, "main.sh")]
    result = await run_process(
        lambda fd: isolation.invocation(layout, argv, limits, info_fd=fd),
        timeout_seconds=10,
        max_chars=10_000,
    )
    return result.exit_code, result.stdout.text() + result.stderr.text()


SCRIPT = "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; ls /; hostname"


async def test_code_runs_unprivileged_in_its_own_namespaces(
    bubblewrap: Isolation, layout: Layout
) -> None:
    code, out = await run(bubblewrap, layout, SCRIPT)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == str(UID)
    assert lines[1:4] == [
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
    ]
    assert "root" not in lines and "work" not in lines and lines[-1] == "sandbox"


@pytest.mark.skipif(not ROOT, reason="the setuid variant exists only for a root server")
async def test_setuid_variant_for_hosts_without_user_namespaces(
    bubblewrap: Isolation, layout: Layout
) -> None:
    setuid = replace(bubblewrap, userns=False)
    assert probe(setuid) is None
    fork_40 = "python3 -c 'import os\nfor _ in range(40): os.fork() or os._exit(0)' 2>&1"
    code, out = await run(setuid, layout, f"{SCRIPT}; {fork_40} | tail -1")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == str(UID)
    assert lines[1:4] == [
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
    ]
    assert "BlockingIOError" in lines[-1]  # RLIMIT_NPROC holds


def running(marker: str) -> bool:
    """Whether any process's command line contains `marker`."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize(
    "userns", [True, pytest.param(False, marks=pytest.mark.skipif(not ROOT, reason="root only"))]
)
async def test_timeout_leaves_no_process_behind(
    bubblewrap: Isolation, layout: Layout, userns: bool
) -> None:
    isolation = replace(bubblewrap, userns=userns)
    write_input(layout, "main.sh", "sleep 974 & setsid sleep 974 & echo up; sleep 974")
    argv = ["/bin/sh", isolation.program_path(layout, "main.sh")]
    limits = Limits.from_settings(Settings(), 1)
    result = await run_process(
        lambda fd: isolation.invocation(layout, argv, limits, info_fd=fd),
        timeout_seconds=1,
        max_chars=100,
    )
    assert result.timed_out and result.stdout.text() == "up\n"
    assert not running("sleep 974")  # at once: the pid namespace is gone when run_process returns


def test_unsafe_subprocess_still_drops_privileges(layout: Layout) -> None:
    unsafe = detect_isolation("unsafe-subprocess", UID)
    assert unsafe.kind == "unsafe-subprocess"
    inv = unsafe.invocation(layout, ["/usr/bin/true"], Limits.from_settings(Settings()))
    assert inv.cwd == str(layout.workspace) and inv.env["HOME"] == str(layout.workspace)
    if ROOT:
        assert inv.argv[0].endswith("setpriv") and f"--reuid={UID}" in inv.argv
        assert "--no-new-privs" in inv.argv


def test_describe_isolation(bubblewrap: Isolation) -> None:
    described = describe_isolation(Settings())
    assert described["mode"] == "bubblewrap" and described["available"] is True
    assert described["network"] is False and described["python"] == "/usr/bin/python3"
    assert described["limits"]["timeoutSeconds"] == 30
    assert not describe_isolation(Settings(sandbox_mode="disabled"))["available"]


@pytest.mark.parametrize(
    ("problem", "cause"),
    [
        ("userns: bwrap: No permissions to create new namespace, likely …", "seccomp profile"),
        ("userns: bwrap: setting up uid map: Permission denied", "apparmor_restrict"),
        ("userns: bwrap: Can't mount proc on /newroot/proc: Operation not permitted", "procMount"),
        ("userns: bwrap: Failed to make / slave: Permission denied", "docker-default AppArmor"),
        ("userns: exit status 1", None),
    ],
)
def test_a_refused_sandbox_says_what_likely_refused_it(problem: str, cause: str | None) -> None:
    hint = refusal_hint(problem)
    assert hint.endswith("see docs/deployment.md#troubleshooting")
    assert (cause in hint) if cause else ("likely cause" not in hint), hint
