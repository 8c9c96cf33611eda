-- agent-runtime initial schema: tables, the Supabase-compatible auth shim, roles, RLS, NOTIFY triggers.
-- Runs unchanged on Supabase (where auth.* already exists) and on plain Postgres.

CREATE EXTENSION IF NOT EXISTS vector;

-- ---------------------------------------------------------------- auth shim
-- Supabase ships auth.uid() / auth.jwt() reading request.jwt.claims; create them only if missing.
CREATE SCHEMA IF NOT EXISTS auth;

DO $shim$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'auth' AND p.proname = 'jwt') THEN
    EXECUTE $f$
      CREATE FUNCTION auth.jwt() RETURNS jsonb LANGUAGE sql STABLE AS $b$
        SELECT coalesce(
          nullif(current_setting('request.jwt.claim', true), ''),
          nullif(current_setting('request.jwt.claims', true), '')
        )::jsonb
      $b$ $f$;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'auth' AND p.proname = 'uid') THEN
    EXECUTE $f$
      CREATE FUNCTION auth.uid() RETURNS text LANGUAGE sql STABLE AS $b$
        SELECT coalesce(
          nullif(current_setting('request.jwt.claim.sub', true), ''),
          (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
        )
      $b$ $f$;
  END IF;
END
$shim$;

-- The tenant of the current transaction: app_metadata.tenant_id, else sub (see app/auth/jwt.py).
CREATE OR REPLACE FUNCTION public.agent_runtime_tenant_id() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce(auth.jwt() -> 'app_metadata' ->> 'tenant_id', auth.jwt() ->> 'sub')
$$;

-- ---------------------------------------------------------------- roles
-- agent_runtime_app: every tenant-scoped query (API and worker) runs as this role, with claims set.
-- agent_runtime_worker: the cross-tenant queue verbs (claim, heartbeat, recover) and nothing else.
DO $roles$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_runtime_app') THEN
    CREATE ROLE agent_runtime_app NOLOGIN NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_runtime_worker') THEN
    CREATE ROLE agent_runtime_worker NOLOGIN NOBYPASSRLS;
  END IF;
  EXECUTE format('GRANT agent_runtime_app TO %I', current_user);
  EXECUTE format('GRANT agent_runtime_worker TO %I', current_user);
END
$roles$;

GRANT USAGE ON SCHEMA public TO agent_runtime_app, agent_runtime_worker;
GRANT USAGE ON SCHEMA auth TO agent_runtime_app, agent_runtime_worker;

-- ---------------------------------------------------------------- tables
CREATE TABLE agents (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id     text NOT NULL,
  name          text NOT NULL,
  model         text NOT NULL DEFAULT 'offline',
  system_prompt text NOT NULL DEFAULT '',
  max_turns     integer NOT NULL DEFAULT 8 CHECK (max_turns BETWEEN 1 AND 100),
  is_default    boolean NOT NULL DEFAULT false,
  owner_user_id text,
  settings      jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT agents_tenant_name_key UNIQUE (tenant_id, name)
);
CREATE UNIQUE INDEX agents_one_default_per_tenant ON agents (tenant_id) WHERE is_default;

CREATE TABLE agent_sessions (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id    text NOT NULL,
  session_key  text NOT NULL,
  agent_id     uuid NOT NULL REFERENCES agents (id),
  user_id      text NOT NULL,
  title        text,
  metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
  message_count integer NOT NULL DEFAULT 0,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  last_run_at  timestamptz,
  CONSTRAINT agent_sessions_tenant_key_key UNIQUE (tenant_id, session_key)
);
CREATE INDEX agent_sessions_tenant_updated ON agent_sessions (tenant_id, updated_at DESC);

CREATE TABLE agent_run_queue (
  id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id           text NOT NULL,
  session_id          uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  agent_id            uuid NOT NULL REFERENCES agents (id),
  user_id             text NOT NULL,
  queue_seq           bigint GENERATED ALWAYS AS IDENTITY,
  status              text NOT NULL DEFAULT 'queued' CHECK (status IN
                        ('queued', 'running', 'awaiting_approval', 'completed', 'failed', 'cancelled')),
  input               jsonb NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  started_at          timestamptz,
  finished_at         timestamptz,
  lease_owner         text,
  lease_expires_at    timestamptz,
  attempts            integer NOT NULL DEFAULT 0,
  cancel_requested_at timestamptz,
  result              jsonb,
  error               jsonb,
  input_tokens        integer NOT NULL DEFAULT 0,
  output_tokens       integer NOT NULL DEFAULT 0,
  last_event_seq      integer NOT NULL DEFAULT 0,
  state               text
);
-- The lane rule, enforced by the database: one active run per session, whatever the claim query does.
CREATE UNIQUE INDEX agent_run_queue_one_active_per_session
  ON agent_run_queue (session_id) WHERE status IN ('running', 'awaiting_approval');
CREATE INDEX agent_run_queue_queued ON agent_run_queue (queue_seq) WHERE status = 'queued';
CREATE INDEX agent_run_queue_session_seq ON agent_run_queue (session_id, queue_seq);
CREATE INDEX agent_run_queue_leases ON agent_run_queue (lease_owner, lease_expires_at)
  WHERE status = 'running';
CREATE INDEX agent_run_queue_tenant_created ON agent_run_queue (tenant_id, created_at DESC);

CREATE TABLE session_messages (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id   text NOT NULL,
  session_id  uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  run_id      uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  seq         integer NOT NULL,
  role        text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  payload     jsonb NOT NULL,
  token_count integer,
  created_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT session_messages_session_seq_key UNIQUE (session_id, seq)
);
CREATE INDEX session_messages_run ON session_messages (run_id);

CREATE TABLE run_events (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id  text NOT NULL,
  run_id     uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  seq        integer NOT NULL,
  type       text NOT NULL,
  data       jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT run_events_run_seq_key UNIQUE (run_id, seq)
);

CREATE TABLE tool_executions (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id    text NOT NULL,
  run_id       uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  session_id   uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  tool_call_id text NOT NULL,
  name         text NOT NULL,
  args         jsonb NOT NULL,
  status       text NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'interrupted')),
  result       jsonb,
  error        jsonb,
  worker_id    text,
  attempt      integer NOT NULL DEFAULT 1,
  approval_id  uuid,
  started_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,
  CONSTRAINT tool_executions_run_call_key UNIQUE (run_id, tool_call_id)
);

CREATE TABLE agent_tool_policies (
  id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id          text NOT NULL,
  agent_id           uuid REFERENCES agents (id) ON DELETE CASCADE,
  profile            text NOT NULL DEFAULT 'coding'
                       CHECK (profile IN ('minimal', 'coding', 'messaging', 'full')),
  allow              text[] NOT NULL DEFAULT '{}',
  deny               text[] NOT NULL DEFAULT '{}',
  require_approval   jsonb NOT NULL DEFAULT '{}'::jsonb,
  max_calls_per_turn integer,
  max_calls_per_run  integer,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT agent_tool_policies_scope_key UNIQUE NULLS NOT DISTINCT (tenant_id, agent_id)
);

CREATE TABLE agent_memory_entries (
  id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id        text NOT NULL,
  agent_id         uuid REFERENCES agents (id) ON DELETE CASCADE,
  session_id       uuid REFERENCES agent_sessions (id) ON DELETE SET NULL,
  content          text NOT NULL,
  tags             text[] NOT NULL DEFAULT '{}',
  importance       real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
  document_id      uuid,
  chunk_index      integer,
  embedding        vector,
  embedder         text,
  embedding_dim    integer,
  content_tsv      tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
  access_count     integer NOT NULL DEFAULT 0,
  last_accessed_at timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CHECK (embedding IS NULL OR vector_dims(embedding) = embedding_dim)
);
-- One HNSW index per supported dimension (pgvector's documented way to index mixed dimensions).
CREATE INDEX agent_memory_entries_hnsw_256 ON agent_memory_entries
  USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE embedding_dim = 256;
CREATE INDEX agent_memory_entries_hnsw_768 ON agent_memory_entries
  USING hnsw ((embedding::vector(768)) vector_cosine_ops) WHERE embedding_dim = 768;
CREATE INDEX agent_memory_entries_hnsw_1536 ON agent_memory_entries
  USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE embedding_dim = 1536;
CREATE INDEX agent_memory_entries_tsv ON agent_memory_entries USING gin (content_tsv);
CREATE INDEX agent_memory_entries_tenant_agent ON agent_memory_entries (tenant_id, agent_id);

CREATE TABLE subagent_spawns (
  id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id         text NOT NULL,
  parent_run_id     uuid NOT NULL REFERENCES agent_run_queue (id) ON DELETE CASCADE,
  parent_session_id uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  child_session_id  uuid REFERENCES agent_sessions (id) ON DELETE SET NULL,
  child_run_id      uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  agent_id          uuid REFERENCES agents (id),
  task              text NOT NULL,
  status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
  result            jsonb,
  created_at        timestamptz NOT NULL DEFAULT now(),
  finished_at       timestamptz
);
CREATE INDEX subagent_spawns_parent ON subagent_spawns (parent_run_id);

CREATE TABLE agent_context_snapshots (
  id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id         text NOT NULL,
  session_id        uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  run_id            uuid REFERENCES agent_run_queue (id) ON DELETE SET NULL,
  summary           text NOT NULL,
  first_message_seq integer NOT NULL,
  last_message_seq  integer NOT NULL,
  tokens_before     integer NOT NULL,
  tokens_after      integer NOT NULL,
  model             text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  CHECK (first_message_seq <= last_message_seq)
);
CREATE INDEX agent_context_snapshots_session ON agent_context_snapshots (session_id, created_at);

-- The session workspace: durable files shared by every worker (tools read and write here).
CREATE TABLE workspace_files (
  tenant_id  text NOT NULL,
  session_id uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
  path       text NOT NULL CHECK (length(path) BETWEEN 1 AND 512),
  content    bytea NOT NULL,
  size       integer NOT NULL,
  sha256     text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, path)
);

-- ---------------------------------------------------------------- RLS
DO $rls$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['agents', 'agent_sessions', 'agent_run_queue', 'session_messages',
      'run_events', 'tool_executions', 'agent_tool_policies', 'agent_memory_entries',
      'subagent_spawns', 'agent_context_snapshots', 'workspace_files']
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

-- The worker role sees the queue across tenants (to claim and lease runs) and nothing else.
GRANT SELECT, UPDATE ON agent_run_queue TO agent_runtime_worker;
CREATE POLICY queue_workers ON agent_run_queue FOR ALL TO agent_runtime_worker
  USING (true) WITH CHECK (true);

-- ---------------------------------------------------------------- NOTIFY
-- agent_runtime_runs: a run became claimable (queued, or its lane was freed) -> wake workers.
CREATE FUNCTION agent_runtime_notify_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('agent_runtime_runs', NEW.id::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER agent_run_queue_notify_insert AFTER INSERT ON agent_run_queue
  FOR EACH ROW EXECUTE FUNCTION agent_runtime_notify_runs();
CREATE TRIGGER agent_run_queue_notify_status AFTER UPDATE OF status ON agent_run_queue
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                     AND (NEW.status = 'queued' OR OLD.status IN ('running', 'awaiting_approval')))
  EXECUTE FUNCTION agent_runtime_notify_runs();

-- agent_runtime_cancel: a cancel was requested -> the worker holding the run interrupts it.
CREATE FUNCTION agent_runtime_notify_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('agent_runtime_cancel', NEW.id::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER agent_run_queue_notify_cancel AFTER UPDATE OF cancel_requested_at ON agent_run_queue
  FOR EACH ROW WHEN (OLD.cancel_requested_at IS NULL AND NEW.cancel_requested_at IS NOT NULL)
  EXECUTE FUNCTION agent_runtime_notify_cancel();

-- agent_runtime_events: "<run_id>:<seq>" for every stored event -> SSE streams wake up.
CREATE FUNCTION agent_runtime_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('agent_runtime_events', NEW.run_id::text || ':' || NEW.seq::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER run_events_notify AFTER INSERT ON run_events
  FOR EACH ROW EXECUTE FUNCTION agent_runtime_notify_event();
