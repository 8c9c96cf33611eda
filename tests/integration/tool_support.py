"""The context a tool runs in, for calling tools directly against the real Postgres."""

from __future__ import annotations

from typing import Any

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.tools.base import ToolContext


async def context_for(
    database: Database, who: Principal, session_key: str = "tools", **settings: Any
) -> ToolContext:
    """A queued run of `who` in session `session_key` (created if new), as a tool sees it;
    `settings` override the defaults."""
    queue = RunQueue(database)
    run = await queue.enqueue_run(who, message="x", session_key=session_key)
    found = await queue.get_run(who, run.run_id)
    assert found is not None
    return ToolContext(
        db=database,
        principal=who,
        session_id=found[0].session_id,
        run_id=run.run_id,
        settings=Settings(**settings),
    )
