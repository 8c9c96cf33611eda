"""agent-runtime: a multi-tenant LLM agent runtime on Postgres."""
