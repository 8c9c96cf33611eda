"""The Server-Sent Events line parser that `agent-runtime run` reads a run's stream with."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SSEEvent:
    """One server-sent event."""

    id: str | None
    event: str
    data: str


@dataclass
class SSEParser:
    """Line-by-line Server-Sent Events parser (the WHATWG rules that matter to us).

    Feed it lines without their line terminator; it returns an event at each blank line that ends
    one with data. Comments (`:` lines, our keep-alives) and unknown fields are ignored.
    """

    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None

    def feed(self, line: str) -> SSEEvent | None:
        """Consume one line; return the event it completes, if any."""
        if line == "":
            if not self._data:
                self._event = ""
                return None
            event = SSEEvent(
                id=self._id, event=self._event or "message", data="\n".join(self._data)
            )
            self._data, self._event = [], ""
            return event  # the id persists to later events, as the spec says
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None
