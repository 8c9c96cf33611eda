-- A tenant's day of usage in 16 rows (shards), not one: every POST (runs + 1) and every model
-- call's usage (tokens) of a tenant used to update the same row, and each transaction held that
-- row's lock until it committed, so a busy tenant's posts and answers queued behind each other
-- (bench/queue: 79 ms mean wait per POST at 16 clients). A writer now adds to a random shard;
-- readers sum the day's shards (app/tenants/quotas.py tokens_today).
ALTER TABLE tenant_usage_daily ADD COLUMN shard smallint NOT NULL DEFAULT 0
  CHECK (shard BETWEEN 0 AND 15);
ALTER TABLE tenant_usage_daily DROP CONSTRAINT tenant_usage_daily_pkey;
ALTER TABLE tenant_usage_daily ADD PRIMARY KEY (tenant_id, day, shard);
