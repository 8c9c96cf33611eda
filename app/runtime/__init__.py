"""The agent loop: context from the transcript, model calls, tool calls, stored step by step."""
