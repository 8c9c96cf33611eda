-- agent-runtime: count how often a run's worker stopped (MAX_RUN_ATTEMPTS, app/queue/manager.py).
--
-- `attempts` counts claims, and a run is claimed again after a graceful hand-back or an approval,
-- not only after its worker died: it cannot tell a run that kills its worker from one that asked
-- for five approvals. `lease_expiries` counts only the claims that ended with the lease running
-- out (the worker died, froze or lost the database), incremented by `recover_expired`.

ALTER TABLE agent_run_queue ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN agent_run_queue.lease_expiries IS
  'How many times the run''s lease expired (its worker stopped); at MAX_RUN_ATTEMPTS it fails.';
