"""deploy/seccomp/agent-runtime-bwrap.json: bubblewrap works under it, and it refuses what it says.

The profile is loaded into a real seccomp filter (libseccomp, through `pyseccomp`) in a child
process, which then asks the sandbox detection exactly what `/readyz` asks. A second child
refuses `unshare` the way Docker's default profile does for a process without CAP_SYS_ADMIN, to
show what an operator who forgot the profile gets: code execution disabled, with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

# The probes run sandboxes as the sandbox user, whose processes other serial tests count.
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy" / "seccomp" / "agent-runtime-bwrap.json"
BWRAP_NEEDS = {"clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root"}
BWRAP_NEEDS |= {"sethostname", "prctl", "capset", "seccomp", "execve", "wait4"}
MUST_REFUSE = {"kexec_load", "init_module", "finit_module", "open_by_handle_at", "bpf", "keyctl"}
MUST_REFUSE |= {"add_key", "ptrace", "userfaultfd", "perf_event_open", "io_uring_setup", "reboot"}

# Loads the filter, then prints what the sandbox detection finds (the JSON `/readyz` shows).
CHILD = """
import json, sys
import pyseccomp
rules, mode = json.loads(sys.argv[1]), sys.argv[2]
scf = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
for name, errno, flag in rules:  # flag: only when the first argument has this bit set
    args = [pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag)] if flag else []
    scf.add_rule(pyseccomp.ERRNO(errno), name, *args)
scf.load()
from app.config import Settings
from app.tools.sandbox.detect import describe_isolation
if mode == "add_key":
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    nr = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "add_key")
    libc.syscall(nr, b"user", b"k", b"v", 1, -2)
    print(json.dumps({"errno": ctypes.get_errno()}))
else:
    print(json.dumps(describe_isolation(Settings(_env_file=None))))
"""


def _profile() -> dict[str, Any]:
    document = json.loads(PROFILE.read_text())
    assert isinstance(document, dict)
    return document


def _refused(profile: dict[str, Any]) -> dict[str, int]:
    refused = {}
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO", rule
        assert "args" not in rule and "includes" not in rule and "excludes" not in rule
        for name in rule["names"]:
            refused[name] = rule["errnoRet"]
    return refused


Rule = tuple[str, int, int]
CLONE_NAMESPACE_FLAGS = (0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000)
CLONE_NAMESPACE_FLAGS += (0x40000000,)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
DOCKER_DEFAULT: list[Rule] = [("unshare", 1, 0), ("clone3", 38, 0)]  # clone3: ENOSYS
DOCKER_DEFAULT += [("clone", 1, flag) for flag in CLONE_NAMESPACE_FLAGS]
"""What Docker's default profile does to a process without CAP_SYS_ADMIN (moby/moby#42441)."""


def _rules(profile: dict[str, Any]) -> list[Rule]:
    return [(name, errno, 0) for name, errno in sorted(_refused(profile).items())]


def _child(rules: list[Rule], mode: str = "describe") -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "SANDBOX_MODE": "bubblewrap"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(rules), mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(found, dict)
    return found


def test_profile_allows_what_bwrap_needs_and_refuses_the_rest() -> None:
    profile = _profile()
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    refused = _refused(profile)
    assert not BWRAP_NEEDS & set(refused), sorted(BWRAP_NEEDS & set(refused))
    assert set(refused) >= MUST_REFUSE, sorted(MUST_REFUSE - set(refused))
    assert set(refused.values()) == {1}  # EPERM, as Docker's default profile answers


def test_every_name_is_a_syscall_libseccomp_knows() -> None:
    """A misspelt name would make Docker refuse to start the container (or skip the rule)."""
    profile = _profile()
    arches = [
        getattr(pyseccomp.Arch, a.removeprefix("SCMP_ARCH_")) for a in profile["architectures"]
    ]
    for name in _refused(profile):
        numbers = [pyseccomp.resolve_syscall(arch, name) for arch in arches]
        assert any(n != -1 for n in numbers), name
    assert pyseccomp.resolve_syscall(arches[0], "no_such_syscall") == -1  # the check can fail


def test_the_sandbox_works_under_the_profile() -> None:
    found = _child(_rules(_profile()))
    assert found["mode"] == "bubblewrap", found
    assert found["available"] is True and found["userns"] is True, found


def test_the_profile_really_refuses() -> None:
    assert _child([], "add_key")["errno"] != 1  # without the filter: some other error
    assert _child(_rules(_profile()), "add_key")["errno"] == 1  # EPERM


def test_without_the_profile_code_execution_is_disabled_with_the_reason() -> None:
    found = _child(DOCKER_DEFAULT)
    assert found["mode"] == "disabled" and found["available"] is False, found
    reason = found["reason"]
    assert "bubblewrap cannot create a sandbox here" in reason, reason
    assert "Operation not permitted" in reason, reason
    assert "docs/deployment.md" in reason, reason
