"""The host directories of one sandboxed call, created fresh and removed afterwards.

```
<tmp>/agent-runtime-sandbox-XXXX/   0711, server-owned: traversable, not listable
├── workspace/   0700, sandbox uid: the session's files; the sandbox's working directory
├── run/         0755, server-owned, mounted read-only: the program file, passwd and group
└── tmp/         0700, sandbox uid: TMPDIR of the unsafe subprocess mode (bubblewrap: a tmpfs)
```
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Layout:
    """The per-call directories (see the module docstring)."""

    root: Path

    @property
    def workspace(self) -> Path:
        """The copy of the session workspace (read-write for the sandbox)."""
        return self.root / "workspace"

    @property
    def run(self) -> Path:
        """Read-only inputs: the program file, `passwd` and `group`."""
        return self.root / "run"

    @property
    def tmp(self) -> Path:
        """Scratch space of the unsafe subprocess mode."""
        return self.root / "tmp"


def create_layout(owner_uid: int | None, inner_uid: int) -> Layout:
    """Fresh directories; `workspace` and `tmp` belong to `owner_uid` (None: to this process)."""
    layout = Layout(Path(tempfile.mkdtemp(prefix="agent-runtime-sandbox-")))
    try:
        layout.root.chmod(0o711)  # modes set explicitly: the worker's umask may be strict
        layout.run.mkdir()
        layout.run.chmod(0o755)
        write_input(layout, "passwd", f"sandbox:x:{inner_uid}:{inner_uid}::/workspace:/bin/sh\n")
        write_input(layout, "group", f"sandbox:x:{inner_uid}:\n")
        for private in (layout.workspace, layout.tmp):
            private.mkdir(mode=0o700)
            if owner_uid is not None:
                os.chown(private, owner_uid, owner_uid)
    except BaseException:
        remove_layout(layout)
        raise
    return layout


def write_input(layout: Layout, name: str, text: str) -> None:
    """Put a read-only input (e.g. the program) in `run/`, readable by the sandbox uid."""
    path = layout.run / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)


def remove_layout(layout: Layout) -> None:
    """Delete the call's directories, even ones the sandbox made unreadable (chmod 000)."""
    try:
        shutil.rmtree(layout.root)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    # Not root, and the sandbox (running as our uid) removed permissions: give them back. By now
    # no sandboxed process is alive, so nothing can swap a directory for a symlink meanwhile.
    for dirpath, dirnames, _ in os.walk(layout.root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(layout.root, ignore_errors=True)
    if layout.root.exists():
        log.warning("could not remove a sandbox directory", path=str(layout.root))
