"""Find out which isolation works on this machine (see `isolation.py`).

The probe runs `/usr/bin/true` exactly the way real calls run code, so "available" means a real
call can start; when nothing works the reason says why and how to fix it. A working isolation is
remembered for the life of the process; a failed probe is not, so installing bubblewrap (or
fixing whatever failed) takes effect without a restart.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from typing import Any

from app.config import Settings, get_settings
from app.tools.sandbox.isolation import SYSTEM_PATH, Isolation
from app.tools.sandbox.layout import create_layout, remove_layout
from app.tools.sandbox.limits import MB, Limits

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `apt-get install -y bubblewrap`)"
PROBE_TIMEOUT_SECONDS = 15
PROBE_LIMITS = Limits(
    timeout_seconds=PROBE_TIMEOUT_SECONDS,
    memory_bytes=256 * MB,
    max_processes=16,
    max_file_bytes=MB,
    max_open_files=64,
    tmp_bytes=MB,
    output_max_chars=1000,
)


def _disabled(reason: str) -> Isolation:
    return Isolation(kind="disabled", reason=reason)


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=5, env={}, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


def probe(isolation: Isolation) -> str | None:
    """Run `/usr/bin/true` in `isolation`; None when it worked, else what went wrong."""
    layout = create_layout(isolation.owner_uid, isolation.inner_uid)
    try:
        inv = isolation.invocation(layout, ["/usr/bin/true"], PROBE_LIMITS)
        done = subprocess.run(
            inv.argv,
            env=inv.env,
            cwd=inv.cwd,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            start_new_session=True,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        remove_layout(layout)
    if done.returncode != 0:
        return (done.stderr.strip() or f"exit status {done.returncode}")[:300]
    return None


_found: dict[tuple[str, int, str | None], Isolation] = {}


def detect_isolation(mode: str, sandbox_uid: int, bwrap: str | None = "") -> Isolation:
    """The isolation for `mode` on this machine; `bwrap=""` means look it up on PATH."""
    key = (mode, sandbox_uid, bwrap)
    if (known := _found.get(key)) is None:
        known = _detect(mode, sandbox_uid, bwrap)
        if known.available:
            _found[key] = known
    return known


def _detect(mode: str, sandbox_uid: int, bwrap: str | None) -> Isolation:
    if mode == "disabled":
        return _disabled("code execution is disabled by configuration (SANDBOX_MODE=disabled)")
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if prlimit is None:
        return _disabled("`prlimit` (util-linux) is missing, so limits cannot be applied")
    root = os.geteuid() == 0
    if root and setpriv is None:
        return _disabled("running as root needs `setpriv` (util-linux) to drop privileges")
    base = Isolation(
        kind="unsafe-subprocess",
        host_uid=sandbox_uid if root else os.geteuid(),
        inner_uid=sandbox_uid if root else os.geteuid(),
        drop_privileges=root,
        setpriv=setpriv,
        prlimit=prlimit,
    )
    if mode == "unsafe-subprocess":
        return base
    found = shutil.which("bwrap", path=SYSTEM_PATH) if bwrap == "" else bwrap
    if found is None or not os.access(found, os.X_OK):
        return _disabled(f"no sandbox is available: bubblewrap (bwrap) is missing; {INSTALL_HINT}")
    bubble = replace(
        base,
        kind="bubblewrap",
        inner_uid=sandbox_uid,
        bwrap=found,
        bwrap_version=_bwrap_version(found),
    )
    candidates = [replace(bubble, userns=True)]
    if root:
        candidates.append(replace(bubble, userns=False))
    problems = []
    for candidate in candidates:
        problem = probe(candidate)
        if problem is None:
            return candidate
        problems.append(f"{'userns' if candidate.userns else 'setuid'}: {problem}")
    return _disabled(
        "no sandbox is available: bubblewrap cannot create a sandbox here ("
        + "; ".join(problems)
        + ")"
        + refusal_hint(" ".join(problems))
    )


# bwrap's own messages, and what a container or host usually does to cause them.
_HINTS = (
    (
        ("new namespace", "unshare user ns", "setting up uid map"),
        "user namespaces are refused: Docker's default seccomp profile, the AppArmor "
        "restriction of Ubuntu >= 23.10 (kernel.apparmor_restrict_unprivileged_userns) or the "
        "kernel (user.max_user_namespaces=0)",
    ),
    (
        ("Can't mount proc",),
        "a fresh /proc is refused because the container's /proc has masked paths (Docker: "
        "--security-opt systempaths=unconfined; Kubernetes: procMount: Unmasked, hostUsers: false)",
    ),
    (
        ("make / slave", "Failed to mount", "Permission denied"),
        "mounts are refused, usually by Docker's docker-default AppArmor profile or by SELinux",
    ),
)
DOCS_HINT = "see docs/deployment.md#troubleshooting"


def refusal_hint(problem: str) -> str:
    """What probably causes `problem` and where the fix is documented."""
    for needles, cause in _HINTS:
        if any(needle in problem for needle in needles):
            return f"; likely cause: {cause}; {DOCS_HINT}"
    return f"; {DOCS_HINT}"


def isolation_for(settings: Settings) -> Isolation:
    """The isolation the settings ask for."""
    return detect_isolation(settings.sandbox_mode, settings.sandbox_uid)


def describe_isolation(settings: Settings | None = None) -> dict[str, Any]:
    """How code execution is isolated here, e.g. `{"mode": "bubblewrap", "userns": true, …}`."""
    settings = settings or get_settings()
    return isolation_for(settings).describe(settings)
