-- The claim stores the run's `run.started` / `run.resumed` event itself (app/queue/queries.sql:
-- the claim statements), in the transaction that takes the lease: the event reaches streams as
-- soon as the run is claimed, with no transaction of its own. The worker role may insert only
-- those two event types, each with its run's own tenant (still reading no tenant table but the
-- queue). The check cannot ask for the run's new status or seq: the claim's UPDATE and this
-- INSERT are parts of one statement, and the policy's subquery sees the rows as the statement
-- began.
GRANT INSERT ON run_events TO agent_runtime_worker;
CREATE POLICY run_events_claim_started ON run_events FOR INSERT TO agent_runtime_worker
  WITH CHECK (
    type IN ('run.started', 'run.resumed')
    AND EXISTS (SELECT 1 FROM agent_run_queue q
                WHERE q.id = run_id AND q.tenant_id = run_events.tenant_id));
