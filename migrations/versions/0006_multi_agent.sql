-- agent-runtime multi-agent hand-offs (docs/multi-agent.md): sub-agents, agent-to-agent messages,
-- steering a busy session. Every hand-off is a row, written in the transaction that causes it.
--
-- * run_inbox: messages for a run, injected into its transcript at its next model boundary
--   (app/runtime/inbox.py) or consumed by the tool call that waits for them (sessions_wait,
--   sessions_send with waitForReply).
-- * agent_runtime_run_ended(): the trigger that runs in the same transaction as any change of a
--   run to a terminal status, whoever makes it (worker, API cancel, sweeps). It stores a result
--   for each tool call left open, records a spawned child's outcome and announces it to its
--   parent, hands a reply to a waiting sender, turns the run's undelivered inbox into follow-up
--   runs, and cancels the descendants of a cancelled run.
--   It runs as the caller's role under RLS: terminal changes are always made in a tenant
--   transaction, and everything it touches belongs to that tenant.

-- ---------------------------------------------------------------- the queue
-- `waiting`: parked until a child or a reply arrives (or `wake_at`): no worker slot, lane held.
ALTER TABLE agent_run_queue DROP CONSTRAINT agent_run_queue_status_check;
ALTER TABLE agent_run_queue ADD CONSTRAINT agent_run_queue_status_check CHECK (status IN
  ('queued', 'running', 'awaiting_approval', 'waiting', 'completed', 'failed', 'cancelled'));
DROP INDEX agent_run_queue_one_active_per_session;
CREATE UNIQUE INDEX agent_run_queue_one_active_per_session
  ON agent_run_queue (session_id) WHERE status IN ('running', 'awaiting_approval', 'waiting');

ALTER TABLE agent_run_queue
  ADD COLUMN parent_run_id uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  ADD COLUMN wake_at timestamptz,
  ADD COLUMN not_before timestamptz,
  ADD COLUMN deadline_at timestamptz,
  ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN agent_run_queue.parent_run_id IS
  'The run that spawned this one (sessions_spawn); cancelling it cancels this run.';
COMMENT ON COLUMN agent_run_queue.wake_at IS
  'A waiting run is requeued at this time even if nothing arrived (the wait''s timeout).';
COMMENT ON COLUMN agent_run_queue.not_before IS
  'Not claimable before this time (ifBusy=collect: the debounce window of merged messages).';
COMMENT ON COLUMN agent_run_queue.lease_expiries IS
  'How often a worker stopped renewing the run''s lease (died, froze): MAX_RUN_ATTEMPTS counts '
  'these, not claims (a run parked and resumed is claimed again without any crash).';
COMMENT ON COLUMN agent_run_queue.deadline_at IS
  'The run fails with run_timeout at this time, queued or not (a child''s timeoutSeconds).';
CREATE INDEX agent_run_queue_children ON agent_run_queue (parent_run_id)
  WHERE parent_run_id IS NOT NULL;
CREATE INDEX agent_run_queue_waiting ON agent_run_queue (wake_at) WHERE status = 'waiting';
CREATE INDEX agent_run_queue_deadline ON agent_run_queue (deadline_at)
  WHERE deadline_at IS NOT NULL AND status IN ('queued', 'awaiting_approval', 'waiting');

-- A waiting run that is cancelled frees its lane too: wake the workers.
DROP TRIGGER agent_run_queue_notify_status ON agent_run_queue;
CREATE TRIGGER agent_run_queue_notify_status AFTER UPDATE OF status ON agent_run_queue
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                     AND (NEW.status = 'queued'
                          OR OLD.status IN ('running', 'awaiting_approval', 'waiting')))
  EXECUTE FUNCTION agent_runtime_notify_runs();

-- ---------------------------------------------------------------- sub-agents
ALTER TABLE subagent_spawns DROP CONSTRAINT subagent_spawns_status_check;
ALTER TABLE subagent_spawns ADD CONSTRAINT subagent_spawns_status_check CHECK (status IN
  ('pending', 'running', 'completed', 'failed', 'cancelled', 'timed_out'));
ALTER TABLE subagent_spawns
  ADD COLUMN tool_call_id text,
  ADD COLUMN label text,
  ADD COLUMN child_session_key text,
  ADD COLUMN depth integer NOT NULL DEFAULT 1 CHECK (depth >= 1),
  ADD COLUMN timeout_seconds integer,
  ADD COLUMN error jsonb,
  ADD CONSTRAINT subagent_spawns_call_key UNIQUE (parent_run_id, tool_call_id);
CREATE UNIQUE INDEX subagent_spawns_child ON subagent_spawns (child_run_id);
COMMENT ON COLUMN subagent_spawns.tool_call_id IS
  'The parent''s sessions_spawn call: a re-executed call finds its spawn instead of spawning again.';

-- ---------------------------------------------------------------- agent-to-agent messages
CREATE TABLE agent_messages (
  id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id         text NOT NULL,
  sender_run_id     uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  sender_session_id uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  tool_call_id      text NOT NULL,
  target_session_id uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  target_run_id     uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  origin_run_id     uuid NOT NULL,
  message           text NOT NULL,
  wait_for_reply    boolean NOT NULL DEFAULT false,
  created_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT agent_messages_call_key UNIQUE (sender_run_id, tool_call_id)
);
COMMENT ON TABLE agent_messages IS
  'sessions_send: one agent''s message into another session (its run there is target_run_id).';
COMMENT ON COLUMN agent_messages.origin_run_id IS
  'The run that started the exchange (a user''s run): the ping-pong cap counts per origin.';
CREATE INDEX agent_messages_target_run ON agent_messages (target_run_id);
CREATE INDEX agent_messages_origin ON agent_messages (origin_run_id);

-- ---------------------------------------------------------------- the inbox
CREATE TABLE run_inbox (
  id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id           text NOT NULL,
  run_id              uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  kind                text NOT NULL CHECK (kind IN ('steer', 'subagent', 'reply')),
  source_run_id       uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  text                text NOT NULL,
  payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at          timestamptz NOT NULL DEFAULT now(),
  delivered_at        timestamptz,
  delivery            text CHECK (delivery IN ('injected', 'tool', 'followup', 'dropped')),
  delivered_to_run_id uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  tool_call_id        text,
  CHECK ((delivered_at IS NULL) = (delivery IS NULL))
);
COMMENT ON TABLE run_inbox IS
  'Messages for a run: a steering user message, a child''s outcome, a reply. Delivered once: '
  'injected at a model boundary, consumed by a waiting tool call, or turned into a follow-up run.';
CREATE UNIQUE INDEX run_inbox_one_per_source ON run_inbox (run_id, kind, source_run_id)
  WHERE source_run_id IS NOT NULL;
CREATE INDEX run_inbox_undelivered ON run_inbox (run_id, id) WHERE delivered_at IS NULL;

-- ---------------------------------------------------------------- session visibility
ALTER TABLE agent_tool_policies ADD COLUMN session_scope text
  CHECK (session_scope IN ('user', 'tenant'));
COMMENT ON COLUMN agent_tool_policies.session_scope IS
  'Which sessions the sessions_* tools reach: the run''s user''s (user, the default) or the '
  'whole tenant''s (tenant). NULL: inherit (agent rows) or user (tenant row).';

-- ---------------------------------------------------------------- RLS, like 0001
DO $rls$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['agent_messages', 'run_inbox']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO agent_runtime_app', t);
    EXECUTE format(
      'CREATE POLICY tenant_isolation ON %I FOR ALL TO agent_runtime_app '
      'USING (tenant_id = (SELECT public.agent_runtime_tenant_id())) '
      'WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()))', t);
  END LOOP;
END
$rls$;

-- ---------------------------------------------------------------- hand-off functions
-- Append one event to a run's log (the run row is locked by the UPDATE, like fence_and_allocate).
CREATE FUNCTION agent_runtime_emit(target uuid, event_type text, event_data jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  next_seq integer;
  tenant text;
BEGIN
  UPDATE agent_run_queue SET last_event_seq = last_event_seq + 1 WHERE id = target
    RETURNING last_event_seq, tenant_id INTO next_seq, tenant;
  IF FOUND THEN
    INSERT INTO run_events (tenant_id, run_id, seq, type, data)
      VALUES (tenant, target, next_seq, event_type, event_data);
  END IF;
END
$$;

-- A new run at the end of `origin`'s lane carrying one inbox message (the run's user message).
CREATE FUNCTION agent_runtime_followup(origin agent_run_queue, kind text, source uuid,
                                        message text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
  new_id uuid;
  key text;
BEGIN
  INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input)
    VALUES (origin.tenant_id, origin.session_id, origin.agent_id, origin.user_id,
            jsonb_strip_nulls(jsonb_build_object(
              'message', message, 'followUp',
              jsonb_build_object('kind', kind, 'ofRunId', origin.id, 'sourceRunId', source))))
    RETURNING id INTO new_id;
  SELECT session_key INTO key FROM agent_sessions WHERE id = origin.session_id;
  PERFORM agent_runtime_emit(new_id, 'run.queued',
                             jsonb_build_object('sessionKey', key, 'status', 'queued'));
  RETURN new_id;
END
$$;

-- Deliver a message to run `target`: into its inbox while it is live (waking it if it waits);
-- as a follow-up run in its lane once it has completed or failed; recorded as dropped if it was
-- cancelled (a user's steering message is never dropped: it becomes a follow-up run).
-- Returns the run whose stream should tell of it: `target` while it is live, else the follow-up
-- run, NULL if dropped (a cancelled run's stream has ended: nothing may follow its last event).
CREATE FUNCTION agent_runtime_deliver(target uuid, kind text, source uuid, message text,
                                      payload jsonb)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
  t agent_run_queue;
  followup uuid;
BEGIN
  SELECT * INTO t FROM agent_run_queue WHERE id = target FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF t.status IN ('queued', 'running', 'awaiting_approval', 'waiting') THEN
    INSERT INTO run_inbox (tenant_id, run_id, kind, source_run_id, text, payload)
      VALUES (t.tenant_id, t.id, kind, source, message, payload);
    IF t.status = 'waiting' THEN
      UPDATE agent_run_queue SET status = 'queued', wake_at = NULL, state = NULL WHERE id = t.id;
    END IF;
    RETURN t.id;
  END IF;
  IF t.status = 'cancelled' AND kind <> 'steer' THEN
    INSERT INTO run_inbox (tenant_id, run_id, kind, source_run_id, text, payload, delivered_at,
                           delivery)
      VALUES (t.tenant_id, t.id, kind, source, message, payload, now(), 'dropped');
    RETURN NULL;
  END IF;
  followup := agent_runtime_followup(t, kind, source, message);
  INSERT INTO run_inbox (tenant_id, run_id, kind, source_run_id, text, payload, delivered_at,
                         delivery, delivered_to_run_id)
    VALUES (t.tenant_id, t.id, kind, source, message, payload, now(), 'followup', followup);
  RETURN followup;
END
$$;

-- What the parent's model reads when a child ends.
CREATE FUNCTION agent_runtime_announcement(spawn subagent_spawns, outcome text, child agent_run_queue)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT format('[sub-agent %s %s (run %s)]', coalesce(spawn.label, spawn.child_session_key),
                replace(outcome, '_', ' '), child.id)
         || CASE
              WHEN outcome = 'completed' THEN E'\n' || coalesce(child.result ->> 'text', '')
              WHEN child.error IS NOT NULL THEN E'\n' || coalesce(child.error ->> 'code', 'error')
                                               || ': ' || coalesce(child.error ->> 'message', '')
              ELSE ''
            END
$$;

-- Every tool call keeps a result: the calls of `r`'s latest model turn still without one when it
-- ends (parked awaiting an approval or a wait, or cut short) get a stored failed result, in the
-- transaction that ends the run. (A worker finishing a run writes them itself, with events,
-- before this runs; this catches the runs that end without a worker: cancelled while parked,
-- interrupted, failed by a sweep.)
CREATE FUNCTION agent_runtime_close_calls(r agent_run_queue) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  turn jsonb;
  call jsonb;
  reason text;
  result jsonb;
  tokens integer;
  next_seq integer;
BEGIN
  SELECT m.payload INTO turn FROM session_messages m
    WHERE m.run_id = r.id AND m.role = 'assistant' ORDER BY m.seq DESC LIMIT 1;
  IF turn IS NULL OR jsonb_array_length(coalesce(turn -> 'toolCalls', '[]'::jsonb)) = 0 THEN
    RETURN;
  END IF;
  reason := CASE WHEN r.status = 'cancelled'
                 THEN 'cancelled: the run was stopped before this call finished'
                 ELSE format('failed: the run ended (%s) before this call finished',
                             coalesce(r.error ->> 'code', r.status)) END;
  FOR call IN SELECT value FROM jsonb_array_elements(turn -> 'toolCalls') LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM session_messages m
                          WHERE m.run_id = r.id AND m.role = 'tool'
                            AND m.payload ->> 'toolCallId' = call ->> 'id');
    result := jsonb_build_object('kind', 'tool_result', 'toolCallId', call ->> 'id',
                                 'name', call ->> 'name', 'ok', false, 'result', NULL,
                                 'error', reason);
    tokens := greatest(1, ceil(length(result::text) / 4.0)::integer);
    UPDATE agent_sessions SET message_count = message_count + 1, token_count = token_count + tokens
      WHERE id = r.session_id RETURNING message_count INTO next_seq;
    INSERT INTO session_messages (tenant_id, session_id, run_id, seq, role, payload, token_count)
      VALUES (r.tenant_id, r.session_id, r.id, next_seq, 'tool', result, tokens);
    UPDATE tool_executions SET status = 'failed', finished_at = now(),
                               error = jsonb_build_object('message', reason)
      WHERE run_id = r.id AND tool_call_id = call ->> 'id'
        AND status IN ('started', 'awaiting_approval');
  END LOOP;
END
$$;

CREATE FUNCTION agent_runtime_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  spawn subagent_spawns;
  sent agent_messages;
  item run_inbox;
  outcome text;
  payload jsonb;
  followup uuid;
  told uuid;
  child uuid;
  reply text;
BEGIN
  -- 0. Every tool call of the run keeps a result.
  IF NEW.status <> 'completed' THEN
    PERFORM agent_runtime_close_calls(NEW);
  END IF;

  -- 1. A spawned child ended: its spawn row records how, its parent hears of it once.
  SELECT * INTO spawn FROM subagent_spawns WHERE child_run_id = NEW.id FOR UPDATE;
  IF FOUND AND spawn.status IN ('pending', 'running') THEN
    outcome := CASE WHEN NEW.status = 'failed' AND NEW.error ->> 'code' = 'run_timeout'
                    THEN 'timed_out' ELSE NEW.status END;
    UPDATE subagent_spawns
      SET status = outcome, result = NEW.result, error = NEW.error, finished_at = now()
      WHERE id = spawn.id;
    payload := jsonb_strip_nulls(jsonb_build_object(
      'childRunId', NEW.id, 'childSessionKey', spawn.child_session_key, 'label', spawn.label,
      'status', outcome, 'result', NEW.result, 'error', NEW.error));
    told := agent_runtime_deliver(spawn.parent_run_id, 'subagent', NEW.id,
                                  agent_runtime_announcement(spawn, outcome, NEW), payload);
    IF told IS NOT NULL THEN
      PERFORM agent_runtime_emit(told, 'subagent.completed', payload);
    END IF;
  END IF;

  -- 2. A run answering a sessions_send with waitForReply ended: the reply goes to the sender.
  FOR sent IN SELECT * FROM agent_messages WHERE target_run_id = NEW.id AND wait_for_reply LOOP
    reply := CASE WHEN NEW.status = 'completed' THEN coalesce(NEW.result ->> 'text', '')
                  ELSE format('[no reply: the run %s]', NEW.status) END;
    PERFORM agent_runtime_deliver(sent.sender_run_id, 'reply', NEW.id, reply,
      jsonb_strip_nulls(jsonb_build_object('runId', NEW.id, 'status', NEW.status,
                                           'result', NEW.result, 'error', NEW.error)));
  END LOOP;

  -- 3. Messages that reached this run but were never delivered are not lost: each becomes a
  --    follow-up run in the lane (a child's outcome for a cancelled run is dropped, recorded).
  FOR item IN SELECT * FROM run_inbox WHERE run_id = NEW.id AND delivered_at IS NULL
              ORDER BY id FOR UPDATE LOOP
    IF NEW.status = 'cancelled' AND item.kind <> 'steer' THEN
      UPDATE run_inbox SET delivered_at = now(), delivery = 'dropped' WHERE id = item.id;
    ELSE
      followup := agent_runtime_followup(NEW, item.kind, item.source_run_id, item.text);
      UPDATE run_inbox SET delivered_at = now(), delivery = 'followup',
                           delivered_to_run_id = followup
        WHERE id = item.id;
    END IF;
  END LOOP;

  -- 4. A cancelled run's live descendants are cancelled (with their pending approvals).
  --    Children a worker is writing right now (row locked) are skipped rather than waited for
  --    (a child finishing locks child then parent: waiting here could deadlock); they are
  --    asked to cancel by the workers' sweep a moment later.
  IF NEW.status = 'cancelled' THEN
    FOR child IN
      UPDATE agent_run_queue SET status = 'cancelled', finished_at = now(),
                                 cancel_requested_at = coalesce(cancel_requested_at, now()),
                                 error = jsonb_build_object('code', 'cancelled',
                                                            'message', 'parent run cancelled'),
                                 state = NULL, wake_at = NULL
        WHERE id IN (SELECT id FROM agent_run_queue
                     WHERE parent_run_id = NEW.id
                       AND status IN ('queued', 'awaiting_approval', 'waiting')
                     FOR UPDATE SKIP LOCKED)
        RETURNING id
    LOOP
      UPDATE tool_approvals SET status = 'expired', decided_at = now(),
                                decision_reason = 'parent run cancelled'
        WHERE run_id = child AND status = 'pending';
      UPDATE tool_executions SET status = 'failed', finished_at = now(),
                                 error = jsonb_build_object('message', 'parent run cancelled')
        WHERE run_id = child AND status = 'awaiting_approval';
      PERFORM agent_runtime_emit(child, 'run.cancelled',
                                 jsonb_build_object('reason', 'parent run cancelled'));
    END LOOP;
    UPDATE agent_run_queue SET cancel_requested_at = now()
      WHERE id IN (SELECT id FROM agent_run_queue
                   WHERE parent_run_id = NEW.id AND status = 'running'
                     AND cancel_requested_at IS NULL
                   FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER agent_run_queue_run_ended AFTER UPDATE OF status ON agent_run_queue
  FOR EACH ROW WHEN (OLD.status IN ('queued', 'running', 'awaiting_approval', 'waiting')
                     AND NEW.status IN ('completed', 'failed', 'cancelled'))
  EXECUTE FUNCTION agent_runtime_run_ended();
