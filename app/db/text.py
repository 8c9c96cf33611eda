"""Text that Postgres can store: the one check every API input bound for a text column passes."""

from __future__ import annotations


def storable_text(value: str, *, blank_ok: bool = False) -> str:
    """`value`, if Postgres can store it (no NUL, no lone surrogates) and, unless `blank_ok`, it
    is not blank; else `ValueError` saying what is wrong (pydantic reports it on the field)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode (no lone surrogates)") from exc
    if not blank_ok and not value.strip():
        raise ValueError("must not be empty or whitespace only")
    return value
