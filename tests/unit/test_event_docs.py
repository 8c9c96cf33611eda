"""The README's table of run events is generated from the classes of `app.core.events`.

`python -m tests.unit.test_event_docs` rewrites the table (between the `events:begin` and
`events:end` markers); the test fails while the README and the classes disagree.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from app.core.events import EVENT_CLASSES, EVENT_TYPES, EventBase

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN = (
    "<!-- events:begin (generated from app/core/events: python -m tests.unit.test_event_docs) -->"
)
END = "<!-- events:end -->"
ENVELOPE = set(EventBase.model_fields)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `annotation` (`X`, `X | None`, `list[X]`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list):
        for arg in get_args(annotation):
            if (found := _model_of(arg)) is not None:
                return found
    return None


def _literals(annotation: Any) -> tuple[Any, ...]:
    """The values of a `Literal` (or `Literal | None`) annotation; () for anything else."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(v for arg in get_args(annotation) for v in _literals(arg))
    return ()


def _shape(annotation: Any) -> str:
    """`{a, b: {c}}` for a model, `[{…}]` for a list of them: the JSON keys, nested expanded."""
    model = _model_of(annotation)
    assert model is not None
    parts = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        inner = _model_of(field.annotation)
        parts.append(f"{alias}: {_shape(field.annotation)}" if inner is not None else alias)
    shape = "{" + ", ".join(parts) + "}"
    return f"[{shape}]" if get_origin(annotation) is list else shape


def _fields(cls: type[EventBase]) -> str:
    out = []
    for name, field in cls.model_fields.items():
        if name in ENVELOPE or name == "type":
            continue
        text = f"`{field.alias or name}`"
        if _model_of(field.annotation) is not None:
            text += f" `{_shape(field.annotation)}`"
        if values := _literals(field.annotation):
            text += " (" + ", ".join(f"`{v}`" for v in values) + ")"
        if field.exclude_if is not None:
            text += " (optional)"
        out.append(text)
    return ", ".join(out)


def _summary(cls: type[EventBase]) -> str:
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split()).replace("|", "\\|")


def render_event_table() -> str:
    """The README's event table, from the classes (in the union's order)."""
    rows = ["| type | fields | what it says |", "|---|---|---|"]
    for cls, type_ in zip(EVENT_CLASSES, EVENT_TYPES, strict=True):
        rows.append(f"| `{type_}` | {_fields(cls)} | {_summary(cls)} |")
    return "\n".join(rows)


def _split(text: str) -> tuple[str, str, str]:
    head, found, rest = text.partition(BEGIN)
    assert found, f"README.md has no {BEGIN!r} marker"
    body, found, tail = rest.partition(END)
    assert found, f"README.md has no {END!r} marker"
    return head, body, tail


def test_readme_event_table_is_generated_from_the_classes() -> None:
    _, body, _ = _split(README.read_text())
    assert body.strip() == render_event_table(), (
        "README.md's event table is stale: run `python -m tests.unit.test_event_docs`"
    )


def test_readme_lists_exactly_the_union_types() -> None:
    _, body, _ = _split(README.read_text())
    listed = [line.split("`")[1] for line in body.strip().splitlines()[2:]]
    assert listed == list(EVENT_TYPES)


def main() -> int:
    """Rewrite the README's event table from the classes."""
    head, _, tail = _split(README.read_text())
    README.write_text(f"{head}{BEGIN}\n{render_event_table()}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
