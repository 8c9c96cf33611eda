-- The run queue's SQL, one named statement per verb (loaded by app/queue/sql.py).
-- Statements run as agent_runtime_worker (cross-tenant: claim_runs, renew_leases,
-- recover_expired, release_runs) or as agent_runtime_app under RLS (everything else).

-- name: claim_runs
-- Take up to :limit claimable runs, at most one per session (its lane's head: queued, first in
-- the lane, lane not busy, past its debounce window `not_before`), fairly across tenants.
-- The lane rule lives in one place, the lane-head table queue_lanes (migration 0023, kept by a
-- trigger): the claim reads the claimable lanes through partial indexes, never the backlog, so
-- its cost does not grow with queued runs behind busy lanes nor with a session's finished runs.
-- Fair: round-robin by tenant. `tenants` lists the tenants with a claimable lane (a skip scan of
-- queue_lanes_claimable), `fair` each one's oldest :limit heads, numbered (`turn`); the first
-- turns of every tenant go before the second ones, and within a turn the tenant claimed from
-- longest ago (never: first), as stamped in tenant_claims. So a tenant posting one run behind
-- another's backlog of thousands is served by the next claim.
-- SKIP LOCKED lets workers claim in parallel: a head another claim holds is passed over (and a
-- locked row is rechecked to still be queued). When the fair picks run out that way (several
-- workers on one tenant's lanes), the oldest other claimable heads follow (`oldest`), so a
-- worker never comes back empty beside claimable runs. The partial unique index
-- agent_run_queue_one_active_per_session guarantees one active run per session regardless.
WITH RECURSIVE tenants AS (
  (SELECT tenant_id FROM queue_lanes WHERE NOT busy ORDER BY tenant_id LIMIT 1)
  UNION ALL
  SELECT (SELECT l.tenant_id FROM queue_lanes l
          WHERE NOT l.busy AND l.tenant_id > t.tenant_id
          ORDER BY l.tenant_id LIMIT 1)
  FROM tenants t WHERE t.tenant_id IS NOT NULL
),
fair AS MATERIALIZED (
  SELECT h.head_id, h.head_seq, h.turn, tc.last_claimed_at
  FROM tenants t
  LEFT JOIN tenant_claims tc ON tc.tenant_id = t.tenant_id
  CROSS JOIN LATERAL (
    SELECT l.head_id, l.head_seq, row_number() OVER (ORDER BY l.head_seq) AS turn
    FROM queue_lanes l
    WHERE l.tenant_id = t.tenant_id AND NOT l.busy
      AND (l.ready_at IS NULL OR l.ready_at <= now())
    ORDER BY l.head_seq
    LIMIT :limit
  ) h
  WHERE t.tenant_id IS NOT NULL
),
candidate AS (
  SELECT picked.id FROM (
    SELECT r.id
    FROM fair JOIN agent_run_queue r ON r.id = fair.head_id
    WHERE r.status = 'queued'
    ORDER BY fair.turn, fair.last_claimed_at NULLS FIRST, fair.head_seq
    FOR UPDATE OF r SKIP LOCKED
  ) picked
  UNION ALL
  SELECT oldest.id FROM (
    SELECT r.id
    FROM queue_lanes l JOIN agent_run_queue r ON r.id = l.head_id
    WHERE NOT l.busy AND (l.ready_at IS NULL OR l.ready_at <= now()) AND r.status = 'queued'
      AND NOT EXISTS (SELECT 1 FROM fair WHERE fair.head_id = l.head_id)
    ORDER BY l.head_seq
    FOR UPDATE OF r SKIP LOCKED
  ) oldest
  LIMIT :limit
),
claimed AS (
  UPDATE agent_run_queue r
  SET status = 'running',
      lease_owner = :worker_id,
      lease_expires_at = now() + make_interval(secs => :lease_seconds),
      started_at = coalesce(r.started_at, now()),
      attempts = r.attempts + 1,
      last_event_seq = r.last_event_seq + CASE WHEN r.cancel_requested_at IS NULL
        AND r.lease_expiries < :max_attempts THEN 1 ELSE 0 END
  FROM candidate
  WHERE r.id = candidate.id
  RETURNING r.id, r.tenant_id, r.user_id, r.session_id, r.agent_id, r.attempts,
            r.lease_expiries, r.input, r.cancel_requested_at IS NOT NULL AS cancel_requested,
            r.trace_context, r.queue_seq, r.last_event_seq,
            r.cancel_requested_at IS NULL AND r.lease_expiries < :max_attempts AS started,
            -- enqueue (or end of the debounce window) to this claim, for the first claim's metric
            extract(epoch FROM now() - greatest(r.created_at, coalesce(r.not_before, r.created_at)))
              AS queued_seconds
),
-- Each claimed run's run.started (first attempt) or run.resumed event, stored by the claim
-- itself so it reaches streams the moment the run is claimed, in no transaction of its own
-- (migration 0025). Not for a run the worker will only cancel or give up on (cancel requested,
-- or a lease that expired :max_attempts times): the worker ends those.
started_events AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, id, last_event_seq,
         CASE WHEN attempts = 1 THEN 'run.started' ELSE 'run.resumed' END,
         jsonb_build_object('attempt', attempts, 'workerId', CAST(:worker_id AS text))
  FROM claimed WHERE started
),
claimed_tenants AS (
  SELECT DISTINCT tenant_id FROM claimed
),
-- A tenant's stamp another claim is writing right now is left to it (it is as recent): claims of
-- one tenant do not queue up behind each other's stamp (nor does a tenant's first stamp try an
-- insert where a row exists: the unique check would wait for that row's writer).
first_claims AS (
  INSERT INTO tenant_claims (tenant_id, last_claimed_at)
  SELECT ct.tenant_id, clock_timestamp() FROM claimed_tenants ct
  WHERE NOT EXISTS (SELECT 1 FROM tenant_claims c WHERE c.tenant_id = ct.tenant_id)
  ON CONFLICT (tenant_id) DO NOTHING
),
stamped AS (
  UPDATE tenant_claims tc SET last_claimed_at = clock_timestamp()
  WHERE tc.tenant_id IN (SELECT c.tenant_id FROM tenant_claims c
                         WHERE c.tenant_id IN (SELECT tenant_id FROM claimed_tenants)
                         FOR UPDATE SKIP LOCKED)
)
-- Every row also carries `next_window`: the seconds until the earliest debounce window
-- (ifBusy=collect: `not_before`) of a claimable lane's head ends, or NULL (index
-- queue_lanes_windows). Nothing notifies the workers when a window ends, so a worker sleeps no
-- longer than this; with nothing claimed the answer is one row of NULLs carrying it, so the
-- idle worker learns it in the same round trip.
SELECT claimed.*, w.next_window
FROM (SELECT extract(epoch FROM min(ready_at) - now()) AS next_window
      FROM queue_lanes WHERE NOT busy AND ready_at > now()) w
LEFT JOIN claimed ON true
ORDER BY claimed.queue_seq;

-- name: renew_leases
-- Extend the leases this worker still holds; returns the ones it holds (and their cancel flags).
-- Rows are locked in id order, as the flusher of deferred writes fences them (app.queue.coalesce),
-- so the two never deadlock.
WITH held AS (
  SELECT id FROM agent_run_queue
  WHERE lease_owner = :worker_id AND status = 'running' AND id = ANY(:run_ids)
  ORDER BY id
  FOR UPDATE
)
UPDATE agent_run_queue r
SET lease_expires_at = now() + make_interval(secs => :lease_seconds)
FROM held
WHERE r.id = held.id
RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: recover_expired
-- Runs whose worker stopped renewing go back to the head of their lane (their queue_seq is
-- unchanged, so they are claimed before anything queued after them in the same session), with
-- one more lease expiry counted. Not a run whose lease expires for the :max_attempts-th time:
-- it is left running (lease expired) for expired_at_limit / fail_crashed.
UPDATE agent_run_queue
SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
    lease_expiries = lease_expiries + 1
WHERE status = 'running' AND lease_expires_at < now() AND lease_expiries + 1 < :max_attempts
RETURNING id;

-- name: expired_at_limit
-- Runs whose lease expires for the :max_attempts-th time: their worker keeps dying. This role
-- cannot write their run.failed event, so it only finds them; fail_crashed fails each in its
-- tenant's transaction. Changes nothing: a run a sweep found and did not fail is found again.
SELECT id, tenant_id, user_id, attempts, lease_expiries + 1 AS stops
FROM agent_run_queue
WHERE status = 'running' AND lease_expires_at < now() AND lease_expiries + 1 >= :max_attempts;

-- name: release_runs
-- Hand runs back (graceful shutdown): queued again, at the head of their lane.
UPDATE agent_run_queue
SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner = :worker_id AND status = 'running' AND id = ANY(:run_ids)
RETURNING id;

-- name: fence_and_allocate
-- Every write of a running run passes through here in its own transaction: it proves this
-- worker still holds the lease (same owner, same attempt) and reserves :n event sequence numbers.
-- It locks the run's session row first (the `lane` InitPlan runs before the run row is locked),
-- in the order posts to the session lock them (app.queue.busy): session, then run. A write that
-- appends to the transcript (which updates the session row) therefore never holds the run while
-- a post holds the session and waits for the run.
WITH lane AS (
  SELECT id FROM agent_sessions WHERE id = :session_id FOR NO KEY UPDATE
)
UPDATE agent_run_queue
SET last_event_seq = last_event_seq + :n
WHERE id = :run_id AND lease_owner = :worker_id AND attempts = :attempt AND status = 'running'
  AND EXISTS (SELECT 1 FROM lane)
RETURNING last_event_seq, cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: insert_events
-- A run's events, numbered from :first_seq on, in one statement (arrays of types and JSON data).
INSERT INTO run_events (tenant_id, run_id, seq, type, data)
SELECT :tenant_id, :run_id, :first_seq + e.ord - 1, e.type, e.data::jsonb
FROM unnest(CAST(:types AS text[]), CAST(:data AS text[])) WITH ORDINALITY AS e(type, data, ord);

-- name: allocate_seq
-- Reserve :n event sequence numbers of a run without a lease (API-side events).
UPDATE agent_run_queue
SET last_event_seq = last_event_seq + :n
WHERE id = :run_id
RETURNING last_event_seq, status;

-- name: finish_run
UPDATE agent_run_queue
SET status = :status, finished_at = now(),
    result = CAST(:result AS jsonb), error = CAST(:error AS jsonb),
    lease_owner = NULL, lease_expires_at = NULL, state = NULL
WHERE id = :run_id AND lease_owner = :worker_id AND attempts = :attempt AND status = 'running'
RETURNING id, extract(epoch FROM finished_at - started_at) AS duration_seconds;

-- name: fail_crashed
-- Give up on a run found by expired_at_limit (as its tenant, with the run.failed event in the
-- same transaction). Only if it is still the same expired claim: of two racing sweeps one wins,
-- and a run renewed, recovered or claimed again meanwhile is left alone.
UPDATE agent_run_queue
SET status = 'failed', finished_at = now(), error = CAST(:error AS jsonb),
    lease_owner = NULL, lease_expires_at = NULL, state = NULL,
    lease_expiries = lease_expiries + 1
WHERE id = :run_id AND status = 'running' AND lease_expires_at < now() AND attempts = :attempt
RETURNING id, extract(epoch FROM finished_at - started_at) AS duration_seconds;

-- name: park_run
-- A tool call awaits approval: the run gives up its lease (and its worker's slot) but keeps its
-- lane: `awaiting_approval` counts as active for the lane index and for the claim (queue_lanes).
UPDATE agent_run_queue
SET status = 'awaiting_approval', lease_owner = NULL, lease_expires_at = NULL,
    state = 'awaiting_approval'
WHERE id = :run_id AND lease_owner = :worker_id AND attempts = :attempt AND status = 'running'
RETURNING id;

-- name: park_waiting
-- A tool call waits for runs to end: like park_run, status `waiting` until one of :awaited ends
-- (the run-ended trigger requeues it), a user's message is steered in, or :wake_at. Refused
-- (no row) if such a message is already in the inbox: the fence has locked the run row, and a
-- delivery locks it too, so nothing can arrive unseen between this check and the parking.
UPDATE agent_run_queue
SET status = 'waiting', lease_owner = NULL, lease_expires_at = NULL, state = 'waiting',
    wake_at = :wake_at
WHERE id = :run_id AND lease_owner = :worker_id AND attempts = :attempt AND status = 'running'
  AND NOT EXISTS (
    SELECT 1 FROM run_inbox i
    WHERE i.run_id = :run_id AND i.delivered_at IS NULL
      AND (i.kind = 'steer' OR i.source_run_id = ANY(:awaited)))
RETURNING id;

-- name: wake_overdue
-- Waiting runs whose wait timed out go back to the head of their lane (the call then returns
-- what it has). Cross-tenant, by the workers' heartbeat.
UPDATE agent_run_queue
SET status = 'queued', state = NULL, wake_at = NULL
WHERE id IN (SELECT id FROM agent_run_queue
             WHERE status = 'waiting' AND wake_at <= now()
             ORDER BY wake_at LIMIT 100 FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: requeue_parked
-- The approval was decided (or expired): back to the head of its lane (queue_seq unchanged).
UPDATE agent_run_queue
SET status = 'queued', state = NULL
WHERE id = :run_id AND status = 'awaiting_approval'
RETURNING id;

-- name: cancel_idle
-- A run no worker holds (queued, or parked awaiting approval or waiting) is cancelled on the spot.
UPDATE agent_run_queue
SET status = 'cancelled', finished_at = now(), cancel_requested_at = coalesce(cancel_requested_at, now()),
    error = NULL, state = NULL, wake_at = NULL
WHERE id = :run_id AND status IN ('queued', 'awaiting_approval', 'waiting')
RETURNING id;

-- name: request_cancel_running
UPDATE agent_run_queue
SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE id = :run_id AND status = 'running'
RETURNING id, status;

-- name: wait_clock
-- A sessions_wait call's clock: when it first started (its first tool.started event, kept across
-- the run being parked and resumed; now() if none is stored yet) and the database's now().
SELECT coalesce(min(created_at), now()) AS started_at, now() AS now
FROM run_events
WHERE run_id = :run_id AND type = 'tool.started' AND data ->> 'toolCallId' = :tool_call_id;

-- name: spawn_tree
-- The sub-agents a run spawned and theirs, down to :levels levels, parents before children.
-- A child's status is its spawn's once ended (`timed_out` is only known there), else its run's.
WITH RECURSIVE tree AS (
  SELECT sp.*, 1 AS level FROM subagent_spawns sp
  WHERE sp.parent_run_id = :run_id AND sp.child_run_id IS NOT NULL
  UNION ALL
  SELECT sp.*, t.level + 1 FROM subagent_spawns sp
  JOIN tree t ON sp.parent_run_id = t.child_run_id
  WHERE t.level < :levels AND sp.child_run_id IS NOT NULL
)
SELECT t.parent_run_id, t.child_run_id, t.child_session_key, t.label, t.task, t.agent_id,
       CASE WHEN t.status IN ('completed', 'failed', 'cancelled', 'timed_out') THEN t.status
            ELSE r.status END AS status,
       r.result, r.error, t.created_at, r.finished_at
FROM tree t JOIN agent_run_queue r ON r.id = t.child_run_id
ORDER BY t.level, t.created_at, t.id;

-- name: overdue_runs
-- Runs no worker holds whose hard deadline (`deadline_at`, a sub-agent's timeoutSeconds) has
-- passed: the workers' heartbeat fails each in a transaction of its tenant. Cross-tenant read.
SELECT id, tenant_id FROM agent_run_queue
WHERE deadline_at <= now() AND status IN ('queued', 'awaiting_approval', 'waiting')
ORDER BY deadline_at
LIMIT 100;

-- name: fail_overdue
-- Conditional: of two workers sweeping at once, one fails the run (the other gets no row).
UPDATE agent_run_queue
SET status = 'failed', finished_at = now(), state = NULL, wake_at = NULL,
    error = jsonb_build_object('code', 'run_timeout', 'message', CAST(:message AS text))
WHERE id = :run_id AND deadline_at <= now()
  AND status IN ('queued', 'awaiting_approval', 'waiting')
RETURNING id;

-- name: orphaned_runs
-- Live runs whose parent was cancelled but that the cancel did not reach (the run-ended trigger
-- skips rows a worker had locked): running ones not yet asked to stop, and idle ones.
SELECT c.id, c.tenant_id FROM agent_run_queue c
JOIN agent_run_queue p ON p.id = c.parent_run_id
WHERE p.status = 'cancelled'
  AND (c.status IN ('queued', 'awaiting_approval', 'waiting')
       OR (c.status = 'running' AND c.cancel_requested_at IS NULL))
LIMIT 100;

-- name: cancel_orphan
-- An idle run of a cancelled parent is cancelled like the trigger does it.
UPDATE agent_run_queue
SET status = 'cancelled', finished_at = now(),
    cancel_requested_at = coalesce(cancel_requested_at, now()),
    error = jsonb_build_object('code', 'cancelled', 'message', 'parent run cancelled'),
    state = NULL, wake_at = NULL
WHERE id = :run_id AND status IN ('queued', 'awaiting_approval', 'waiting')
  AND EXISTS (SELECT 1 FROM agent_run_queue p
              WHERE p.id = agent_run_queue.parent_run_id AND p.status = 'cancelled')
RETURNING id;

-- name: collect_into
-- ifBusy=collect: append a message to a collecting run that is still queued (a worker that
-- claimed it first makes this match nothing) and push its debounce window back.
UPDATE agent_run_queue
SET input = jsonb_build_object(
      'message', concat(input ->> 'message', E'\n\n', CAST(:message AS text)),
      'messages', coalesce(input -> 'messages', '[]'::jsonb) || jsonb_build_array(CAST(:message AS text)),
      'collect', true),
    not_before = now() + make_interval(secs => :window)
WHERE id = :run_id AND status = 'queued'
RETURNING id;
