-- Wake the workers only when a lane is left with a run they may claim. Before, every insert and
-- every status change out of running (or into queued) sent `agent_runtime_runs`, so each run's
-- finish woke every worker for a claim that found nothing when its lane had no next run, and an
-- insert behind a busy lane woke them for nothing too. The lane sync (0018) knows: it notifies,
-- with the lane's head, when the lane it leaves is not busy and has a head. It runs at commit
-- (deferred), so the NOTIFY is sent with the commit as before.
DROP TRIGGER IF EXISTS agent_run_queue_notify_insert ON agent_run_queue;
DROP TRIGGER IF EXISTS agent_run_queue_notify_status ON agent_run_queue;

CREATE OR REPLACE FUNCTION agent_runtime_lane_sync() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  sid uuid;
  tid text;
  head record;
  is_busy boolean;
BEGIN
  IF TG_OP = 'DELETE' THEN
    sid := OLD.session_id; tid := OLD.tenant_id;
  ELSE
    sid := NEW.session_id; tid := NEW.tenant_id;
  END IF;
  LOOP
    PERFORM 1 FROM queue_lanes WHERE session_id = sid FOR UPDATE;
    EXIT WHEN FOUND;
    IF NOT EXISTS (SELECT 1 FROM agent_sessions WHERE id = sid) THEN
      RETURN NULL;  -- the session was deleted (its runs with it)
    END IF;
    INSERT INTO queue_lanes (session_id, tenant_id, busy) VALUES (sid, tid, true)
      ON CONFLICT (session_id) DO NOTHING;
  END LOOP;
  SELECT q.id, q.queue_seq, q.not_before INTO head
    FROM agent_run_queue q
    WHERE q.session_id = sid AND q.status = 'queued'
    ORDER BY q.queue_seq LIMIT 1;
  is_busy := EXISTS (SELECT 1 FROM agent_run_queue a
                     WHERE a.session_id = sid
                       AND a.status IN ('running', 'awaiting_approval', 'waiting'));
  IF head.id IS NULL AND NOT is_busy THEN
    DELETE FROM queue_lanes WHERE session_id = sid;
  ELSE
    UPDATE queue_lanes
      SET head_id = head.id, head_seq = head.queue_seq, ready_at = head.not_before,
          busy = is_busy
      WHERE session_id = sid
        AND (head_id, ready_at, busy) IS DISTINCT FROM (head.id, head.not_before, is_busy);
    IF NOT is_busy THEN
      -- the lane has a head a worker may claim (now, or when its collect window ends: the
      -- claim tells the worker when); sent at commit, identical payloads once
      PERFORM pg_notify('agent_runtime_runs', head.id::text);
    END IF;
  END IF;
  RETURN NULL;
END
$$;
