"""Digests that stand in for content the audit trail must not copy (messages, tool arguments)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def text_digest(text: str) -> str:
    """The hex sha256 of `text` in UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: keys sorted, no insignificant whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_digest(args: Any) -> str:
    """The hex sha256 of a tool call's arguments as canonical JSON (`canonical_json`)."""
    return text_digest(canonical_json(args))


def message_facts(message: str) -> dict[str, Any]:
    """What the audit trail keeps of a posted message: its length and digest, not its text."""
    return {"messageLength": len(message), "messageSha256": text_digest(message)}
