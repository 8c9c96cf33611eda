"""The request body of `POST /api/agent-runtime/chat`: what the AI SDK's `DefaultChatTransport`
sends (`{id, messages, trigger, messageId}` plus any `body` the app adds, e.g. `agentId`).

Only the last user message is read: the server keeps the session's transcript, so the history
the client sends along is not needed (and not trusted).
"""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from pydantic import ConfigDict, Field

from app.api.schemas import MAX_MESSAGE_CHARS, SESSION_KEY_PATTERN, ApiModel
from app.db.text import storable_text
from app.queue.busy import IfBusy


class ChatMessagePart(ApiModel):
    """A part of a `UIMessage`; only `text` parts are read (the others are accepted as sent)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(max_length=200, examples=["text"], description="`text`, `file`, `tool-…`, …")
    text: str | None = Field(default=None, description="The text of a `text` part.")


class ChatMessage(ApiModel):
    """A `UIMessage` as `useChat` keeps it."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(max_length=200, description="The client's id of the message.")
    role: Literal["system", "user", "assistant"]
    parts: list[ChatMessagePart]


class ChatRequest(ApiModel):
    """A chat turn: the chat (a session of the tenant) and its messages, the last user one new."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": "chat-42",
                    "messages": [
                        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                    ],
                    "trigger": "submit-message",
                }
            ]
        },
    )

    id: str = Field(
        min_length=1,
        max_length=200,
        pattern=SESSION_KEY_PATTERN,
        description="The chat id: the session key (created on first use).",
    )
    messages: list[ChatMessage] = Field(
        description="The chat's messages; the text parts of the last `user` one are run."
    )
    trigger: Literal["submit-message", "regenerate-message"] = Field(
        default="submit-message",
        description="Both run the last user message again as a new run of the session (the "
        "session's transcript keeps earlier answers).",
    )
    message_id: str | None = Field(default=None, max_length=200, description="Unused.")
    agent_id: UUID | None = Field(default=None, description="One of the tenant's agents.")
    if_busy: IfBusy | None = Field(
        default=None,
        description="As on `POST /api/agent-runtime`: what the message does when the chat "
        "already has a live run (`reject`: 409 `session_busy`; `steer`: the live run is "
        "streamed, the message is added to it; `collect`: the collecting run is streamed). "
        "Omitted: the agent's `ifBusy` (default `enqueue`).",
    )

    def user_text(self) -> str:
        """The text of the last user message (its text parts, one per line); `ValueError` when
        there is none, it is blank, too long or not storable."""
        for message in reversed(self.messages):
            if message.role == "user":
                texts = [p.text for p in message.parts if p.type == "text" and p.text]
                text = storable_text("\n".join(texts))
                if len(text) > MAX_MESSAGE_CHARS:
                    raise ValueError(f"must have at most {MAX_MESSAGE_CHARS} characters")
                return text
        raise ValueError("must contain a user message with text")
