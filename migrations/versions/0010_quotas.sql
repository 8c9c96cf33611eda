-- Quotas per tenant (tenant_quotas), the tenant's model tokens per UTC day (tenant_usage_daily)
-- and fair claiming across tenants (tenant_claims, read and touched by claim_next).

-- A tenant's overrides of the QUOTA_* settings; NULL: the deployment's default (0 = unlimited).
CREATE TABLE tenant_quotas (
  tenant_id        text PRIMARY KEY,
  runs_per_minute  integer CHECK (runs_per_minute >= 0),
  active_runs      integer CHECK (active_runs >= 0),
  queued_runs      integer CHECK (queued_runs >= 0),
  tokens_per_day   bigint CHECK (tokens_per_day >= 0),
  updated_by       text NOT NULL,
  updated_at       timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE tenant_quotas ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_quotas FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE ON tenant_quotas TO agent_runtime_app;
-- Every member reads its tenant's limits (GET /usage); only admins change them.
CREATE POLICY quotas_read ON tenant_quotas FOR SELECT TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id()));
CREATE POLICY quotas_insert ON tenant_quotas FOR INSERT TO agent_runtime_app
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND (SELECT public.agent_runtime_is_admin()));
CREATE POLICY quotas_update ON tenant_quotas FOR UPDATE TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id())
         AND (SELECT public.agent_runtime_is_admin()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id())
              AND (SELECT public.agent_runtime_is_admin()));

-- Model tokens per tenant per UTC day, added in the transaction that records a call's usage.
CREATE TABLE tenant_usage_daily (
  tenant_id      text NOT NULL,
  day            date NOT NULL,
  input_tokens   bigint NOT NULL DEFAULT 0,
  output_tokens  bigint NOT NULL DEFAULT 0,
  runs           integer NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, day)
);
ALTER TABLE tenant_usage_daily ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_usage_daily FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE ON tenant_usage_daily TO agent_runtime_app;
CREATE POLICY tenant_isolation ON tenant_usage_daily FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()));

-- Fair claiming: when each tenant last had a run claimed. Queue bookkeeping of the worker role
-- (claim_next reads and touches it); tenants never see it.
CREATE TABLE tenant_claims (
  tenant_id        text PRIMARY KEY,
  last_claimed_at  timestamptz NOT NULL
);
ALTER TABLE tenant_claims ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_claims FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE ON tenant_claims TO agent_runtime_worker;
CREATE POLICY claims_workers ON tenant_claims FOR ALL TO agent_runtime_worker
  USING (true) WITH CHECK (true);

-- claim_next walks the tenants with queued runs (a skip scan over this index) and takes each
-- one's oldest claimable run (the same index, by queue_seq within the tenant).
CREATE INDEX agent_run_queue_queued_tenant ON agent_run_queue (tenant_id, queue_seq)
  WHERE status = 'queued';
-- The quota checks count a tenant's live runs by status.
CREATE INDEX agent_run_queue_tenant_live ON agent_run_queue (tenant_id, status)
  WHERE status IN ('queued', 'running', 'awaiting_approval', 'waiting');
