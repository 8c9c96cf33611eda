"""Workspace path normalisation: what is accepted, and the attacks that are refused."""

from __future__ import annotations

import pytest

from app.tools.base import ToolError
from app.tools.workspace import InvalidPathError, normalize_path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a.txt", "a.txt"),
        ("dir/sub/file.md", "dir/sub/file.md"),
        ("dir//file", "dir/file"),
        ("dir/", "dir"),
        (".hidden", ".hidden"),
        ("a/.b/c..d", "a/.b/c..d"),
        ("with space/ü.txt", "with space/ü.txt"),
        ("cafe\u0301", "caf\u00e9"),  # NFC: one spelling per name
        ("x" * 512, "x" * 512),
        ("a/~b", "a/~b"),
    ],
)
def test_accepted(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("/", "absolute"),
        ("/etc/passwd", "absolute"),
        ("C:/Windows", "absolute"),
        ("c:evil", "absolute"),
        ("~", "~"),
        ("~/x", "~"),
        ("~root/.ssh/id_rsa", "~"),
        ("..", ".."),
        ("../x", ".."),
        ("a/../b", ".."),  # would resolve inside, still refused
        ("a/b/..", ".."),
        (".", "'.'"),
        ("./a", "'.'"),
        ("a/./b", "'.'"),
        ("a/.../b", "'...'"),
        ("a\\b", "backslash"),
        ("..\\..\\x", "backslash"),
        ("a\x00b", "control"),
        ("a\nb", "control"),
        ("a\tb", "control"),
        ("a\x7fb", "control"),
        ("a\x85b", "control"),
        ("x" * 513, "512 bytes"),
        ("é" * 257, "512 bytes"),  # 514 bytes in UTF-8
    ],
)
def test_refused(raw: str, reason: str) -> None:
    with pytest.raises(InvalidPathError, match=reason):
        normalize_path(raw)


def test_invalid_path_is_a_tool_error() -> None:
    with pytest.raises(ToolError):
        normalize_path("../secret")


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidPathError):
        normalize_path(None)  # type: ignore[arg-type]
