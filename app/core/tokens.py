"""The token estimate every layer shares: a quarter of the characters (of a message's stored JSON).

It is the figure kept in `session_messages.token_count`; the compaction phase calibrates it
against the tokens the provider reports (`app.runtime.compaction`).
"""

from __future__ import annotations

import json
import math

from app.core.transcript import Message, dump_message


def estimate_text_tokens(text: str) -> int:
    """`ceil(len(text) / 4)`, at least 1 for non-empty text."""
    return math.ceil(len(text) / 4)


def estimate_message_tokens(message: Message) -> int:
    """A message's estimated tokens: a quarter of its JSON's characters, at least 1."""
    return max(1, estimate_text_tokens(json.dumps(dump_message(message))))
