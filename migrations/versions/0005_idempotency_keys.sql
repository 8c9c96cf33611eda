-- agent-runtime idempotency keys (app/queue/idempotency.py): `Idempotency-Key` on
-- POST /api/agent-runtime. A retried request within the key's lifetime (24 h) gets the first
-- answer again; the row is written in the same transaction as the run it answers with, so there is
-- never a run without its key nor a key without its run.

CREATE TABLE idempotency_keys (
  tenant_id    text NOT NULL,
  user_id      text NOT NULL,
  key          text NOT NULL CHECK (key ~ '^[ -~]{1,255}$'),
  request_hash text NOT NULL,
  run_id       uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  status_code  integer NOT NULL CHECK (status_code BETWEEN 200 AND 299),
  response     jsonb,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, user_id, key)
);
COMMENT ON TABLE idempotency_keys IS
  'Idempotency-Key of a request, per tenant and user: the first answer, replayed until expires_at.';
COMMENT ON COLUMN idempotency_keys.request_hash IS
  'sha256 of the canonical JSON of the operation and its request body; another body is a 422.';
COMMENT ON COLUMN idempotency_keys.response IS
  'The first answer''s JSON body (NULL for a streamed answer: its run is streamed again).';
-- Expired keys are pruned a few at a time by the inserts of the same tenant.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (tenant_id, expires_at);
CREATE INDEX idempotency_keys_run ON idempotency_keys (run_id);

-- RLS exactly like 0001: the app role sees its tenant's rows only.
ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency_keys FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO agent_runtime_app;
CREATE POLICY tenant_isolation ON idempotency_keys FOR ALL TO agent_runtime_app
  USING (tenant_id = (SELECT public.agent_runtime_tenant_id()))
  WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()));
