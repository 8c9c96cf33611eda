"""Chunking: size cap, paragraph/sentence boundaries, overlap, and no lost text."""

from __future__ import annotations

import random
import re

import pytest

from app.memory.chunking import chunk_text


def _document(seed: int = 7, paragraphs: int = 12) -> str:
    rng = random.Random(seed)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    out = []
    for p in range(paragraphs):
        sentences = [
            f"P{p}S{s} " + " ".join(rng.choice(words) for _ in range(rng.randint(4, 18))) + "."
            for s in range(rng.randint(2, 7))
        ]
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def test_short_text_is_one_chunk() -> None:
    assert chunk_text("  hello world  ", 100, 10) == ["hello world"]
    assert chunk_text("   ", 100, 10) == []


def test_chunks_respect_size_and_cover_every_sentence() -> None:
    text = _document()
    chunks = chunk_text(text, 400, 80)
    assert len(chunks) > 5
    assert all(0 < len(c) <= 400 for c in chunks)
    # every sentence marker appears in some chunk, in order of first appearance
    markers = re.findall(r"P\d+S\d+", text)
    seen = [m for c in chunks for m in re.findall(r"P\d+S\d+", c)]
    assert list(dict.fromkeys(seen)) == markers


def test_cuts_prefer_sentence_and_paragraph_ends() -> None:
    chunks = chunk_text(_document(), 400, 80)
    # every chunk but the last ends a sentence (the text has no sentence longer than the window)
    assert all(c.endswith(".") for c in chunks)


def test_consecutive_chunks_overlap_by_whole_sentences() -> None:
    chunks = chunk_text(_document(), 400, 120)
    overlapping = 0
    for first, second in zip(chunks, chunks[1:], strict=False):
        head = re.match(r"P\d+S\d+", second)
        if head and head.group(0) in first:
            overlapping += 1
            start = second[: second.index(".") + 1]  # the repeated sentence is whole in both
            assert start in first
    assert overlapping >= len(chunks) // 2


def test_zero_overlap_partitions_the_text() -> None:
    text = _document(3)
    chunks = chunk_text(text, 300, 0)
    assert " ".join(chunks).split() == text.split()


def test_text_without_spaces_is_cut_hard_with_overlap() -> None:
    chunks = chunk_text("x" * 1000, 300, 50)
    assert all(len(c) <= 300 for c in chunks)
    assert sum(len(c) for c in chunks) >= 1000 + 50 * (len(chunks) - 1)


@pytest.mark.parametrize("overlap", [0, 50, 10_000])
def test_overlap_is_capped_and_always_progresses(overlap: int) -> None:
    chunks = chunk_text(_document(11, 30), 250, overlap)
    assert all(len(c) <= 250 for c in chunks)
    assert len(chunks) < 200
