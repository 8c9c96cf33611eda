-- Fallback models: a run's input/output tokens split by the model that used them,
-- {"<model>": {"inputTokens": n, "outputTokens": n}}; input_tokens/output_tokens stay the totals.
-- Runs stored before this column have {} (their usage is in the totals only).
ALTER TABLE agent_run_queue ADD COLUMN usage_by_model jsonb NOT NULL DEFAULT '{}';
