"""Context windows of known models, in tokens (what `app.runtime.compaction` sizes contexts by).

Looked up by the model name an agent uses (`gemini-2.5-flash`, `openai:gpt-4o-mini`, …), longest
matching prefix first. Models not listed here (most OpenAI-compatible servers: Ollama, vLLM,
llama.cpp, whose window depends on how the server was started) get the `CONTEXT_WINDOW_TOKENS`
setting; an agent's own `contextWindow` setting overrides both.
"""

from __future__ import annotations

KNOWN_WINDOWS: dict[str, int] = {
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.5-": 1_048_576,
    "gemini-3": 1_048_576,
    "openai:gpt-4o": 128_000,
    "openai:gpt-4-turbo": 128_000,
    "openai:gpt-4.1": 1_047_576,
    "openai:gpt-5": 400_000,
    "openai:o1": 200_000,
    "openai:o3": 200_000,
    "openai:o4": 200_000,
}
"""Name prefix → context window (input + output tokens)."""


def known_context_window(model: str) -> int | None:
    """The window of `model` if it is a known model (None: unknown, use the setting)."""
    name = model.removeprefix("models/")
    prefix = max((p for p in KNOWN_WINDOWS if name.startswith(p)), key=len, default=None)
    return None if prefix is None else KNOWN_WINDOWS[prefix]
