"""The workbench's static files agree with the server: the page listens for every event type the
runtime emits (an EventSource only delivers the named events it has listeners for), and no
component writes HTML from data."""

from __future__ import annotations

import re

from app.api.workbench import STATIC_DIR
from app.core.events import EVENT_TYPES

OWN_SCRIPTS = [p for p in STATIC_DIR.rglob("*.js") if "vendor" not in p.parts]


def test_the_page_listens_for_every_event_type() -> None:
    source = (STATIC_DIR / "api.js").read_text()
    block = re.search(r"export const EVENT_TYPES = \[(.*?)\];", source, re.S)
    assert block, "api.js no longer declares EVENT_TYPES"
    listed = re.findall(r'"([a-z_.]+)"', block.group(1))
    assert sorted(listed) == sorted(EVENT_TYPES)


def test_no_component_writes_html() -> None:
    assert OWN_SCRIPTS
    sinks = re.compile(r"\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write\b|\beval\(")
    offenders = [
        f"{p.relative_to(STATIC_DIR)}:{n}"
        for p in OWN_SCRIPTS
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if sinks.search(line)
    ]
    assert not offenders, offenders
