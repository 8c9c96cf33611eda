"""Stream adapters: a run's typed events (`app.core.events.RunEvent`) in, another framing out.

Each adapter is one module that pattern-matches on the event union and knows nothing else of
the runtime; its route reads the run through `app.api.run_feed.follow_run`, like the SSE replay.
`ui_message_stream` speaks the AI SDK's UI message stream protocol (what `useChat` reads).
"""
