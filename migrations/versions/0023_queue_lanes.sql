-- The lane-head table: one row per session with queued or active work, so the claim never scans
-- the backlog (docs/architecture.md#the-lane-queue).
--
-- * queue_lanes: a session's lane, kept by the trigger below in the transaction of every change
--   of one of its runs (insert, delete, status, not_before): `head_id` its first queued run
--   (lowest queue_seq; NULL if none), `ready_at` that run's not_before (ifBusy=collect's window),
--   `busy` whether one of its runs is running, awaiting_approval or waiting. No row: the session
--   has nothing queued and nothing active. A lane is claimable when it is not busy and its head
--   is ready; the claim (app/queue/queries.sql claim_runs) walks the partial indexes below, whose
--   size is the number of claimable lanes, not of queued runs.
-- * agent_run_queue_queued_session: a session's first queued run in one index probe, however
--   many runs the session has finished (agent_run_queue_session_seq holds them all).

-- * Waking the workers: the lane sync NOTIFYs `agent_runtime_runs` (payload: the lane's head)
--   when it leaves a lane not busy with a head, that is when a run became claimable. The
--   notify triggers of 0001/0006 (every insert, every status change out of running) go: they
--   woke every worker for an empty claim at each run's end and at each post behind a busy lane.

DROP TRIGGER IF EXISTS agent_run_queue_notify_insert ON agent_run_queue;
DROP TRIGGER IF EXISTS agent_run_queue_notify_status ON agent_run_queue;

CREATE INDEX agent_run_queue_queued_session ON agent_run_queue (session_id, queue_seq)
  WHERE status = 'queued';

CREATE TABLE queue_lanes (
  session_id uuid PRIMARY KEY REFERENCES agent_sessions (id) ON DELETE CASCADE,
  tenant_id  text NOT NULL,
  head_id    uuid,
  head_seq   bigint,
  ready_at   timestamptz,
  busy       boolean NOT NULL,
  CHECK (busy OR head_id IS NOT NULL)
);
COMMENT ON TABLE queue_lanes IS
  'One row per session with queued or active runs: its first queued run and whether it is busy. '
  'Kept by agent_runtime_lane_sync(); read by the claim (worker role).';
-- The claim: tenants with a claimable lane (skip scan), each tenant's oldest heads.
CREATE INDEX queue_lanes_claimable ON queue_lanes (tenant_id, head_seq) WHERE NOT busy;
-- The claim's fallback when the fair picks are locked by concurrent claims: the oldest heads.
CREATE INDEX queue_lanes_oldest ON queue_lanes (head_seq) WHERE NOT busy;
-- next_window_end: the earliest debounce window of a claimable lane's head.
CREATE INDEX queue_lanes_windows ON queue_lanes (ready_at)
  WHERE NOT busy AND ready_at IS NOT NULL;

ALTER TABLE queue_lanes ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue_lanes FORCE ROW LEVEL SECURITY;
GRANT SELECT ON queue_lanes TO agent_runtime_worker;
CREATE POLICY lanes_workers ON queue_lanes FOR SELECT TO agent_runtime_worker USING (true);

-- Recompute one session's lane from its runs. Runs as the migrating role (which bypasses RLS):
-- the lane depends on every run of the session, whoever's transaction changes one of them.
-- Deferred to commit, so the lane row is the last lock a transaction takes (no lock-order cycle
-- with the run rows every writer locks first), and it is locked BEFORE the runs are read: the
-- read is a new statement, whose snapshot sees every transaction that wrote the lane before.
-- With no lane row to lock, one is inserted first (an insert racing another waits for it).
CREATE FUNCTION agent_runtime_lane_sync() RETURNS trigger
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
REVOKE ALL ON FUNCTION agent_runtime_lane_sync() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER agent_run_queue_lane_sync
  AFTER INSERT OR DELETE ON agent_run_queue
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION agent_runtime_lane_sync();
CREATE CONSTRAINT TRIGGER agent_run_queue_lane_sync_update
  AFTER UPDATE OF status, not_before ON agent_run_queue
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                     OR OLD.not_before IS DISTINCT FROM NEW.not_before)
  EXECUTE FUNCTION agent_runtime_lane_sync();

-- The lanes of the runs stored before this migration.
INSERT INTO queue_lanes (session_id, tenant_id, head_id, head_seq, ready_at, busy)
SELECT s.session_id, s.tenant_id, h.id, h.queue_seq, h.not_before, s.busy
FROM (
  SELECT session_id, min(tenant_id) AS tenant_id,
         bool_or(status IN ('running', 'awaiting_approval', 'waiting')) AS busy
  FROM agent_run_queue
  WHERE status IN ('queued', 'running', 'awaiting_approval', 'waiting')
  GROUP BY session_id
) s
LEFT JOIN LATERAL (
  SELECT q.id, q.queue_seq, q.not_before FROM agent_run_queue q
  WHERE q.session_id = s.session_id AND q.status = 'queued'
  ORDER BY q.queue_seq LIMIT 1
) h ON true;
