"""Copy the session workspace out of Postgres into a sandbox directory, and the changes back.

Only regular files travel back. The directory is walked through directory file descriptors with
`O_NOFOLLOW` everywhere and every file is `fstat`ed after opening, so a symlink (or a directory
swapped for one) planted by the sandbox can never make the server read a host file; symlinks,
fifos, sockets and devices are reported as skipped. Names the workspace refuses (`normalize_path`)
and files over the per-file cap are skipped too, and reading stops at the workspace's total cap,
so memory stays bounded whatever the sandbox wrote. A workspace file counts as deleted only when
no regular file is left at its path and its directory was read completely.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.tools.base import ToolError
from app.tools.workspace import FileInfo, InvalidPathError, Workspace, normalize_path

MAX_SCAN_ENTRIES = 10_000
"""Directory entries examined at most; beyond, nothing more is copied back or deleted."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def materialize(
    files: list[tuple[FileInfo, bytes]], root: Path, owner_uid: int | None
) -> dict[str, str]:
    """Write the workspace `files` under `root` (owned by `owner_uid`); returns path → SHA-256."""
    before: dict[str, str] = {}
    for info, content in files:
        parts = normalize_path(info.path).split("/")
        parent = root
        for part in parts[:-1]:
            parent = parent / part
            if not parent.is_dir():
                parent.mkdir(mode=0o755)
                if owner_uid is not None:
                    os.chown(parent, owner_uid, owner_uid)
        fd = os.open(
            parent / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644
        )
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            if owner_uid is not None:
                os.fchown(f.fileno(), owner_uid, owner_uid)
        before[info.path] = hashlib.sha256(content).hexdigest()
    return before


@dataclass
class Changes:
    """What the sandbox changed: files to store, workspace paths to delete, and what was skipped."""

    written: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)


@dataclass
class _Scan:
    before: dict[str, str]
    max_file_bytes: int
    max_total_bytes: int
    changes: Changes = field(default_factory=Changes)
    present: set[str] = field(default_factory=set)
    unread: list[str] = field(default_factory=list)
    """Directory prefixes not fully read ("" = everything): no deletions under them."""
    entries: int = 0
    kept_bytes: int = 0

    def skip(self, path: str, reason: str) -> None:
        # Names are bytes on disk: show undecodable ones with U+FFFD (JSONB refuses surrogates).
        shown = path.encode(errors="surrogateescape").decode(errors="replace")
        self.changes.skipped.append({"path": shown, "reason": reason})


def collect_changes(
    root: Path, before: dict[str, str], *, max_file_bytes: int, max_total_bytes: int
) -> Changes:
    """Compare the regular files under `root` with `before` (path → SHA-256)."""
    scan = _Scan(before, max_file_bytes, max_total_bytes)
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        scan.skip(".", f"workspace folder unreadable ({exc.strerror}); nothing copied back")
        return scan.changes
    try:
        _scan_dir(scan, fd, "")
    finally:
        os.close(fd)
    unread = scan.unread
    scan.changes.deleted = [
        path
        for path in sorted(before)
        if path not in scan.present and not any(path.startswith(p) for p in unread)
    ]
    return scan.changes


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


def _scan_dir(scan: _Scan, dir_fd: int, prefix: str) -> None:
    try:
        with os.scandir(dir_fd) as it:  # never more than the budget in memory
            room = MAX_SCAN_ENTRIES - scan.entries + 1
            entries = sorted(itertools.islice(it, room), key=lambda e: e.name)
    except OSError as exc:
        scan.unread.append(prefix)
        scan.skip(prefix or ".", f"folder unreadable ({exc.strerror}); not copied back")
        return
    for entry in entries:
        rel = prefix + entry.name
        if scan.entries >= MAX_SCAN_ENTRIES:
            if "" not in scan.unread:
                scan.unread.append("")
                scan.skip(
                    rel, f"more than {MAX_SCAN_ENTRIES} entries; the rest was not copied back"
                )
            return
        scan.entries += 1
        try:
            st = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue  # vanished
        if stat.S_ISDIR(st.st_mode):
            _scan_subdir(scan, dir_fd, entry.name, rel)
        elif stat.S_ISREG(st.st_mode):
            _scan_file(scan, dir_fd, entry.name, rel)
        else:
            scan.skip(rel, f"{_kind(st.st_mode)}: only regular files are copied back")


def _valid(scan: _Scan, rel: str) -> bool:
    """Whether `rel` is a path the workspace accepts as it is (else: skipped, with the reason)."""
    try:
        rel.encode()
        if normalize_path(rel) != rel:
            scan.skip(rel, "name is not in canonical form (Unicode NFC); not copied back")
            return False
    except UnicodeEncodeError:
        scan.skip(rel, "name is not valid UTF-8; not copied back")
        return False
    except InvalidPathError as exc:
        scan.skip(rel, f"{exc.message}; not copied back")
        return False
    return True


def _scan_subdir(scan: _Scan, dir_fd: int, name: str, rel: str) -> None:
    if not _valid(scan, rel):  # (no workspace file can live below such a folder)
        return
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        scan.unread.append(rel + "/")
        scan.skip(rel, f"folder unreadable ({exc.strerror}); not copied back")
        return
    try:
        _scan_dir(scan, fd, rel + "/")
    finally:
        os.close(fd)


def _scan_file(scan: _Scan, dir_fd: int, name: str, rel: str) -> None:
    if not _valid(scan, rel):
        return
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        scan.present.add(rel)  # still there, just not readable: keep the stored version
        scan.skip(rel, f"unreadable ({exc.strerror}); not copied back")
        return
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped after the stat: never read it
            scan.skip(rel, f"{_kind(st.st_mode)}: only regular files are copied back")
            return
        scan.present.add(rel)
        if st.st_size > scan.max_file_bytes:
            scan.skip(
                rel,
                f"{st.st_size} bytes exceeds the per-file limit of {scan.max_file_bytes} bytes; "
                "not copied back",
            )
            return
        if scan.kept_bytes + st.st_size > scan.max_total_bytes:
            scan.skip(
                rel, f"workspace limit of {scan.max_total_bytes} bytes reached; not copied back"
            )
            return
        content = f.read(scan.max_file_bytes + 1)
    if len(content) > scan.max_file_bytes:
        scan.skip(
            rel, f"exceeds the per-file limit of {scan.max_file_bytes} bytes; not copied back"
        )
        return
    if hashlib.sha256(content).hexdigest() != scan.before.get(rel):
        scan.kept_bytes += len(content)
        scan.changes.written[rel] = content


async def apply_changes(workspace: Workspace, changes: Changes) -> dict[str, Any]:
    """Store `changes` in the workspace (deletions first); returns what happened, as JSON."""
    deleted: list[str] = []
    skipped = list(changes.skipped)
    for path in changes.deleted:
        if await workspace.delete(path):
            deleted.append(path)
    written: list[dict[str, Any]] = []
    for path, content in sorted(changes.written.items()):
        try:
            info = await workspace.write(path, content)
        except ToolError as exc:
            skipped.append({"path": path, "reason": f"{exc.message}; not copied back"})
            continue
        written.append({"path": info.path, "size": info.size})
    return {"written": written, "deleted": deleted, "skipped": skipped}
