"""The run loop's hot statements, written once as SQL (not built per call with the ORM).

Each model turn of each run executes these; building them as ORM constructs every time cost more
worker CPU than anything else in a run (`bench/queue/run.py --profile-worker`). Parameters are
cast where Postgres could otherwise infer two types for one of them.
"""

from __future__ import annotations

from sqlalchemy import text

SET_STATE = text("UPDATE agent_run_queue SET state = :state WHERE id = :run_id")
"""The run's loop state (shown in /status)."""

ADD_USAGE = text(
    """
WITH session_context AS (
  UPDATE agent_sessions SET context_tokens = CAST(:input_tokens AS integer)
  WHERE id = :session_id AND CAST(:context_window AS integer) IS NOT NULL
),
daily AS (
  INSERT INTO tenant_usage_daily (tenant_id, day, shard, input_tokens, output_tokens, runs)
  VALUES (:tenant_id, (now() AT TIME ZONE 'UTC')::date, floor(random() * 16)::smallint,
          CAST(:input_tokens AS bigint), CAST(:output_tokens AS bigint), 0)
  ON CONFLICT (tenant_id, day, shard) DO UPDATE SET
    input_tokens = tenant_usage_daily.input_tokens + excluded.input_tokens,
    output_tokens = tenant_usage_daily.output_tokens + excluded.output_tokens
)
UPDATE agent_run_queue SET
  input_tokens = input_tokens + CAST(:input_tokens AS integer),
  output_tokens = output_tokens + CAST(:output_tokens AS integer),
  usage_by_model = CASE WHEN CAST(:model AS text) IS NULL THEN usage_by_model
    ELSE usage_by_model || jsonb_build_object(CAST(:model AS text), jsonb_build_object(
      'inputTokens',
      coalesce((usage_by_model -> CAST(:model AS text) ->> 'inputTokens')::bigint, 0)
        + CAST(:input_tokens AS bigint),
      'outputTokens',
      coalesce((usage_by_model -> CAST(:model AS text) ->> 'outputTokens')::bigint, 0)
        + CAST(:output_tokens AS bigint)))
    END,
  context_tokens = CASE WHEN CAST(:context_window AS integer) IS NULL THEN context_tokens
    ELSE CAST(:input_tokens AS integer) END,
  context_window = coalesce(CAST(:context_window AS integer), context_window)
WHERE id = :run_id
"""
)
"""A model call's tokens: the run's totals and its model's share, the run's and session's
context size (with `context_window`), the tenant's day (`tenant_usage_daily`)."""

APPEND_MESSAGES = text(
    """
WITH counted AS (
  UPDATE agent_sessions
  SET message_count = message_count + CAST(:n AS integer),
      token_count = token_count + CAST(:tokens AS bigint)
  WHERE id = :session_id
  RETURNING message_count
)
INSERT INTO session_messages (tenant_id, session_id, run_id, seq, role, payload, token_count)
SELECT :tenant_id, :session_id, :run_id, counted.message_count - CAST(:n AS integer) + m.ord,
       m.role, m.payload::jsonb, m.tokens
FROM counted,
     unnest(CAST(:roles AS text[]), CAST(:payloads AS text[]), CAST(:token_counts AS integer[]))
       WITH ORDINALITY AS m(role, payload, tokens, ord)
RETURNING seq
"""
)
"""Transcript rows appended as the session's next seqs, its counters kept in the same statement."""

RUN_START = text(
    """
SELECT s.memory_flushed_through_seq AS flushed_through,
       c.summary, c.first_message_seq, c.last_message_seq,
       extract(epoch FROM now() - coalesce(r.started_at, now())) AS elapsed,
       r.input_tokens + r.output_tokens AS tokens,
       extract(epoch FROM r.deadline_at - now()) AS hard_left
FROM agent_run_queue r
JOIN agent_sessions s ON s.id = r.session_id
LEFT JOIN LATERAL (
  SELECT summary, first_message_seq, last_message_seq
  FROM agent_context_snapshots
  WHERE session_id = r.session_id
  ORDER BY last_message_seq DESC, created_at DESC
  LIMIT 1
) c ON true
WHERE r.id = :run_id
"""
)
"""Where an attempt starts from: the session's latest compaction summary and memory-flush mark,
and the run's clock (seconds since it first started, tokens used, seconds to its deadline)."""

TRANSCRIPT = text(
    """
SELECT seq, run_id, payload, token_count
FROM session_messages
WHERE session_id = :session_id AND (seq > :after_seq OR run_id = :run_id)
ORDER BY seq
"""
)
"""The session's transcript after a seq, plus every row of the run."""

DELIVER_INBOX = text(
    """
UPDATE run_inbox
SET delivered_at = now(), delivery = 'injected', delivered_to_run_id = :run_id
WHERE run_id = :run_id AND delivered_at IS NULL
RETURNING id, kind, source_run_id, text
"""
)
"""The run's undelivered inbox messages, marked delivered (injected)."""

STEER_WAITING = text(
    "SELECT EXISTS (SELECT 1 FROM run_inbox WHERE run_id = :run_id "
    "AND delivered_at IS NULL AND kind = 'steer')"
)
"""Whether a user's message waits in the run's inbox (a partial index)."""
