"""Copying a workspace into a directory and the sandbox's changes back, without following links."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import unicodedata
from pathlib import Path

import pytest

from app.tools.sandbox import sync
from app.tools.sandbox.sync import Changes, collect_changes, materialize
from app.tools.workspace import FileInfo

FILES = {"a.txt": b"alpha", "dir/b.txt": b"beta", "dir/deep/c.txt": b"gamma"}


def workspace(tmp_path: Path, files: dict[str, bytes] = FILES) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "ws"
    root.mkdir()
    stored = [
        (FileInfo(path, len(data), hashlib.sha256(data).hexdigest()), data)
        for path, data in files.items()
    ]
    return root, materialize(stored, root, None)


def collect(root: Path, before: dict[str, str], **caps: int) -> Changes:
    return collect_changes(
        root,
        before,
        max_file_bytes=caps.get("max_file_bytes", 1000),
        max_total_bytes=caps.get("max_total_bytes", 10_000),
    )


def reasons(changes: Changes) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in changes.skipped}


def test_untouched_copy_has_no_changes(tmp_path: Path) -> None:
    root, before = workspace(tmp_path)
    assert (root / "dir" / "deep" / "c.txt").read_bytes() == b"gamma"
    assert collect(root, before) == Changes()


def test_new_modified_and_deleted_files(tmp_path: Path) -> None:
    root, before = workspace(tmp_path)
    (root / "a.txt").write_bytes(b"ALPHA")
    (root / "dir" / "b.txt").unlink()
    (root / "dir" / "deep" / "c.txt").unlink()
    (root / "dir" / "deep").rmdir()
    (root / "new").mkdir()
    (root / "new" / "n.txt").write_bytes(b"n")
    (root / "empty").mkdir()
    changes = collect(root, before)
    assert changes.written == {"a.txt": b"ALPHA", "new/n.txt": b"n"}
    assert changes.deleted == ["dir/b.txt", "dir/deep/c.txt"]
    assert changes.skipped == []


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    root, before = workspace(tmp_path)
    (root / "a.txt").unlink()
    (root / "a.txt").symlink_to("/etc/passwd")
    (root / "leak").symlink_to("/etc/passwd")
    for path in ("dir/deep/c.txt", "dir/b.txt"):
        (root / path).unlink()
    (root / "dir" / "deep").rmdir()
    (root / "dir").rmdir()
    (root / "dir").symlink_to("/etc")
    changes = collect(root, before)
    assert changes.written == {}
    assert changes.deleted == ["a.txt", "dir/b.txt", "dir/deep/c.txt"]
    assert reasons(changes) == {
        "a.txt": "symlink: only regular files are copied back",
        "dir": "symlink: only regular files are copied back",
        "leak": "symlink: only regular files are copied back",
    }


def test_a_symlink_swapped_in_after_the_listing_is_not_opened(tmp_path: Path) -> None:
    root, before = workspace(tmp_path)
    (root / "swapped").symlink_to("/etc/passwd")
    scan = sync._Scan(before, 1000, 10_000)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sync._scan_file(scan, fd, "swapped", "swapped")  # as if lstat had seen a regular file
    finally:
        os.close(fd)
    assert scan.changes.written == {} and "unreadable" in reasons(scan.changes)["swapped"]


def test_special_files_are_skipped_without_blocking(tmp_path: Path) -> None:
    root, before = workspace(tmp_path)
    os.mkfifo(root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()
    assert reasons(collect(root, before)) == {
        "fifo": "fifo: only regular files are copied back",
        "sock": "socket: only regular files are copied back",
    }


def test_names_the_workspace_refuses_are_skipped(tmp_path: Path) -> None:
    root, before = workspace(tmp_path, {})
    nfd = unicodedata.normalize("NFD", "é.txt")
    for name in ("back\\slash", "new\nline", "...", "~home", nfd):
        (root / name).write_bytes(b"x")
    fd = os.open(bytes(root) + b"/\xff.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    (root / "ok.txt").write_bytes(b"ok")
    changes = collect(root, before)
    assert changes.written == {"ok.txt": b"ok"}
    found = reasons(changes)
    assert "backslash" in found["back\\slash"] and "control characters" in found["new\nline"]
    assert "'...' component" in found["..."] and "'~'" in found["~home"]
    assert "canonical form" in found[nfd] and "not valid UTF-8" in found["\ufffd.txt"]
    json.dumps(changes.skipped).encode()  # storable: no lone surrogates


def test_size_caps(tmp_path: Path) -> None:
    root, before = workspace(tmp_path, {"kept.bin": b"k" * 10})
    (root / "kept.bin").write_bytes(b"K" * 2000)  # too big now: the stored version stays
    (root / "a").write_bytes(b"a" * 600)
    (root / "b").write_bytes(b"b" * 600)
    changes = collect(root, before, max_file_bytes=1000, max_total_bytes=1000)
    assert changes.written == {"a": b"a" * 600}
    assert changes.deleted == []
    found = reasons(changes)
    assert "2000 bytes exceeds the per-file limit of 1000 bytes" in found["kept.bin"]
    assert "workspace limit of 1000 bytes reached" in found["b"]


def test_too_many_entries_stops_and_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync, "MAX_SCAN_ENTRIES", 5)
    root, before = workspace(tmp_path, {"z.txt": b"z"})
    for i in range(3):
        (root / f"f{i}").write_bytes(b"x")
    for i in range(10):
        (root / "sub" / str(i)).mkdir(parents=True)
    changes = collect(root, before)
    assert changes.deleted == [] and sorted(changes.written) == ["f0", "f1", "f2"]
    assert len(changes.skipped) == 1 and "more than 5 entries" in changes.skipped[0]["reason"]
