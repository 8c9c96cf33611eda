"""Splitting long documents into overlapping chunks, on paragraph/sentence bounds where possible.

A chunk is at most `size` characters. Each cut is placed, in order of preference, at a paragraph
break, a sentence end, a word boundary, or (for text without spaces) exactly at `size`, and never
earlier than half-way through the chunk. The next chunk starts up to `overlap` characters before
the cut — at the earliest sentence start in that window, else the earliest word start, else
exactly `overlap` characters back — so a fact that straddles a cut is whole in one of the two.
"""

from __future__ import annotations

import bisect
import re

_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE = re.compile(r"[.!?][\"')\]]*\s+|\n\s*")
_WORD = re.compile(r"\s+")


def _bounds(pattern: re.Pattern[str], text: str) -> list[int]:
    """Positions where a new segment starts (the end of each separator match), ascending."""
    return [m.end() for m in pattern.finditer(text) if 0 < m.end() < len(text)]


class _Boundaries:
    """Candidate cut positions of one text by strength: paragraph > sentence > word."""

    def __init__(self, text: str) -> None:
        paragraph = _bounds(_PARAGRAPH, text)
        sentence = sorted(set(paragraph) | set(_bounds(_SENTENCE, text)))
        word = sorted(set(sentence) | set(_bounds(_WORD, text)))
        self.levels = (paragraph, sentence, word)

    def last_in(self, low: int, high: int) -> int | None:
        """The strongest, then latest, boundary `p` with `low < p <= high`."""
        for level in self.levels:
            i = bisect.bisect_right(level, high)
            if i > 0 and level[i - 1] > low:
                return level[i - 1]
        return None

    def first_in(self, low: int, high: int) -> int | None:
        """The earliest sentence (else word) boundary `p` with `low <= p < high`."""
        for level in self.levels[1:]:
            i = bisect.bisect_left(level, low)
            if i < len(level) and level[i] < high:
                return level[i]
        return None


def chunk_text(text: str, size: int = 2000, overlap: int = 200) -> list[str]:
    """`text` (stripped) as one chunk if it fits in `size` characters, else overlapping chunks.

    `overlap` is capped at half of `size`, which guarantees progress.
    """
    text = text.strip()
    if len(text) <= size:
        return [text] if text else []
    overlap = max(0, min(overlap, size // 2))
    bounds = _Boundaries(text)
    chunks: list[str] = []
    start = 0
    while True:
        if len(text) - start <= size:
            chunks.append(text[start:].strip())
            return [c for c in chunks if c]
        limit = start + size
        cut = bounds.last_in(start + size // 2, limit) or limit
        chunks.append(text[start:cut].strip())
        if overlap == 0:
            start = cut
            continue
        # No space in the window (one huge "word"): overlap by raw characters.
        start = bounds.first_in(cut - overlap, cut) or cut - overlap
