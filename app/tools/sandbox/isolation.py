"""Which isolation this machine offers, and the command line that runs a program inside it.

`detect.py` probes what works here (once per process) by running `/usr/bin/true` the way real
calls run, trying in order:

1. bubblewrap with a user namespace (`userns`): when the server is root, `setpriv` first drops the
   bwrap process to `sandbox_uid` — inside a user namespace created by root the code would still be
   uid 0 on the host, for which the kernel ignores `RLIMIT_NPROC`.
2. bubblewrap without one (`setuid`, root only, for hosts that forbid user namespaces): bwrap keeps
   just CAP_DAC_READ_SEARCH/SETUID/SETGID/SETPCAP, and `setpriv` inside switches to `sandbox_uid`
   and clears every capability (bounding set included) before the code starts.

Either way the code gets new pid, net (unless `sandbox_network`), ipc, uts and cgroup namespaces,
no capabilities, `no_new_privs`, read-only `/usr` (+ `/bin`, `/lib*` links) and a few `/etc` files,
a fresh `/proc`, a minimal `/dev`, a size-capped tmpfs `/tmp`, the workspace copy at `/workspace`,
and an environment built from nothing. `--die-with-parent` and the pid namespace make sure that
killing the sandbox's init kills everything the code started (see `runner.py`). Without a usable
bwrap the mode is `disabled` (tools refuse) unless `sandbox_mode=unsafe-subprocess` explicitly
asks for a plain subprocess, which isolates nothing but still applies the limits, drops root,
and starts from an empty environment in a private temporary directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from app.config import Settings
from app.tools.sandbox.layout import Layout
from app.tools.sandbox.limits import Limits

Kind = Literal["bubblewrap", "unsafe-subprocess", "disabled"]

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
WORKDIR = "/workspace"
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
"""Interpreters under the read-only `/usr` bind, in order of preference (never the server's venv;
`/usr/local/bin/python3` is the only one in `python:*-slim` images)."""
RUNDIR = "/sandbox"
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/gai.conf")


@dataclass(frozen=True, slots=True)
class Invocation:
    """How to start the sandbox: argv, the environment of that process, its working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    info_fd: int | None = None
    """A pipe's write end bwrap reports the sandbox's init pid on (passed to the child)."""


@dataclass(frozen=True, slots=True)
class Isolation:
    """The isolation in use; `kind == "disabled"` means code execution is refused (`reason`)."""

    kind: Kind
    reason: str = ""
    host_uid: int | None = None
    """The uid sandboxed code runs as on the host."""
    inner_uid: int = 0
    """The uid sandboxed code sees (`id -u`)."""
    userns: bool = False
    drop_privileges: bool = False
    """The server is root: `setpriv` switches to `host_uid` before the code runs."""
    bwrap: str | None = None
    bwrap_version: tuple[int, ...] = ()
    setpriv: str | None = None
    prlimit: str | None = None

    @property
    def available(self) -> bool:
        """Whether code may run at all."""
        return self.kind != "disabled"

    @property
    def owner_uid(self) -> int | None:
        """Who must own the workspace copy (None: this process, which needs no `chown`)."""
        return self.host_uid if self.drop_privileges else None

    def workdir(self, layout: Layout) -> str:
        """The working directory (the workspace copy) as the code sees it."""
        return WORKDIR if self.kind == "bubblewrap" else str(layout.workspace)

    def program_path(self, layout: Layout, name: str) -> str:
        """Where the file `layout.run / name` appears to the code."""
        return f"{RUNDIR}/{name}" if self.kind == "bubblewrap" else str(layout.run / name)

    def invocation(
        self,
        layout: Layout,
        argv: list[str],
        limits: Limits,
        *,
        network: bool = False,
        env: dict[str, str] | None = None,
        info_fd: int | None = None,
    ) -> Invocation:
        """The command that runs `argv` (limits applied) in this isolation, in `layout`.

        `info_fd`: an inheritable pipe end on which bwrap writes `{"child-pid": …}` (its init).
        """
        if not self.available or self.prlimit is None:
            raise RuntimeError(f"code execution is disabled: {self.reason}")
        program = limits.prlimit_argv(self.prlimit) + argv
        if self.kind == "unsafe-subprocess":
            home = str(layout.workspace)
            code_env = {**_base_env(home, str(layout.tmp)), **(env or {})}
            return Invocation(self._setpriv() + program, code_env, home)
        assert self.bwrap is not None
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
        args += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        if not network:
            args.append("--unshare-net")
        if self.userns:
            uid = str(self.inner_uid)
            args += ["--unshare-user", "--uid", uid, "--gid", uid, "--cap-drop", "ALL"]
            if self.bwrap_version >= (0, 8):
                args.append("--disable-userns")  # no nested namespaces: less kernel surface
            outer, inner = self._setpriv(), program
        else:
            # Privileged bwrap keeps only what it needs to enter the (sandbox-owned, 0700)
            # workspace and setpriv needs to switch uid; setpriv then drops them all.
            args += ["--cap-drop", "ALL"]
            for cap in ("CAP_DAC_READ_SEARCH", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                args += ["--cap-add", cap]
            outer, inner = [], self._setpriv() + program
        args += _mounts(layout, limits, network, size=self.bwrap_version >= (0, 7))
        args += ["--chdir", WORKDIR, "--clearenv"]
        for key, value in {**_base_env(WORKDIR, "/tmp"), **(env or {})}.items():
            args += ["--setenv", key, value]
        # bwrap's own environment shows as /proc/1/environ inside: give it nothing secret.
        return Invocation([*outer, *args, "--", *inner], {"PATH": "/usr/bin:/bin"}, "/", info_fd)

    def _setpriv(self) -> list[str]:
        """`setpriv … --` becoming `host_uid` for good: no groups, capabilities or new privileges.

        Empty when the server is not root (the code then runs as the server's uid, which in the
        bubblewrap modes owns nothing the sandbox can see).
        """
        if not self.drop_privileges:
            return []
        assert self.setpriv is not None and self.host_uid is not None
        uid = str(self.host_uid)
        return [
            self.setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def describe(self, settings: Settings) -> dict[str, Any]:
        """The isolation as JSON, for `/readyz` and docs."""
        return {
            "mode": self.kind,
            "available": self.available,
            "reason": self.reason or None,
            "userns": self.userns,
            "uid": self.host_uid,
            "network": settings.sandbox_network and self.available,
            "bwrap": self.bwrap,
            "bwrapVersion": ".".join(map(str, self.bwrap_version)) or None,
            "python": system_python(),
            "limits": Limits.from_settings(settings).describe(),
        }


def system_python() -> str | None:
    """The interpreter `run_python` uses (None: there is none)."""
    return next((p for p in PYTHONS if os.path.exists(p)), None)


def _base_env(home: str, tmp: str) -> dict[str, str]:
    return {
        "PATH": SYSTEM_PATH,
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _mounts(layout: Layout, limits: Limits, network: bool, *, size: bool) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--dir", "/etc"]
    for path in _ETC_FILES + (_ETC_NETWORK if network else ()):
        args += ["--ro-bind-try", path, path]
    args += ["--ro-bind", str(layout.run / "passwd"), "/etc/passwd"]
    args += ["--ro-bind", str(layout.run / "group"), "/etc/group"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if size:
        args += ["--size", str(limits.tmp_bytes)]
    args += ["--tmpfs", "/tmp", "--ro-bind", str(layout.run), RUNDIR]
    args += ["--bind", str(layout.workspace), WORKDIR, "--remount-ro", "/"]
    return args
