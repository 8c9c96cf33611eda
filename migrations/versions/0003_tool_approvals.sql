-- agent-runtime tool policy and approvals (app/tools/policy.py, app/tools/approvals.py):
-- agent rows of agent_tool_policies may inherit the tenant's profile, tool executions may wait
-- for an approval, and two new tenant tables: tool_approvals (the audit record of every approval
-- gate) and tool_trust (trustSeconds grants: calls of a tool in a session approved ahead).

-- A per-agent policy row with a NULL profile inherits the tenant's profile; tenant rows keep one.
ALTER TABLE agent_tool_policies ALTER COLUMN profile DROP NOT NULL;
ALTER TABLE agent_tool_policies ADD CONSTRAINT agent_tool_policies_tenant_profile
  CHECK (agent_id IS NOT NULL OR profile IS NOT NULL);
ALTER TABLE agent_tool_policies ADD CONSTRAINT agent_tool_policies_caps
  CHECK (coalesce(max_calls_per_turn, 1) >= 1 AND coalesce(max_calls_per_run, 1) >= 1);

CREATE TABLE tool_approvals (
  id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id       text NOT NULL,
  run_id          uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  session_id      uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  tool_call_id    text NOT NULL,
  tool            text NOT NULL,
  args            jsonb NOT NULL,
  risk            text NOT NULL CHECK (risk IN ('low', 'medium', 'high')),
  reason          text NOT NULL,
  status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
  decided_by      text,
  decided_at      timestamptz,
  decision_reason text,
  trust_seconds   integer CHECK (trust_seconds BETWEEN 0 AND 86400),
  expires_at      timestamptz NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT tool_approvals_run_call_key UNIQUE (run_id, tool_call_id),
  CONSTRAINT tool_approvals_decided CHECK ((status = 'pending') = (decided_at IS NULL))
);
CREATE INDEX tool_approvals_pending_expiry ON tool_approvals (expires_at) WHERE status = 'pending';
CREATE INDEX tool_approvals_tenant_created ON tool_approvals (tenant_id, created_at DESC, id DESC);

CREATE TABLE tool_trust (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id   text NOT NULL,
  session_id  uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  tool        text NOT NULL,
  approval_id uuid REFERENCES tool_approvals (id) ON DELETE SET NULL,
  granted_by  text NOT NULL,
  expires_at  timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_trust_session ON tool_trust (session_id, tool, expires_at);

-- A call waiting for its approval is listed with the run's tool executions.
ALTER TABLE tool_executions DROP CONSTRAINT tool_executions_status_check;
ALTER TABLE tool_executions ADD CONSTRAINT tool_executions_status_check
  CHECK (status IN ('started', 'completed', 'failed', 'interrupted', 'awaiting_approval'));
ALTER TABLE tool_executions ADD CONSTRAINT tool_executions_approval_fkey
  FOREIGN KEY (approval_id) REFERENCES tool_approvals (id) ON DELETE SET NULL;

-- RLS exactly like 0001: the app role sees its tenant's rows only.
DO $rls$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['tool_approvals', 'tool_trust']
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

-- The worker heartbeat finds overdue approvals across tenants (it then expires each one through
-- Database.tenant(), under tenant_isolation). It may read these columns only: no args, no users.
GRANT SELECT (id, tenant_id, status, expires_at) ON tool_approvals TO agent_runtime_worker;
CREATE POLICY approvals_expiry_discovery ON tool_approvals FOR SELECT
  TO agent_runtime_worker USING (true);
