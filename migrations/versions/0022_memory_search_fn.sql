-- Hybrid memory search candidates through one SECURITY DEFINER function (app/memory/search.py).
--
-- Why: under RLS Postgres evaluates the non-LEAKPROOF `content_tsv @@ query` only after the
-- tenant policy, so the GIN index on content_tsv could never serve a tenant's full-text search:
-- every search ranked all of the tenant's rows (0002). And the policy's tenant is a parameter the
-- planner cannot see, so it could not tell a tenant with 100k entries (HNSW) from one with 30
-- (btree + sort). This function runs as its owner, the migrating role, which bypasses RLS, and
-- applies the tenant itself:
-- * the tenant comes from the request's claims (public.agent_runtime_tenant_id(), as the
--   tenant_isolation policy of agent_memory_entries reads it), never from an argument; without
--   a tenant it raises. The other arguments only narrow the search within that tenant;
-- * tenant_isolation (tenant_id = the claims' tenant, for every role of the tenant) is the only
--   policy of agent_memory_entries for agent_runtime_app, so that one condition on each side is
--   the whole visibility rule;
-- * the statement is planned per call with the tenant as a constant (EXECUTE ... USING), so the
--   planner picks HNSW / GIN for a big tenant and the (tenant_id, ...) btree for a small one;
-- * fixed search_path, schema-qualified table; EXECUTE for agent_runtime_app only.
-- If the owner does not bypass RLS (FORCE RLS applies to table owners without BYPASSRLS), the
-- policy still applies inside: same rows, the GIN index just goes unused again.
--
-- Returns the candidates fused like the statement it replaces: vector side (nearest `candidates`
-- of `embedder` at `dim`, HNSW at `ef_search` with relaxed iterative scans) FULL JOIN text side (best
-- `candidates` by ts_rank_cd, normalisation 1), with 1-based ranks on each side.

CREATE FUNCTION public.agent_runtime_memory_candidates(
  query text, qvec text, embedder text, dim integer, agent uuid, tags text[], candidates integer,
  ef_search integer)
RETURNS TABLE (id uuid, vector_rank bigint, vector_similarity float8, text_rank bigint,
               text_score real, importance real, age_days float8, embedding real[])
LANGUAGE plpgsql SECURITY DEFINER  -- volatile: it sets hnsw.* for the transaction
SET search_path = pg_catalog, public
AS $fn$
DECLARE
  tenant text := public.agent_runtime_tenant_id();
  filters text := '';
  vec text;
BEGIN
  IF coalesce(tenant, '') = '' THEN
    RAISE EXCEPTION 'memory search needs a tenant in request.jwt.claims'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF dim IS NULL OR dim NOT BETWEEN 1 AND 16000 OR candidates IS NULL OR ef_search IS NULL THEN
    RAISE EXCEPTION 'memory search: bad dim, candidates or ef_search'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF agent IS NOT NULL THEN
    filters := filters || ' AND (e.agent_id = $5 OR e.agent_id IS NULL)';
  END IF;
  IF cardinality(tags) > 0 THEN
    filters := filters || ' AND e.tags @> $6';
  END IF;
  IF qvec IS NULL THEN
    vec := 'SELECT NULL::uuid AS id, NULL::float8 AS distance, NULL::real AS importance,
              NULL::timestamptz AS updated_at, NULL::vector AS embedding WHERE false';
  ELSE
    -- For the rest of the transaction: the graph's search width, and keep scanning the graph
    -- when other tenants' rows or the filters drop rows.
    PERFORM set_config('hnsw.ef_search', ef_search::text, true),
            set_config('hnsw.iterative_scan', 'relaxed_order', true);
    -- Written exactly like the partial HNSW index of dimension `dim` so that index serves it.
    vec := format(
      'SELECT e.id, e.embedding::vector(%1$s) <=> CAST($3 AS vector(%1$s)) AS distance,
              e.importance, e.updated_at, e.embedding
       FROM public.agent_memory_entries e
       WHERE e.tenant_id = $1 AND e.embedding_dim = %1$s AND e.embedder = $4 %2$s
       ORDER BY e.embedding::vector(%1$s) <=> CAST($3 AS vector(%1$s))
       LIMIT $7', dim, filters);
  END IF;
  RETURN QUERY EXECUTE format(
    'WITH vec AS MATERIALIZED (%1$s),
     vec_ranked AS (SELECT *, row_number() OVER (ORDER BY distance, id) AS vector_rank FROM vec),
     txt AS MATERIALIZED (
       SELECT e.id, ts_rank_cd(e.content_tsv, q.query, 1) AS text_score, e.importance,
              e.updated_at,
              CASE WHEN e.embedder = $4 AND e.embedding_dim = %2$s THEN e.embedding END
                AS embedding
       FROM public.agent_memory_entries e, websearch_to_tsquery(''english'', $2) AS q(query)
       WHERE e.tenant_id = $1 AND e.content_tsv @@ q.query %3$s
       ORDER BY text_score DESC, e.id
       LIMIT $7),
     txt_ranked AS (
       SELECT *, row_number() OVER (ORDER BY text_score DESC, id) AS text_rank FROM txt)
     SELECT coalesce(v.id, t.id), v.vector_rank, 1 - v.distance, t.text_rank, t.text_score,
            coalesce(v.importance, t.importance),
            (extract(epoch FROM now() - coalesce(v.updated_at, t.updated_at)) / 86400.0)::float8,
            coalesce(v.embedding, t.embedding)::real[]
     FROM vec_ranked v FULL JOIN txt_ranked t ON t.id = v.id', vec, dim, filters)
    USING tenant, query, qvec, embedder, agent, tags, candidates;
END
$fn$;

COMMENT ON FUNCTION public.agent_runtime_memory_candidates IS
  'Hybrid memory search candidates of the claims'' tenant (SECURITY DEFINER, see 0022).';

-- pgvector may live outside public (e.g. Supabase's `extensions`): its type and <=> must resolve.
DO $path$
DECLARE
  vs name := (SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
              WHERE x.extname = 'vector');
BEGIN
  IF vs IS NOT NULL AND vs NOT IN ('public', 'pg_catalog') THEN
    EXECUTE format('ALTER FUNCTION public.agent_runtime_memory_candidates '
                   'SET search_path = pg_catalog, public, %I', vs);
  END IF;
END
$path$;

REVOKE ALL ON FUNCTION public.agent_runtime_memory_candidates FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.agent_runtime_memory_candidates TO agent_runtime_app;
