-- Observability: the W3C trace context a run was enqueued under, and what the metrics scrape may
-- read across tenants.

-- traceparent/tracestate of the request (or tool call) that enqueued the run; the worker
-- continues that trace. NULL when tracing is off. No tenant data: ids and flags only.
ALTER TABLE agent_run_queue ADD COLUMN trace_context jsonb;

-- The scrape reads queue depth by status (agent_runtime_worker already sees status and
-- not_before/created_at on agent_run_queue) and the age of pending approvals: this column too.
GRANT SELECT (created_at) ON tool_approvals TO agent_runtime_worker;
