-- agent-runtime context management (app/runtime/compaction.py): token accounting per message,
-- session and run, and the bookkeeping of compactions and memory flushes.
--
-- session_messages.token_count (from 0001) is now always written: the estimated tokens the row
-- takes in a model's context (ceil(characters / 4) of its JSON; app/runtime/context.py). Rows
-- written before this migration get the same estimate here.

ALTER TABLE agent_sessions
  ADD COLUMN token_count bigint NOT NULL DEFAULT 0,
  ADD COLUMN context_tokens integer,
  ADD COLUMN compactions integer NOT NULL DEFAULT 0,
  ADD COLUMN memory_flushed_through_seq integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN agent_sessions.token_count IS
  'Sum of session_messages.token_count: the whole transcript, estimated.';
COMMENT ON COLUMN agent_sessions.context_tokens IS
  'Input tokens of the latest model call of the session, as its provider reported them.';
COMMENT ON COLUMN agent_sessions.memory_flushed_through_seq IS
  'Messages up to this seq were offered to the model for a memory flush before a compaction.';

ALTER TABLE agent_run_queue
  ADD COLUMN context_tokens integer,
  ADD COLUMN context_window integer,
  ADD COLUMN compactions integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN agent_run_queue.context_tokens IS
  'Input tokens of the run''s latest model call, as its provider reported them.';
COMMENT ON COLUMN agent_run_queue.context_window IS
  'The context window (tokens) the run''s model was given.';

ALTER TABLE agent_context_snapshots
  ADD COLUMN summary_tokens integer NOT NULL DEFAULT 0,
  ADD COLUMN messages_covered integer NOT NULL DEFAULT 0;
-- The context builder reads the latest snapshot of a session.
CREATE INDEX agent_context_snapshots_session_last
  ON agent_context_snapshots (session_id, last_message_seq DESC);

UPDATE session_messages SET token_count = greatest(1, ceil(length(payload::text) / 4.0))
WHERE token_count IS NULL;
UPDATE agent_sessions s SET token_count = t.total
FROM (SELECT session_id, sum(token_count) AS total FROM session_messages GROUP BY session_id) t
WHERE t.session_id = s.id;
